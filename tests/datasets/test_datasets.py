"""Datasets stream records deterministically; readers fail with one clear line; files read back identically."""

from __future__ import annotations

import gzip
import itertools
import logging
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.cli import main
from keysplit.datasets import open_dataset, write_dataset
from keysplit.datasets.base import Dataset, decode_record, encode_record
from keysplit.datasets.generators import GENERATORS, Drift, guide_table, inverse_cdf, zipf_cdf
from keysplit.errors import DatasetError, SpecError
from spark_replay.sparkinput import text_chunks
from spark_replay.text_input import byte_runs, plain_text_chunks


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


def test_a_csv_key_whose_tab_becomes_a_space_is_said_once_with_where_and_what(tmp_path, caplog):
    """Records separate keys by tabs and lines, so a key's tab is read as a space and "a\tb" merges with "a b":
    keysplit says so (once, however often the file is read), naming the first such key and its line."""
    path = tmp_path / "keys.csv"
    path.write_text('page,n\n"a b",1\n"a\tb",2\n" edge\t",3\n"c\t\td",4\n')
    ds = open_dataset(f"csv:{path},key=page")
    with caplog.at_level(logging.WARNING, logger="keysplit"):
        assert keys_of(f"csv:{path},key=page") == ["a b", "a b", "edge", "c  d"]
        list(ds.records())
        list(ds.records())
    said = [r.getMessage() for r in caplog.records if "tab or line break" in r.getMessage()]
    assert len(said) == 2  # one per dataset object (two here), not one per pass
    assert "2 key(s) of column 'page'" in said[0] and "(the first at line 3): 'a\\tb' is counted as 'a b'" in said[0]


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
        (None, "csv:{d}/c.csv,key=a,key=b", "c.csv,key=a,key=b': csv:key=a,key=b sets key twice"),
        (None, "nosuch:x", "unknown dataset"),
        (None, "zipf:z=-1", "z=-1 is out of range"),
        (None, "zipf:keys=0", "keys=0 is out of range"),
        (None, "zipf:bogus=1", "zipf has no parameter 'bogus'"),
        (None, "drift:phases=1000000000,messages=10,keys=5", "drift: phases=1000000000 exceeds messages=10"),
        (None, "zipf:keys=1000000000000", "zipf: keys=1000000000000 is out of range (1 to 100,000,000"),
        (None, "drift:keys=100000001", "drift: keys=100000001 is out of range (1 to 100,000,000"),
        (None, "lognormal:mu=nan", "lognormal: mu=nan is out of range (a finite number)"),
        (None, "lognormal:sigma=inf", "lognormal: sigma=inf is out of range (a finite number above 0)"),
        (None, "zipf:z=nan", "zipf: z=nan is out of range (a finite number at least 0)"),
        (None, "zipf:z=inf", "zipf: z=inf is out of range"),
        (None, "drift:change=-inf", "drift: change=-inf is out of range"),
        (None, "country-skew:ratio=nan", "country-skew: ratio=nan is out of range"),
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


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_generator_refuses_a_negative_seed(name, capsys):
    assert main(["datasets", "stats", f"{name}:seed=-1"]) == 2
    assert f"keysplit: error: {name}: seed=-1 is out of range (at least 0)" in capsys.readouterr().err


def test_drift_with_as_many_phases_as_messages_streams_at_once():
    """Only the phases a chunk touches are computed, so a billion phases cost nothing up front."""
    spec = "drift:keys=5,messages=1000000000,phases=1000000000,shift=100000000000000000000"
    assert len(list(itertools.islice(open_dataset(spec).records(), 10))) == 10


@settings(max_examples=80, deadline=None)
@given(messages=st.integers(2, 3000), phases=st.integers(2, 3000), change=st.floats(0.001, 0.999),
       start=st.integers(0, 2999), n=st.integers(1, 300))
def test_drift_phase_of_a_message_is_the_last_phase_started_before_it(messages, phases, change, start, n):
    phases = min(phases, messages)
    drift = Drift(z=1.0, keys=10, messages=messages, seed=1, change=change, phases=phases, shift=0)
    starts = [drift._phase_start(p) for p in range(phases)]
    for i in range(start % messages, min(start % messages + n, messages)):
        assert drift._phase_of(i) == int(np.searchsorted(starts, i, side="right")) - 1


