"""Key salting, the practitioners' fix for a hot key: each message of a key goes to one of its K candidates
at random, with no load information.

Spark and Flink jobs append a random salt in [0, K) to a hot key, aggregate per salted key, then merge the K
partial results in a second phase. Seen from the workers this is ``salt:k=K``: key k's candidates are its K
hash choices H_1(k) .. H_K(k) (the same hashes as ``pkg:d=K``, distinct workers unless ``distinct=false``),
and a message picks one of them uniformly at random. It is PKG's load-blind twin: the same candidates and
memory, but the choice ignores the loads, so the spread of a split key only averages out (binomially) instead
of being corrected message by message.

"At random" is seeded and deterministic so that the simulator, the numba fast path, the replay and the Storm
routers make the same decisions: each source owns a SplitMix64 generator (Steele, Lea and Flood, 2014; the
64-bit constants below are its published ones) started at ``seed * 1_000_003 + source``, and a message takes
candidate ``next() mod K``. Each source's sequence depends only on its own messages, as a spout task's would.
"""

from __future__ import annotations

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping
from keysplit.hashing import candidates
from keysplit.specs import Param, boolean

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB


def salt_state(seed: int, source: int) -> int:
    """The initial SplitMix64 state of ``source`` (``keysplit.simulator.fast`` starts its generators the same way)."""
    return (seed * 1_000_003 + source) & MASK64


def splitmix64(state: int) -> tuple[int, int]:
    """One SplitMix64 step: ``(new state, output)``, all arithmetic mod 2^64.

    >>> splitmix64(0)[1]
    16294208416658607535
    """
    state = (state + GOLDEN) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return state, z ^ (z >> 31)


class Salting(BaseGrouping):
    """``salt:k=K``: a uniformly random one of the key's K hash choices per message (no load information).

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("salt:k=3", workers=8)
    >>> ws = [g.choose("hot", 0.0) for _ in range(300)]
    >>> sorted(set(ws)) == sorted(g.candidates("hot"))
    True
    """

    name = "salt"
    summary = "key salting: a random one of the key's k hash choices per message, no load information"
    PARAMS = {
        "k": Param(int, 2, "salts (hash choices) per key", lambda v: v >= 1, "at least 1"),
        "seed": Param(int, 0, "seed of the per-source random salt", lambda v: v >= 0, "at least 0"),
        "distinct": Param(boolean, True, "the k choices are k different workers (false: independent hashes)"),
    }

    def __init__(self, k: int = 2, seed: int = 0, distinct: bool = True) -> None:
        super().__init__(k=k, seed=seed, distinct=distinct)
        self.k = k
        self.seed = seed
        self.distinct = distinct

    def validate(self) -> None:
        if self.k > self.workers:
            raise SpecError(f"salt: k={self.k} exceeds the number of workers ({self.workers}); use 1 <= k <= W")
        self._state = salt_state(self.seed, self.source)

    def candidates(self, key: str) -> list[int]:
        """H_1(k) .. H_K(k), as ``pkg:d=K``; the first is key grouping's choice."""
        return candidates(key, self.k, self.workers, self.distinct)

    def choose(self, key: str, now: float) -> int:
        self._state, z = splitmix64(self._state)
        w = self.candidates(key)[z % self.k]
        self.local_loads[w] += 1
        return w
