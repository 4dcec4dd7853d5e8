"""Datasets stream records deterministically; readers fail with one clear line; files read back identically."""

from __future__ import annotations

import gzip
import logging
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.datasets import open_dataset, write_dataset
from keysplit.datasets.base import decode_record, encode_record
from keysplit.datasets.generators import guide_table, inverse_cdf, zipf_cdf
from keysplit.errors import DatasetError, SpecError


def keys_of(spec: str) -> list[str]:
    return [k for _, keys in open_dataset(spec).records() for k in keys]


def test_generators_are_deterministic_and_seeded():
    spec = "zipf:z=1.2,keys=500,messages=3000,seed=7"
    assert keys_of(spec) == keys_of(spec)
    assert keys_of(spec) != keys_of(spec.replace("seed=7", "seed=8"))


def test_zipf_rank_one_has_the_zipf_probability():
    st = open_dataset("zipf:z=1.0,keys=100,messages=200000,seed=1").stats()
    harmonic = sum(1 / r for r in range(1, 101))
    assert st["p1"] == pytest.approx(1 / harmonic, rel=0.03)


@pytest.mark.parametrize(("mu", "sigma", "p1"), [(1.789, 2.366, 0.1471), (2.245, 1.133, 0.0701)])
def test_lognormal_reproduces_the_pkg_papers_p1(mu, sigma, p1):
    """PKG Table 1: LN1 has p1 = 14.71%, LN2 7.01%."""
    st = open_dataset(f"lognormal:mu={mu},sigma={sigma},messages=200000,seed=3").stats()
    assert st["p1"] == pytest.approx(p1, abs=0.003)


def test_country_skew_has_204_countries_and_the_hot_ratio():
    st = open_dataset("country-skew:ratio=0.6,messages=50000,seed=2").stats()
    assert st["keys"] == 204
    assert st["p1"] == pytest.approx(0.6, abs=0.01)


def test_drift_changes_the_hot_key_after_the_change_point():
    records = keys_of("drift:z=1.2,keys=1000,messages=20000,seed=1,change=0.5")
    first, second = records[:10000], records[10000:]
    top = lambda ks: max(set(ks), key=ks.count)  # noqa: E731
    assert top(first) != top(second)
    assert first.count(top(second)) < second.count(top(second)) / 20


def test_generators_stream_in_constant_memory():
    tracemalloc.start()
    for _ in open_dataset("zipf:keys=1000,messages=300000").records():
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5_000_000  # O(keys), not O(messages)


def test_text_reader_tokenises_lines_and_reads_gzip(tmp_path):
    text = "The cat's hat.\n\nthe_end, THE END 42\n"
    plain, packed = tmp_path / "a.txt", tmp_path / "a.txt.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    expected = [(None, ["the", "cat's", "hat"]), (None, ["the", "end", "the", "end", "42"])]
    assert list(open_dataset(f"text:{plain}").records()) == expected
    assert list(open_dataset(f"text:{packed}").records()) == expected


def test_invalid_utf8_is_replaced_counted_and_reported(tmp_path, caplog):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nbad \xff\xfe line\nanother \xc3\n")
    ds = open_dataset(f"text:{path}")
    with caplog.at_level(logging.WARNING, logger="keysplit"):
        records = list(ds.records())
    assert len(records) == 3 and ds.invalid_utf8_lines == 2
    assert "2 line(s) were not valid UTF-8" in caplog.text


def test_edge_list_key_is_the_destination_and_comments_are_skipped(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# FromNodeId\tToNodeId\n1\t2\n1 3\nmalformed\n4\t2\n")
    assert keys_of(f"edges:{path}") == ["2", "3", "2"]


def test_csv_reader_with_time_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('ts,ticker,price\n1.5,"$AAPL",3\n2.0,,4\n3,$GOOG,5\n')
    ds = open_dataset(f"csv:{path},key=ticker,time=ts")
    assert list(ds.records()) == [(1.5, ["$AAPL"]), (3.0, ["$GOOG"])]  # the empty key is skipped
    assert ds.empty_keys == 1


@pytest.mark.parametrize(
    ("make", "spec", "message"),
    [
        (None, "text:{d}/missing.txt", "dataset file not found"),
        (lambda d: None, "text:{d}", "is a directory"),
        (lambda d: (d / "e.txt").write_text(""), "text:{d}/e.txt", "dataset file is empty"),
        (lambda d: (d / "c.csv").write_text("a,b\n1,2\n"), "csv:{d}/c.csv,key=word", "no column 'word'"),
        (None, "csv:{d}/c.csv", "take key=COLUMN"),
        (None, "nosuch:x", "unknown dataset"),
        (None, "zipf:z=-1", "z=-1 is out of range"),
        (None, "zipf:keys=0", "keys=0 is out of range"),
        (None, "zipf:bogus=1", "zipf has no parameter 'bogus'"),
    ],
)
def test_bad_datasets_fail_with_one_clear_line(tmp_path, make, spec, message):
    if make:
        make(tmp_path)
    with pytest.raises((DatasetError, SpecError)) as err:
        open_dataset(spec.format(d=tmp_path))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_written_dataset_reads_back_record_for_record(tmp_path):
    gen = open_dataset("zipf:z=1.1,keys=300,messages=5000,seed=4")
    spec, count = write_dataset(gen, str(tmp_path / "z.csv.gz"))
    assert count == 5000
    back = open_dataset(spec)
    assert list(back.records()) == list(gen.records())
    assert back.sha256() == gen.sha256()


def test_records_encode_and_decode():
    for record in [(None, ["a", "b c"]), (12.5, ["x"])]:
        assert decode_record(encode_record(record)) == record


def test_a_generator_written_as_text_reads_back_the_same_keys(tmp_path):
    gen = open_dataset("zipf:z=1.1,keys=300,messages=1005,seed=4")
    spec, lines = write_dataset(gen, str(tmp_path / "z.txt"), words_per_line=10)
    assert (spec, lines) == (f"text:{tmp_path / 'z.txt'}", 101)
    back = [k for _, keys in open_dataset(spec).records() for k in keys]
    assert back == [k for _, keys in gen.records() for k in keys]
    with pytest.raises(DatasetError, match="not one lower-case word"):
        write_dataset(open_dataset("country-skew:messages=10"), str(tmp_path / "c.txt"), words_per_line=5)


@settings(max_examples=60, deadline=None)
@given(z=st.floats(0, 3), keys=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1))
def test_zipf_guide_table_sampling_is_exactly_the_inverse_cdf(z, keys, seed):
    """The fast sampler returns what np.searchsorted(cdf, u, side="right") returns, for every u."""
    cdf = zipf_cdf(z, keys)
    u = np.random.default_rng(seed).random(5000)
    u[:3] = [0.0, np.nextafter(1.0, 0.0), cdf[0]]
    assert np.array_equal(inverse_cdf(cdf, guide_table(cdf), u), np.searchsorted(cdf, u, side="right"))
