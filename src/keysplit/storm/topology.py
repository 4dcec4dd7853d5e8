"""The word-count / top-k topology as a streamparse ``Topology`` class, built for given settings.

``feed`` (RedisStreamSpout x P) --fields(route)--> ``router`` (x S) --fields(route) | direct--> ``counter`` (x counter
tasks) --fields(word)--> ``aggregator`` (x A) --global--> ``topk`` (x 1).

The counter subscribes to all of the router's streams, ``words`` and ``batches`` fields-grouped on ``route``,
``words_direct`` and ``batches_direct`` with direct grouping; the router emits on one of them, chosen by
``keysplit.route`` and ``keysplit.batch`` at run time (so ``sparse submit -o keysplit.route=direct`` or
``-o keysplit.batch=1`` switches without another topology). The aggregator likewise subscribes to the counters'
partial counts, one a tuple fields-grouped on ``word`` or, with batches, one tuple per aggregator on ``flushes``
fields-grouped on ``route``.

A streamparse topology fixes its parallelism when the class is created, so the class is made by
:func:`wordcount_topology` from a :class:`RunSettings`; ``topologies/wordcount.py`` builds it from the
environment for ``sparse submit``, and ``keysplit run`` builds it for the local runner. The settings are also
written into the class's ``config`` (``keysplit.*`` keys), which ``sparse submit -o keysplit.x=...`` overrides.
"""

from __future__ import annotations

from typing import Any

from streamparse import Grouping, Topology

from keysplit.storm.bolts import AggregatorBolt, CounterBolt, RouterBolt, TopKBolt
from keysplit.storm.components import AGGREGATOR, COUNTER, ROUTER, SPOUT, TOPK
from keysplit.storm.settings import RunSettings
from keysplit.storm.spout import RedisStreamSpout
from keysplit.storm.streams import (
    BATCH_DIRECT_STREAM,
    BATCH_STREAM,
    DIRECT_STREAM,
    FLUSH_STREAM,
    ROUTE_FIELD,
    WORDS_STREAM,
)
from keysplit.storm.window import DEFAULT_MAX_PENDING

#: Storm settings of the paper's setup that the topology relies on (overridable with ``-o``).
DEFAULT_STORM_CONF: dict[str, Any] = {
    "topology.message.timeout.secs": 30,
    # the ceiling of the spouts' window, which grows from its start up to what a line's latency allows
    # (storm/window.py): Storm's count is of tuple trees, each of one or more lines, so it never binds first
    "topology.max.spout.pending": DEFAULT_MAX_PENDING,
    # An idle bolt executor (Storm 2.x, WaitStrategyProgressive) parks 1 ns a thousand times (level 2: each park a
    # syscall) before it sleeps 1 ms a call (level 3), and every tuple starts it over: a counter's or aggregator's
    # tick each second cost its executor ~1% of a core; a sleeping topology's worker JVM spent 23% of a core, Storm's
    # native word count 9% (docs/benchmarks/storm-cluster.md). Ten parks, then 5 ms sleeps: 5% for the whole JVM.
    # A line waits at most 5 ms more per idle hop, against a flush period of T (apache/storm storm-client/src/jvm/
    # org/apache/storm/policy/WaitStrategyProgressive.java, executor/bolt/BoltExecutor.java)
    "topology.bolt.wait.progressive.level2.count": 10,
    "topology.bolt.wait.progressive.level3.sleep.millis": 5,
}


def wordcount_topology(settings: RunSettings, name: str = "WordCount",
                       storm_conf: dict[str, Any] | None = None) -> type[Topology]:
    """A new Topology class for ``settings`` (fresh component specs each call)."""
    tick = {"topology.tick.tuple.freq.secs": settings.tick_secs}
    feed = RedisStreamSpout.spec(name=SPOUT, par=settings.spouts)
    router = RouterBolt.spec(name=ROUTER, inputs={feed: Grouping.fields(ROUTE_FIELD)}, par=settings.sources)
    counter = CounterBolt.spec(name=COUNTER, inputs={router[WORDS_STREAM]: Grouping.fields(ROUTE_FIELD),
                                                     router[DIRECT_STREAM]: Grouping.DIRECT,
                                                     router[BATCH_STREAM]: Grouping.fields(ROUTE_FIELD),
                                                     router[BATCH_DIRECT_STREAM]: Grouping.DIRECT},
                               par=settings.counter_tasks, config=tick)
    aggregator = AggregatorBolt.spec(name=AGGREGATOR, inputs={counter: Grouping.fields("word"),
                                                              counter[FLUSH_STREAM]: Grouping.fields(ROUTE_FIELD)},
                                     par=settings.aggregators, config=tick)
    topk = TopKBolt.spec(name=TOPK, inputs={aggregator: Grouping.GLOBAL}, par=1)
    config = {**DEFAULT_STORM_CONF, **settings.conf(), **(storm_conf or {})}
    body = {"__module__": __name__, "__doc__": f"Word count / top-k with grouping {settings.grouping}",
            "config": config, SPOUT: feed, ROUTER: router, COUNTER: counter, AGGREGATOR: aggregator, TOPK: topk}
    return type(name, (Topology,), body)