@pytest.mark.parametrize("words_per_line", [None, 4])
def test_generate_refuses_to_overwrite_the_dataset_it_reads(tmp_path, monkeypatch, capsys, words_per_line):
    monkeypatch.chdir(tmp_path)
    name = "big.txt" if words_per_line else "big.csv"
    write_dataset(open_dataset("zipf:keys=50,messages=20000"), name, words_per_line)
    before = (tmp_path / name).read_bytes()
    (tmp_path / "link").symlink_to(name)
    spec = f"text:{name}" if words_per_line else f"csv:{name},key=key"
    extra = ["--words-per-line", str(words_per_line)] if words_per_line else []
    for out in (name, f"./{name}", str(tmp_path / "link")):
        assert main(["datasets", "generate", spec, "--out", out, *extra]) == 2
        assert f"keysplit: error: --out {out} is the dataset being read; choose another output file" \
            in capsys.readouterr().err
    assert (tmp_path / name).read_bytes() == before
    assert main(["datasets", "generate", spec, "--out", "copy.txt" if words_per_line else "copy.csv", *extra]) == 0


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999"])
def test_csv_time_column_must_be_finite(tmp_path, capsys, value):
    path = tmp_path / "events.csv"
    path.write_text("key,time\n" + "".join(f"k{i},{i}\n" for i in range(5)) + f"k5,{value}\n")
    assert main(["datasets", "stats", f"csv:{path},key=key,time=time"]) == 2
    assert f"keysplit: error: {path} line 7: time column 'time' holds {value}, not a finite number" \
        in capsys.readouterr().err


def test_parquet_time_column_must_be_finite_and_the_row_is_named(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"key": ["a", "b", "c"], "time": [1.0, 2.0, float("nan")]}), path, row_group_size=2)
    with pytest.raises(DatasetError, match=r"events.parquet row 3: time column 'time' holds nan, not a finite"):
        list(open_dataset(f"parquet:{path},key=key,time=time").records())


def test_corrupt_gzip_data_is_one_line(corrupt_gzip, capsys):
    assert main(["datasets", "stats", f"text:{corrupt_gzip}"]) == 2
    assert f"keysplit: error: cannot read dataset file {corrupt_gzip}: corrupt gzip data (" in capsys.readouterr().err


def test_corrupt_parquet_pages_under_a_valid_footer_are_one_line(corrupt_parquet, capsys):
    assert main(["datasets", "stats", f"parquet:{corrupt_parquet},key=key"]) == 2
    assert f"keysplit: error: cannot read Parquet file {corrupt_parquet}: Corrupt snappy compressed data" \
        in capsys.readouterr().err


def test_csv_fields_longer_than_the_csv_modules_default_limit_are_read(tmp_path):
    path = tmp_path / "blobs.csv"
    path.write_text("key,blob\na," + "x" * 200_000 + "\nb,y\n")
    assert keys_of(f"csv:{path},key=key") == ["a", "b"]


def test_a_csv_field_over_16_mib_is_refused_with_its_line(tmp_path, capsys):
    path = tmp_path / "blobs.csv"
    path.write_text("key,blob\na,x\nb," + "y" * (16 << 20 | 1) + "\n")
    assert main(["datasets", "stats", f"csv:{path},key=key"]) == 2
    # the line is over the readers' 16 MiB bound too, which refuses it before the csv module reads it whole
    assert f"keysplit: error: {path} line 3: a line longer than 16 MiB" in capsys.readouterr().err


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_line(tmp_path):
    csv_path, text_path, edge_path = tmp_path / "b.csv", tmp_path / "b.txt", tmp_path / "b.edges"
    csv_path.write_text("key,time\na,1\nb,2\n", encoding="utf-8-sig")
    text_path.write_text("hello world\n", encoding="utf-8-sig")
    edge_path.write_text("# FromNodeId ToNodeId\n1 2\n", encoding="utf-8-sig")
    assert list(open_dataset(f"csv:{csv_path},key=key,time=time").records()) == [(1.0, ["a"]), (2.0, ["b"])]
    assert keys_of(f"text:{text_path}") == ["hello", "world"]
    assert keys_of(f"edges:{edge_path}") == ["2"]  # the comment line is still a comment


def test_a_quoted_csv_field_spanning_lines_is_refused_here_and_in_the_replay(tmp_path, capsys):
    path = tmp_path / "notes.csv"
    path.write_text('key,note\na,"one, ""quoted"""\nb,"line one\nline two"\nc,x\n')
    assert main(["datasets", "stats", f"csv:{path},key=key"]) == 2
    assert f"keysplit: error: {path} line 3: a quoted field spans lines, which keysplit's line-by-line CSV " \
        "reader does not support" in capsys.readouterr().err
    # The replay's readers, given the file's lines as Spark's text source splits them (one run of the split at
    # byte 0): its compiled key-column reader and its row path both refuse it too, without a line number.
    dataset = open_dataset(f"csv:{path},key=key")
    lines = [line + b"\n" for line in path.read_bytes().split(b"\n")[:-1]]
    for read in (lambda: plain_text_chunks(byte_runs(iter([(0, [lines])])), dataset=dataset),
                 lambda: text_chunks(dataset, iter([(0, [lines])]))):
        with pytest.raises(DatasetError, match=f"^{path}: a quoted field spans lines"):
            list(read())
    path.write_text('key,"a\nb\n')
    with pytest.raises(DatasetError, match="line 1: a quoted field spans lines"):
        open_dataset(f"csv:{path},key=key")


