"""The replay's fast path: ``keysplit.simulator.fast``'s numba kernel, fed one partition's messages.

``keysplit.simulator.fast`` makes exactly the reference decisions of kg, sg and pkg (every variant: d choices, local
or global load, probing; ``tests/test_fast.py`` proves it against ``choose``). Its ``RouteState`` holds every
source's state (round-robin position, local load row, next probe), and each message carries its source, so:

- a partitioned source ``s`` feeds only its own messages tagged ``s``: the kernel touches only row ``s``,
  which is what ``build_grouping(spec, W, S)[s]`` would hold (kg, sg and local pkg never read another
  source's state or the true loads);
- the merged stream of a global-mode grouping (pkg:load=global, pkg:probe=T) feeds every message with its
  source, in sequence order, exactly like the simulator's loop.

Event times are always passed explicitly (``SubStream.now``), so a probe fires at the reference's moments.
The replay's own tests prove the whole pipeline equal to ``simulate(..., engine="reference")``.
"""

from __future__ import annotations

import numpy as np

from keysplit.simulator import fast
from keysplit.simulator.tokenize import HashIds
from spark_replay.ingest import SubStream


def has_fast_path(spec: str, workers: int, sources: int) -> bool:
    """True when ``keysplit.simulator.fast`` routes ``spec`` (kg, sg, pkg and its variants)."""
    return fast.fast_spec(spec, workers, sources) is not None


class FastRouter:
    """One partition's kernel state, fed its pieces one after another in sequence order."""

    def __init__(self, fs: fast.FastSpec, workers: int, sources: int, split: str, rate: float) -> None:
        fast.warmup()
        self.rate = rate
        self.state = fast.RouteState(fs, workers, sources, split, rate, checkpoint=1 << 62)
        self.by_hash = HashIds()  # used for every piece of a replay or for none (the ingest decides)

    def route(self, sub: SubStream) -> np.ndarray:
        """The worker of every message of ``sub`` (the next piece of one source's stream, or of the merged one)."""
        n = len(sub)
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        table = self.state.table
        if sub.key_hash is not None:  # fingerprints checked collision-free: ids without a dict lookup per key
            before = self.by_hash.size
            remap = self.by_hash.ids(sub.key_hash).astype(np.int32)
            fresh = np.flatnonzero(remap >= before).tolist()
            # the table numbers keys as the fingerprints do: in order of first appearance, only from here
            table.ids_of([sub.vocab[k] for k in fresh])
        else:
            remap = np.array(table.ids_of(sub.vocab), dtype=np.int32)
        table.flush()  # the piece's new keys named in one batch
        src = sub.sources if sub.sources is not None else np.full(n, sub.source, dtype=np.int32)
        chunk = fast.IdChunk(remap[sub.key_ids], src.astype(np.int32), sub.now(self.rate).astype(np.float64))
        return self.state.run(chunk)


def fast_router(spec: str, workers: int, sources: int, split: str, rate: float) -> FastRouter | None:
    """A :class:`FastRouter` for ``spec``, or None without a fast path."""
    fs = fast.fast_spec(spec, workers, sources)
    return None if fs is None else FastRouter(fs, workers, sources, split, rate)
