"""The fast path's kernel: one numba function that routes a chunk of messages, given as dense key ids, with
the decision rule of kg, sg, pkg (every variant) or salt, and keeps the run's metrics as it goes.

Per message (:func:`_route_chunk`): the source's decision, with the reference's tie-breaking (PKG §3: the
least loaded candidate, ties to the earliest candidate, as in ``PartialKeyGrouping.choose``), the true load
vector L_i(t), the imbalance checkpoints I(t_j) (PKG §2), the distinct (worker, key) pairs of dist_cost (DKG
eq. 8), periodic probing with the exact timing of ``PartialKeyGrouping._maybe_probe`` and salt's per-source
SplitMix64 draw (``keysplit.groupings.salt``, the same uint64 arithmetic). :mod:`.fast` drives it.
"""

from __future__ import annotations

import numpy as np

from keysplit.groupings.salt import GOLDEN, MIX1, MIX2
from keysplit.simulator.compiled import kernel

# Decision rules of the kernel.
KG, SG, PKG_LOCAL, PKG_GLOBAL, SALT = 0, 1, 2, 3, 4
_GOLDEN, _MIX1, _MIX2 = np.uint64(GOLDEN), np.uint64(MIX1), np.uint64(MIX2)
# Where a message's source comes from: an explicit array, round-robin over records, or the key's split hash.
SRC_ARRAY, SRC_ROUND_ROBIN, SRC_KEY = 0, 1, 2


@kernel(
    "UniTuple(i8, 3)(i8, i4[:], i4[:], i8, i8, f8[:], b1, i8, f8, i4[:, :], i4[:], i8, i8, i8, f8[:, :], i8[:], f8[:],"
    " f8, f8, b1, i8[:], u8[:, :], i8[:], i8, i8, i8[:], i4[:], u8[:], i8[:])"
)
def _route_chunk(
    mode, kid, src, src_mode, src_next, now, use_now, seq0, rate,
    cand, ksrc, d, workers, sources,
    local, sg_next, next_probe, probe_interval, probe_mul, do_probe,
    loads, seen, distinct, checkpoint, next_cp, cp_max, out, salt, kcount,
):  # pragma: no cover - compiled; exercised through fast_simulate
    """Route ``kid`` (dense key ids) message by message; returns ``(next_cp, checkpoints, src_next)``.

    Mutates the run's state in place: ``loads`` (true L_i), ``local`` (per-source estimates, row 0 shared
    under load=global), ``sg_next`` (round-robin positions), ``next_probe``, ``seen`` (bitset of
    (key, worker) pairs), ``distinct`` (distinct keys per worker) and ``salt`` (each source's SplitMix64
    state, uint64); ``kcount[k]`` counts key k's messages. ``out[i]`` is message i's worker;
    ``cp_max[j]`` is max_i L_i(t_j) at the j-th checkpoint reached in this chunk.
    """
    n = kid.shape[0]
    ncp = 0
    s = 0
    for i in range(n):
        k = kid[i]
        if src_mode == 0:
            s = src[i]
        elif src_mode == 1:
            s = src_next
            src_next += 1
            if src_next == sources:
                src_next = 0
        else:
            s = ksrc[k]
        if mode == 0:  # KG: hash(key) mod W
            w = cand[k, 0]
        elif mode == 1:  # SG: round-robin per source
            w = sg_next[s]
            sg_next[s] = w + 1 if w + 1 < workers else 0
        elif mode == 4:  # salt: candidate splitmix64() mod K, as Salting.choose (uint64 wraps like & MASK64)
            z = salt[s] + _GOLDEN
            salt[s] = z
            z = (z ^ (z >> np.uint64(30))) * _MIX1
            z = (z ^ (z >> np.uint64(27))) * _MIX2
            z = z ^ (z >> np.uint64(31))
            w = cand[k, np.int64(z % np.uint64(d))]
        else:  # PKG: P_t(k) = argmin over the d candidates of the (local or global) load
            row = s if mode == 2 else 0
            if do_probe:
                t = now[i] if use_now else (seq0 + i) / rate
                if t >= next_probe[s]:  # PartialKeyGrouping._maybe_probe
                    for j in range(workers):
                        local[s, j] = loads[j] * probe_mul
                    # pkg.next_probe_after, operation for operation
                    nxt = next_probe[s]
                    nxt += np.floor((t - nxt) / probe_interval) * probe_interval
                    while nxt <= t:
                        stepped = nxt + probe_interval
                        if stepped == nxt:  # interval below the float resolution at t
                            nxt = np.nextafter(t, np.inf)
                            break
                        nxt = stepped
                    next_probe[s] = nxt
            w = cand[k, 0]
            best = local[row, w]
            for j in range(1, d):
                c = cand[k, j]
                if local[row, c] < best:
                    w = c
                    best = local[row, c]
            local[row, w] += 1.0
        loads[w] += 1
        kcount[k] += 1
        word = w >> 6
        bit = np.uint64(1) << np.uint64(w & 63)
        if (seen[k, word] & bit) == 0:
            seen[k, word] |= bit
            distinct[w] += 1
        out[i] = w
        if seq0 + i + 1 == next_cp:
            mx = loads[0]
            for j in range(1, workers):
                if loads[j] > mx:
                    mx = loads[j]
            cp_max[ncp] = mx
            ncp += 1
            next_cp += checkpoint
    return next_cp, ncp, src_next