@pytest.mark.parametrize("spec", [
    "zipf:z=1.1,keys=3000,messages=150000,seed=7",  # more than two sampling chunks
    "lognormal:mu=1.789,sigma=5,messages=30000,seed=3",  # indices beyond the flat bincount table
    "country-skew:ratio=0.3,messages=20000,seed=2",  # names that are not k<i>
    "drift:z=1.2,keys=800,messages=70000,seed=4,phases=5",
])
def test_generator_stats_in_numpy_equal_the_pass_over_records(spec):
    ds = open_dataset(spec)
    assert ds.stats() == Dataset.stats(ds)
    assert ds.message_count() == Dataset.message_count(ds) == ds.params["messages"]


def test_generate_replaces_no_file_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "zipf.txt"
    corpus.write_text("a corpus of the user's own\n" * 3000)
    before = corpus.read_bytes()
    argv = ["datasets", "generate", "zipf:messages=100", "--out", "zipf.txt", "--words-per-line", "5"]
    assert main(argv) == 2
    assert "keysplit: error: --out zipf.txt exists; choose another name, or add --force to replace it" \
        in capsys.readouterr().err
    assert corpus.read_bytes() == before
    assert main([*argv, "--force"]) == 0
    assert keys_of("text:zipf.txt") == keys_of("zipf:messages=100")


@pytest.mark.parametrize(("out", "extra", "message"), [
    ("zipf.txt", [], "--out zipf.txt names a text file, but this writes CSV; add --words-per-line N"),
    ("zipf.txt.gz", [], "--out zipf.txt.gz names a text file, but this writes CSV"),
    ("zipf.csv", ["--words-per-line", "3"], "--out zipf.csv names a CSV file, but this writes text; name it .txt"),
    ("zipf", [], "--out zipf: name the file .csv or .csv.gz"),
    ("zipf.dat", ["--words-per-line", "3"], "--out zipf.dat: name the file .txt or .txt.gz"),
])
def test_generate_writes_the_format_its_file_name_says(tmp_path, monkeypatch, capsys, out, extra, message):
    monkeypatch.chdir(tmp_path)
    assert main(["datasets", "generate", "zipf:messages=100", "--out", out, *extra]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_generate_refuses_more_messages_than_its_bound_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["datasets", "generate", "zipf:messages=100000000000", "--out", "big.csv"]) == 2
    assert "messages=100000000000 is out of range (1 to 10,000,000,000)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_killed_generate_leaves_nothing_under_the_final_name_and_the_next_one_clears_it(tmp_path):
    """The file is written under a hidden temporary name and renamed when complete: ``kill -9`` half-way leaves
    no truncated file that a later command would read as the dataset; the hidden file it leaves (named with its
    pid) is removed by the next generate of that file, and a live writer's is left alone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "big.csv"
    proc = subprocess.Popen([sys.executable, "-m", "keysplit.cli", "datasets", "generate",
                             "zipf:messages=1000000000", "--out", str(out)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not any(p.stat().st_size > 0 for p in tmp_path.glob(".big.csv.*.tmp")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not out.exists()
    left = list(tmp_path.glob(f".big.csv.{proc.pid}-*.tmp"))
    assert len(left) == 1 and left[0].stat().st_size > 0
    live = tmp_path / f".big.csv.{os.getpid()}-x.tmp"  # this process: alive
    live.write_text("")
    assert main(["datasets", "generate", "zipf:messages=100", "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name])


@pytest.mark.parametrize("kind", ["text", "csv", "edges"])
def test_a_binary_file_is_refused_in_one_line(tmp_path, capsys, kind):
    import random

    path = tmp_path / "blob.bin"
    path.write_bytes(random.Random(5).randbytes(5000))
    spec = f"{kind}:{path}" + (",key=key" if kind == "csv" else "")
    assert main(["simulate", "--dataset", spec, "-W", "2", "-g", "kg"]) == 2
    err = capsys.readouterr().err
    assert f"keysplit: error: dataset file {path} is not text (" in err and err.count("\n") == 1
    gz = tmp_path / "blob.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert main(["datasets", "stats", f"text:{gz}"]) == 2
    assert "is not text" in capsys.readouterr().err


def test_a_text_with_a_few_hostile_bytes_is_still_text(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_bytes(b"hello\x00 world \xff\xfe caf\xc3\xa9 \x1f\x7f \xef\xbf\xbd\n" * 200)
    assert open_dataset(f"text:{path}").stats()["messages"] == 200 * 3  # hello, world, café


def test_a_dataset_naming_a_file_without_its_reader_gets_a_suggestion(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zipf.txt").write_text("a b\n")
    (tmp_path / "zipf.csv.gz").write_bytes(gzip.compress(b"key\na\n"))
    for name, suggestion in (("zipf.txt", "text:zipf.txt"), ("zipf.csv.gz", "csv:zipf.csv.gz,key=key")):
        assert main(["datasets", "stats", name]) == 2
        assert f"did you mean '{suggestion}'?" in capsys.readouterr().err
