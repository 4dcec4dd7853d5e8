"""How a host runs groupings: one instance per source, their hooks wired to the host's model, every message
routed by the stream's rules (:mod:`keysplit.stream`), and worker-count changes applied mid-stream.

The simulator, the Spark replay and the Storm router all prepare their groupings here, so the three make the
same decisions from the same seeds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

from keysplit.datasets import Dataset
from keysplit.errors import KeysplitError, SpecError
from keysplit.groupings import REGISTRY, BaseGrouping, build_grouping
from keysplit.groupings.base import Capacities, Offline, Probing, Resizable
from keysplit.stream import DEFAULT_RATE, Resize, event_time, source_of


class WorkerChanges:
    """``resizes`` applied to ``groupings``: each change takes effect just before message ``at``. The replay
    calls ``before`` per source, before the source's first message at or after ``at``; a source's instance only
    acts on its own messages, so applying a change that lazily makes the same decisions."""

    def __init__(self, groupings: Sequence[BaseGrouping], resizes: Sequence[Resize], workers: int) -> None:
        self.groupings = groupings
        self.pending = sorted(resizes, key=lambda r: r.at)
        self.current = workers  #: the worker count in effect

    def before(self, seq: int) -> None:
        """Apply every change due before message ``seq``."""
        while self.pending and self.pending[0].at <= seq:
            self.current = self.pending.pop(0).workers
            for g in self.groupings:
                if not isinstance(g, Resizable):
                    raise KeysplitError(f"grouping {g.describe()!r} cannot change its worker count mid-stream")
                g.resize(self.current)


def supports_resize(spec: str, workers: int = 2) -> bool:
    """Whether the grouping implements ``resize(workers)`` (a worker change mid-stream)."""
    return isinstance(build_grouping(spec, workers)[0], Resizable)


def resizable_groupings() -> list[str]:
    """The registered groupings that support ``--resize``."""
    return [name for name in REGISTRY if supports_resize(name)]


def check_resizes(specs: Sequence[str], workers: int, resizes: Sequence[Resize], messages: int | None = None) -> None:
    """Refuse, in one line each, what ``--resize`` cannot do: a grouping without resize support, two changes
    at one message, or a change at or after the stream's last message (it would silently never happen)."""
    if not resizes:
        return
    for spec in specs:
        if not supports_resize(spec, workers):
            raise SpecError(f"{spec} cannot change its worker count mid-stream; --resize works with: "
                            + ", ".join(resizable_groupings()))
    ats = [r.at for r in resizes]
    if len(set(ats)) != len(ats):
        raise SpecError(f"--resize: two changes at the same message ({', '.join(map(str, sorted(ats)))})")
    if messages is not None and max(ats) >= messages:
        raise SpecError(f"--resize at message {max(ats):,} is past the stream's last message ({messages:,} messages)")


def key_frequencies(dataset: Dataset) -> Counter:
    """Exact key frequencies of the whole dataset (Off-Greedy's full pass, and the ground truth)."""
    counts: Counter = Counter()
    for _, keys in dataset.records():
        counts.update(keys)
    return counts


def prepare_groupings(
    spec: str,
    workers: int,
    sources: int,
    dataset: Dataset | None = None,
    true_loads: Callable[[], Sequence[int]] | None = None,
    capacities: Sequence[float] | None = None,
    *,
    frequencies: Mapping[str, int] | Callable[[], Mapping[str, int]] | None = None,
) -> list[BaseGrouping]:
    """Build one grouping per source and connect the optional hooks to the host's model: offline groupings
    get ``frequencies`` (a mapping, or a function called only when one needs them; by default the exact
    counts of ``dataset``), probing groupings read ``true_loads``, FISH gets ``capacities``. The simulator,
    the replay and the Storm router all prepare their groupings here."""
    groupings = build_grouping(spec, workers, sources)
    if any(g.needs_full_pass for g in groupings):
        if callable(frequencies):
            frequencies = frequencies()
        elif frequencies is None:
            if dataset is None:
                raise KeysplitError(f"grouping {spec!r} needs the dataset's key frequencies first")
            frequencies = key_frequencies(dataset)
        for g in groupings:
            if isinstance(g, Offline):
                g.fit(frequencies)
    for g in groupings:
        if true_loads is not None and isinstance(g, Probing):
            g.attach_probe(true_loads)
        if capacities is not None and isinstance(g, Capacities):
            g.set_capacities(list(capacities))
    return groupings


def route(
    dataset: Dataset,
    groupings: Sequence[BaseGrouping],
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
) -> Iterator[tuple[int, int, str, int]]:
    """Route every message; yields ``(sequence, source, key, worker)`` in stream order."""
    sources = len(groupings)
    seq = 0
    for index, (ts, keys) in enumerate(dataset.records()):
        if not keys:
            continue
        s = source_of(index, keys[0], sources, split)
        g = groupings[s]
        for key in keys:
            yield seq, s, key, g.choose(key, event_time(ts, seq, rate))
            seq += 1
