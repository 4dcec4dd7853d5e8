"""The exactly-once merge on Redis alone (toolkit/commit.py, docs/design/exactly-once.md "Partials that aggregate"):
pre-merged states are applied once by the records they cover, with one ``merge`` per entry, never one per row, under
each fault the pieces can meet: an entry sent again after a lost reply, a replay of a committed row, a replay that
overtakes the first emission of its row, rows already complete, and a restarted merge task."""

from __future__ import annotations

import json
import secrets

import pytest

from keysplit.runs import redis_server
from keysplit.storm.exactly_once import Dedup
from keysplit.storm.keys import RunKeys
from keysplit.toolkit import Sum
from keysplit.toolkit.commit import Entry, ExactlyOnceCommit
from keysplit.toolkit.contract import record_id


class CountingSum(Sum):
    """Sum, counting its merges (in this process: the commit runs here)."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.merges = 0

    def merge(self, a, b):
        self.merges += 1
        return super().merge(a, b)


@pytest.fixture
def run(redis_url):
    conn = redis_server.connect(redis_url)
    keys = RunKeys(f"commit-{secrets.token_hex(4)}")
    acc = CountingSum("bytes")

    def task() -> ExactlyOnceCommit:  # a merge task: a new one is a restarted one
        commit = ExactlyOnceCommit(conn, keys, keys.stage("total", "results"), acc)
        commit.load(conn.hgetall(keys.stage("total", "results")))
        return commit

    return conn, keys, acc, task


def stored(conn, keys) -> dict:
    return {json.loads(k): json.loads(v) for k, v in conn.hgetall(keys.stage("total", "results")).items()}


def fold(rows: dict[int, int]) -> Entry:
    """A partial's first-emission entry: the rows (record -> bytes) of one key folded into one state."""
    return Entry(sum(rows.values()), sorted(rows))


def test_a_hot_key_split_over_partials_costs_the_merge_one_merge_per_partial_not_one_per_row(run):
    conn, keys, acc, task = run
    hot_a = {r: 10 for r in range(0, 400, 2)}  # 200 rows of the hot key on partial task 0
    hot_b = {r: 1 for r in range(1, 400, 2)}  # 200 on partial task 1 (PKG's second choice)
    cold = {400: 7, 401: 5}
    outcome = task().commit({'"hot"': [fold(hot_a), fold(hot_b)], '"cold"': [fold(cold)]})
    assert stored(conn, keys) == {"hot": 2200, "cold": 12}
    assert acc.merges == outcome.merges == outcome.entries == 3
    assert outcome.records == 402 and outcome.attempts == 1 and not outcome.split


def test_an_entry_sent_again_after_a_lost_reply_adds_nothing(run):
    conn, keys, _, task = run
    batch = {'"a"': [fold({0: 3, 1: 4})], '"b"': [fold({2: 5})]}
    merge = task()
    merge.commit(batch)
    again = merge.commit(batch)  # the script ran, its reply was lost, the task commits the same partials again
    assert stored(conn, keys) == {"a": 7, "b": 5}
    assert again.changed == [] and again.dropped == 3 and again.attempts == 2
    assert int(conn.get(keys.dedup_dropped)) == 3


def test_a_replayed_row_alone_counts_once_whether_or_not_its_first_emission_was_committed(run):
    conn, keys, _, task = run
    merge = task()
    merge.commit({'"a"': [fold({0: 3, 1: 4})]})
    # row 1 timed out after its commit (a lost ack) and replays; row 2's first emission was lost with a partial task
    outcome = merge.commit({'"a"': [Entry(4, [1]), Entry(6, [2])]})
    assert stored(conn, keys) == {"a": 13}
    assert outcome.dropped == 1 and outcome.merges == 1


def test_a_first_emission_overtaken_by_its_replay_is_not_applied_and_its_tuple_fails(run):
    """Row 1 timed out on its way (a slow partial), replayed alone and was committed first: the entry folding rows 0,
    1 and 2 cannot be split, so it is left out and its tuple failed; the replays of rows 0 and 2 then count them."""
    conn, keys, _, task = run
    merge = task()
    merge.commit({'"a"': [Entry(4, [1])]})
    outcome = merge.commit({'"a"': [Entry(3 + 4 + 5, [0, 1, 2], source="late flush")], '"b"': [fold({3: 9})]})
    assert outcome.split == {"late flush"}
    assert stored(conn, keys) == {"a": 4, "b": 9}  # the other keys of the flush commit: their replays drop then
    replays = merge.commit({'"a"': [Entry(3, [0]), Entry(4, [1]), Entry(5, [2])], '"b"': [Entry(9, [3])]})
    assert stored(conn, keys) == {"a": 12, "b": 9}
    assert replays.dropped == 2 and not replays.split


def test_rows_below_the_floor_are_complete_and_drop_without_their_marks(run):
    conn, keys, _, task = run
    merge = task()
    merge.commit({'"a"': [fold({0: 1, 1: 2})]})
    Dedup(conn, keys).complete([(0, 1), (1, 1)])  # both acked: the floor passes them and their marks go
    assert int(conn.get(keys.dedup_floor)) == 2 and conn.hlen(keys.dedup_seen) == 0
    late = task().commit({'"a"': [Entry(2, [1]), fold({2: 5})]})  # a stale replay of row 1, a new row 2
    assert stored(conn, keys) == {"a": 8} and late.dropped == 1


def test_a_restarted_task_whose_predecessor_committed_last_reads_again_and_stays_exact(run):
    conn, keys, _, task = run
    old, new = task(), task()  # the new process started while the old one was still finishing its last commit
    old.commit({'"a"': [fold({0: 1})]})
    outcome = new.commit({'"a"': [fold({1: 10})], '"b"': [Entry(1, [0])]})  # row 0 again, under another key's name
    assert stored(conn, keys) == {"a": 11}
    assert outcome.attempts == 2 and new.states['"a"'] == 11


def test_the_rows_of_one_entry_are_bits_of_its_mark_and_count_once_each(run):
    """A feed entry's rows are known by their places in it (contract.record_id), as a line's words are: each is a bit
    of the entry's mark (a field per 48 places), so two rows of one entry commit apart and a replay of one drops."""
    conn, keys, _, task = run
    first, third, far = record_id(5, 0), record_id(5, 2), record_id(5, 50)
    merge = task()
    merge.commit({'"a"': [fold({first: 3, far: 4})]})
    assert conn.hgetall(keys.dedup_seen) == {"5:0": "1", "5:1": "4"}  # bits 0 and 50 - 48
    outcome = merge.commit({'"a"': [Entry(4, [far]), fold({third: 5})]})  # row 50 replayed, row 2 fresh
    assert stored(conn, keys) == {"a": 12} and outcome.dropped == 1
    assert conn.hget(keys.dedup_seen, "5:0") == "5"
    again = task().commit({'"a"': [Entry(5, [third])]})  # a restarted task reads the marks: row 2 is committed
    assert stored(conn, keys) == {"a": 12} and again.dropped == 1 and again.attempts == 2


def test_an_entry_of_many_rows_completes_whole_and_its_marks_go(run):
    conn, keys, _, task = run
    task().commit({'"a"': [fold({record_id(0, p): 1 for p in range(60)})]})
    Dedup(conn, keys).complete([(0, 60)])  # the entry acked: 60 rows, two mark fields
    assert int(conn.get(keys.dedup_floor)) == 1 and conn.hlen(keys.dedup_seen) == 0
    late = task().commit({'"a"': [Entry(1, [record_id(0, 59)])]})
    assert stored(conn, keys) == {"a": 60} and late.dropped == 1
