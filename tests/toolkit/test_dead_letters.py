"""A row the user's code refuses becomes a dead letter (docs/design/faults.md): the run finishes, names the row (its
stage, its place in the dataset, key, values and error) in the summary and in ``--collect``, exits 1, and every other
row's result is exact; no task dies. Each fault under exactly-once and at-least-once: a non-numeric value into ``Sum``,
a ``ZeroDivisionError`` in a user's ``add``, a ``RuntimeError`` in a user's ``merge``. And what the workers could not
import is refused when the topology is built."""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from keysplit.cli import main
from keysplit.runs import redis_server
from keysplit.runs.topology_run import read_results

ACCUMULATORS = '''
from keysplit.toolkit import Accumulator


class Shares(Accumulator):
    """The sum of 1000 // bytes: a row of 0 bytes raises ZeroDivisionError in add."""

    def __init__(self, field):
        super().__init__(field=field)
        self.field, self.fields = field, (field,)

    def zero(self):
        return 0

    def add(self, state, record):
        return state + 1000 // int(record[self.field])

    def merge(self, a, b):
        return a + b


class Fragile(Accumulator):
    """The sum of a field, as [sum, holds 13]: merge raises RuntimeError on a state holding a row of 13 bytes."""

    def __init__(self, field):
        super().__init__(field=field)
        self.field, self.fields = field, (field,)

    def zero(self):
        return [0, False]

    def add(self, state, record):
        value = int(record[self.field])
        return [state[0] + value, state[1] or value == 13]

    def merge(self, a, b):
        if a[1] or b[1]:
            raise RuntimeError("a state holding 13 cannot be merged")
        return [a[0] + b[0], False]

    def result(self, state):
        return state[0]
'''

TOPOLOGY = '''
from pages.accumulators import Fragile, Shares

from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology


class Pages(Topology):
    config = {config!r}
    views = FeedSpout.spec(fields=["page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg:d=2", par=2)
    partial = Aggregate.partial(inputs=route, accumulator={accumulator}, period=0.5, par=3)
    total = Aggregate.merge(inputs=partial, par=2)
'''

#: Each fault: the accumulator, the poison row's bytes, the stage that refuses it, the error's first words, and each
#: good row's contribution to its page's result.
FAULTS = {
    "non-numeric into Sum": ('Sum("bytes")', "oops", "partial", "AccumulatorError: field 'bytes' holds 'oops'",
                             int),
    "ZeroDivisionError in add": ('Shares("bytes")', "0", "partial", "ZeroDivisionError", lambda b: 1000 // int(b)),
    "RuntimeError in merge": ('Fragile("bytes")', "13", "total", "RuntimeError: a state holding 13", int),
}
ROWS, POISON = 240, 117


def write_project(folder: Path, accumulator: str, poison: str, config: dict) -> tuple[Path, Path]:
    project = folder / "project"
    (project / "src" / "pages").mkdir(parents=True)
    (project / "topologies").mkdir()
    (project / "src" / "pages" / "__init__.py").write_text("")
    (project / "src" / "pages" / "accumulators.py").write_text(ACCUMULATORS)
    topology = project / "topologies" / "pagestats.py"  # not named after src/pages (sparse would import that)
    topology.write_text(TOPOLOGY.format(accumulator=accumulator, config=config))
    rng = random.Random(3)
    data = folder / "views.csv"
    with open(data, "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["page", "bytes"])
        for i in range(ROWS):
            page = f"/p/{min(int(rng.paretovariate(1.2)), 12)}"
            out.writerow([page, poison if i == POISON else rng.choice([v for v in range(1, 50) if v != 13])])
    return topology, data


def expected(data: Path, contribution) -> tuple[dict, dict]:
    """Each page's result over every row but the poison one (read with the csv module), and the poison row."""
    totals: Counter = Counter()
    with open(data, newline="") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            if i == POISON:
                poison = row
            else:
                totals[row["page"]] += contribution(row["bytes"])
    return dict(totals), poison


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_row_the_users_code_refuses_is_a_dead_letter_and_every_other_row_is_exact(home, redis_url, tmp_path, capsys,
                                                                                    fault, delivery):
    accumulator, poison_bytes, stage, error, contribution = FAULTS[fault]
    attempts = 2 if delivery == "at-least-once" else None  # settable; the default (3) otherwise
    config = {"keysplit.delivery": delivery, **({"keysplit.dead_letter.attempts": attempts} if attempts else {})}
    topology, data = write_project(tmp_path, accumulator, poison_bytes, config)
    totals, poison = expected(data, contribution)
    assert main(["run", str(topology), "--dataset", f"csv:{data},key=page", "--redis", redis_url, "--delivery",
                 delivery, "--worker-processes", "2", "--timeout", "300", "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    conn = redis_server.connect(redis_url)
    results = read_results(conn, summary["run_id"], "total")
    if accumulator.startswith("Fragile"):
        assert all(flag is False for _, flag in results.values())
        results = {page: state[0] for page, state in results.items()}
    assert results == totals
    assert summary["acked"] == summary["rows"] == ROWS and summary["task_deaths"] == 0
    [letter] = summary["dead_letters"]
    assert letter["stage"] == stage and letter["row"] == POISON and letter["key"] == poison["page"]
    assert letter["error"].startswith(error) and letter["attempts"] == (attempts or 3)
    if stage == "partial":  # the row's own values; a merge holds the row's contribution
        assert letter["values"] == {"page": poison["page"], "bytes": poison_bytes}
    # --collect reads the same from Redis alone, and says it as the run did: exit 1, the row named
    assert main(["run", str(topology), "--collect", summary["run_id"], "--redis", redis_url]) == 1
    text = capsys.readouterr().out
    assert "dead letters: 1 row(s)" in text and f"row {POISON} of the dataset, key {json.dumps(poison['page'])}" in text


def test_an_accumulator_defined_in_the_topology_file_is_refused_when_the_topology_is_built(tmp_path, capsys):
    """Every partial task would fail to import it (the workers import src/, never the topology file)."""
    topology = tmp_path / "mine.py"
    topology.write_text(ACCUMULATORS + TOPOLOGY.format(accumulator='Shares("bytes")', config={})
                        .replace("from pages.accumulators import Fragile, Shares\n", ""))
    assert main(["run", str(topology), "--dataset", "csv:nowhere.csv,key=page"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Shares is defined in the topology file" in err and "src/" in err and "\n" not in err, err
