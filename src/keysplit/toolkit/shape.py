"""The keyed stage of a toolkit topology, as the replay, the topology model and ``keysplit compare`` read it.

A topology file's class (``keysplit run FILE``'s) states everything the replay needs in its specs: the feed's
fields (:class:`~keysplit.toolkit.specs.FeedSpoutSpec`), the router's key, time field, grouping and parallelism
(:class:`~keysplit.toolkit.specs.KeyRouterSpec`), the partial stage's accumulator and period
(:class:`~keysplit.toolkit.specs.PartialSpec`) and the merge's parallelism (:class:`~keysplit.toolkit.specs.MergeSpec`).
:func:`keyed_stage` reads them into one :class:`KeyedStage`; :meth:`KeyedStage.knobs` gives them under the names of
the topology model's knobs (``keysplit.topology_model.KNOBS``), which a run records (:func:`run_facts`) and a replay
models, so that ``keysplit compare`` checks them as it checks the word count's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.stream import DEFAULT_BATCH
from keysplit.toolkit.contract import ROUTE_FIELD, ROUTER_CONFIG
from keysplit.toolkit.specs import FeedSpoutSpec, KeyRouterSpec, MergeSpec, PartialSpec, rows_a_tuple


@dataclass(frozen=True)
class KeyedStage:
    """FeedSpout -> KeyRouter -> Aggregate.partial -> Aggregate.merge, as a topology file states them."""

    topology: str  # the class name
    feed_fields: tuple[str, ...]  # the columns the feed spout emits: the record an accumulator sees, with its id
    spouts: int
    router: str
    key: str
    time: str | None  # the field the router decides on (None: the wall clock)
    grouping: str
    sources: int  # router tasks (the papers' sources)
    workers: int  # the tasks the grouping chooses among (the partial's, or the router's first `workers`)
    batch: int
    batch_ms: float
    partial: str
    partial_tasks: int
    accumulator: dict  # Accumulator.describe(): rebuilt where it runs (a Spark executor)
    period: float  # the partial's flush period T (s)
    merge: str
    merges: int
    merge_period: float

    def knobs(self) -> dict[str, Any]:
        """The keyed stage under the topology model's knob names (``keysplit.topology_model.KNOBS``): the partial
        tasks are its counters, the merge tasks its aggregators, the partial's period its flush period, and no
        CPU delay (a row's cost at each stage is calibrated, docs/design/topology-model.md)."""
        return {"sources": self.sources, "workers": self.workers, "aggregators": self.merges, "spouts": self.spouts,
                "cpu_delay_ms": 0.0, "flush_secs": self.period, "rate": None, "batch": self.batch,
                "batch_ms": self.batch_ms}

    def dataset_spec(self, spec: str) -> str:
        """``spec`` (``csv:FILE,key=COL``) with the router's time field, when it decides on one: the records as the
        router sees them (``keysplit simulate`` and the replay then decide on the same times)."""
        if self.time is None or ",time=" in spec:
            return spec
        return f"{spec},time={self.time}"

    def describe(self) -> dict[str, Any]:
        return {"topology": self.topology, "router": self.router, "key": self.key, "time": self.time,
                "grouping": self.grouping, "partial": self.partial, "merge": self.merge,
                "accumulator": self.accumulator, "merge_period": self.merge_period,
                "feed_fields": list(self.feed_fields)}


def _config(spec: Any) -> dict:
    """A spec's component configuration (streamparse keeps it as JSON text or a dict)."""
    config = spec.config or {}
    return json.loads(config) if isinstance(config, str) else dict(config)


def keyed_stage(cls: Any) -> KeyedStage:
    """The keyed stage of a toolkit topology class; a one-line KeysplitError when it has none the replay can
    follow (one FeedSpout, the KeyRouter it deals rows to, an Aggregate.partial behind it and its merge)."""
    from keysplit.toolkit.aggregate import MERGE_CONFIG, PARTIAL_CONFIG

    name = cls.__name__
    specs = list(getattr(cls, "specs", None) or [])
    feeds = [s for s in specs if isinstance(s, FeedSpoutSpec)]
    if len(feeds) != 1:
        raise KeysplitError(f"{name}: the replay reads the rows of keysplit's feed, and {name} has {len(feeds)} "
                            "FeedSpout(s); it needs one (keysplit.toolkit.FeedSpout)")
    feed = feeds[0]
    routers = [s for s in specs if isinstance(s, KeyRouterSpec) and any(
        _source(stream) == feed.name and list(g.fields or []) == [ROUTE_FIELD] for stream, g in s.inputs.items())]
    partials = [s for s in specs if isinstance(s, PartialSpec) and routers and s.router is routers[0]]
    if len(routers) != 1 or len(partials) != 1:
        raise KeysplitError(f"{name}: the replay follows a keyed stage (FeedSpout -> KeyRouter -> Aggregate.partial "
                            f"-> Aggregate.merge); {name} has no Aggregate.partial behind the router its feed deals "
                            "rows to")
    router, partial = routers[0], partials[0]
    merges = [s for s in specs if isinstance(s, MergeSpec) and s.partial is partial]
    if len(merges) != 1:
        raise KeysplitError(f"{name}: Aggregate.partial {partial.name} needs one Aggregate.merge behind it")
    merge = merges[0]
    rcfg, pcfg, mcfg = _config(router)[ROUTER_CONFIG], _config(partial)[PARTIAL_CONFIG], _config(merge)[MERGE_CONFIG]
    delivery = (getattr(cls, "config", None) or {}).get("keysplit.delivery", "exactly-once")
    return KeyedStage(
        topology=name, feed_fields=tuple(feed.row_fields), spouts=int(feed.par), router=router.name, key=router.key,
        time=rcfg.get("time"), grouping=router.grouping, sources=int(router.par),
        workers=int(router.workers or partial.par), batch=rows_a_tuple(router.batch, delivery, DEFAULT_BATCH),
        batch_ms=float(rcfg["batch_ms"]),
        partial=partial.name, partial_tasks=int(partial.par), accumulator=partial.accumulator.describe(),
        period=float(pcfg["period"]), merge=merge.name, merges=int(merge.par), merge_period=float(mcfg["period"]))


def _source(stream_id: Any) -> str:
    component = stream_id.componentId
    return component if isinstance(component, str) else component.name


def source_folder(root: Path) -> str | None:
    """The project's ``src/`` (where a user's own accumulator lives), if it has one."""
    src = root / "src"
    return str(src) if src.is_dir() else None


def run_facts(cls: Any, dataset: Any, root: Path) -> dict[str, Any]:
    """What a topology run records for the replay and ``keysplit compare`` (nothing for a topology without a keyed
    stage): the keyed stage, its knobs, the project's ``src/`` (where its accumulator is imported from), and the
    fingerprint of the dataset as the router sees it (with its time field), which the replay of the same file
    computes too."""
    try:
        stage = keyed_stage(cls)
    except KeysplitError:
        return {}
    if dataset is None:
        return {}
    from keysplit.datasets import open_dataset

    spec = stage.dataset_spec(dataset.spec)
    routed = dataset if spec == dataset.spec else open_dataset(spec)
    return {"keyed_stage": {**stage.describe(), **stage.knobs(), "dataset": spec, "src": source_folder(root),
                            "dataset_sha256": routed.sha256()}}
