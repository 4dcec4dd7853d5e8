"""The Redis layout of a word-count run: every key of run ``R`` starts with ``keysplit:run:R:``.

``keysplit compare`` and the Spark helper read runs through these names; keep them stable.

==========================  =====================================================================
key                         content
==========================  =====================================================================
``keysplit:runs``           sorted set: run id -> start time (Unix seconds); an id here is taken for good
``...:record``              hash: state (loading/loaded/running/finished/interrupted), owner pid, host,
                            started, grouping, dataset, lines, messages, reason (:mod:`.records`)
``...:summary``             string: JSON object of ``keysplit run --json``
``...:config``              string: JSON of the run's settings (what the topology was told)
``...:counts``              hash: word -> final total (HINCRBY by the aggregators before they ack)
``...:topk``                string: JSON ``[[word, count], ...]`` written by the top-k bolt
``...:topk_meta``           hash: ``words`` (sum of counts seen by top-k), ``updated`` (Unix time)
``...:feed``                stream: one entry per dataset record, fields ``r`` (encoded record), ``n`` (index
                            in the dataset), ``s`` (the line's sequence number in the feed: 0, 1, 2, ...)
``...:frequencies``         hash: word -> exact count (only for groupings that need a full pass)
``...:loads``               hash: counter index -> words processed (what PKG's probe reads; replays included)
``...:loads:once``          hash: counter index -> words whose commit came from it (exactly-once: once each)
``...:counter:{i}``         hash: metrics of counter ``i`` (processed, distinct, rate, busy_s, first_tuple, task, pid)
``...:keys:{i}``            set: the distinct words counter ``i`` has held (memory, DistCost)
``...:aggregator:{i}``      hash: aggregator ``i``'s ticks with partial counts: ``partials`` and ``busy_s``
``...:spout:{i}``           hash: emitted, acked, replayed, first_emit, last_ack, histogram (JSON)
``...:grouping_state``      string: JSON of the leader router's ``export_state()`` (groupings sharing state)
``...:grouping_states``     hash: version -> JSON of every state the leader published (followers choose by period)
``...:grouping_version``    string: the ``version`` of ``grouping_state`` (what followers poll)
``...:grouping_epoch``      string: the leader's progress, the latest period of event time it routed a message in
``...:grouping_unsynced``   string: messages followers decided without the leader's state for their period
``...:grouping_stats``      string: JSON of the leader router's grouping ``stats()`` (summary's grouping_stats)
``...:starts``              hash: ``component:index`` -> process starts of that task (restarts = starts - 1)
``...:received``            string: JSON of the configuration the first task to start received (what ran)
``...:dedup:seen``          hash: ``line:segment`` -> bit mask of the committed words of a line above the floor
``...:dedup:done``          hash: complete line above the floor -> its mark fields (:mod:`.exactly_once`)
``...:dedup:floor``         string: the lowest line not yet complete
``...:dedup:dropped``       string: word occurrences the commits dropped as counted before (replays)
``...:dedup:peak``          string: the most mark fields ``dedup:seen`` ever held
==========================  =====================================================================
"""

from __future__ import annotations

RUNS = "keysplit:runs"
#: The consumer group the spouts read the feed with.
FEED_GROUP = "spouts"


class RunKeys:
    """Key names of one run.

    >>> RunKeys("r1").counts
    'keysplit:run:r1:counts'
    >>> RunKeys("r1").counter(3)
    'keysplit:run:r1:counter:3'
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.prefix = p = f"keysplit:run:{run_id}:"
        self.summary = p + "summary"
        self.record = p + "record"
        self.config = p + "config"
        self.counts = p + "counts"
        self.topk = p + "topk"
        self.topk_meta = p + "topk_meta"
        self.feed = p + "feed"
        self.frequencies = p + "frequencies"
        self.loads = p + "loads"
        self.loads_once = p + "loads:once"
        self.grouping_state = p + "grouping_state"
        self.grouping_version = p + "grouping_version"
        self.grouping_states = p + "grouping_states"
        self.grouping_epoch = p + "grouping_epoch"
        self.grouping_unsynced = p + "grouping_unsynced"
        self.grouping_stats = p + "grouping_stats"
        self.starts = p + "starts"
        self.received = p + "received"
        self.dedup_seen = p + "dedup:seen"
        self.dedup_done = p + "dedup:done"
        self.dedup_floor = p + "dedup:floor"
        self.dedup_dropped = p + "dedup:dropped"
        self.dedup_peak = p + "dedup:peak"
        self.dead_letters = p + "dead_letters"  # rows a toolkit stage set aside (keysplit.toolkit.deadletter)

    def counter(self, index: int) -> str:
        return f"{self.prefix}counter:{index}"

    def aggregator(self, index: int) -> str:
        return f"{self.prefix}aggregator:{index}"

    def keys(self, index: int) -> str:
        return f"{self.prefix}keys:{index}"

    def spout(self, index: int) -> str:
        return f"{self.prefix}spout:{index}"

    def stage(self, component: str, what: str) -> str:
        """A key of one keyed stage of a toolkit topology (keysplit.toolkit), by its component's name.

        >>> RunKeys("r1").stage("route", "loads")
        'keysplit:run:r1:stage:route:loads'
        """
        return f"{self.prefix}stage:{component}:{what}"

    def pattern(self) -> str:
        """A SCAN/KEYS pattern matching every key of the run."""
        return self.prefix + "*"
