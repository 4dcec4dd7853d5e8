"""What ``distinct`` changes (docs/groupings/index.md): PKG's average imbalance with independent hash choices
(the paper's ``distinct=false``) and with distinct ones (``distinct=true``, Storm's), over 20 hash functions.

A dataset's keys are fixed, so "20 seeds of the hash" is what varies which keys' choices coincide: hash
function family ``s`` is murmur3 with seeds ``BASE_SEED + 1000*s + i`` (s = 0 is keysplit's own). For each
family the candidates of every distinct key are computed in Python (``hashing.choices`` /
``hashing.distinct_choices``) and the messages, encoded once as key ids, are routed by ``keysplit.simulator.fast``'s
kernel: the same decisions as ``pkg`` / ``pkg:distinct=false`` (``tests/simulator/test_fast.py``), only the hash seeds
differ. Records go to the S sources round-robin, as in ``keysplit simulate``.

Printed per dataset and W: the mean and the worst (max) avg imbalance fraction over the 20 families, and in
how many of them the hottest key was unsplit (its d choices all one worker).

Run: ``.venv/bin/python benchmarks/distinct.py [--seeds 20] [--workers 5,8,10,20,50] [--sources 5]
[--dataset SPEC ...] [--json]``. Defaults: ``zipf:z=1.0,keys=10000,messages=1000000,seed=1`` and the demo's
file (``keysplit datasets generate zipf:z=1.1,keys=5000,messages=30000,seed=42 --words-per-line 10``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import numpy as np

from keysplit.datasets import open_dataset
from keysplit.hashing import BASE_SEED, choices, distinct_choices
from keysplit.metrics import default_checkpoint
from keysplit.simulator import fast

DEMO = "zipf:z=1.1,keys=5000,messages=30000,seed=42"


def encode(spec: str, sources: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Distinct key names, every message's key id and source (records round-robin over sources)."""
    ids: dict[str, int] = {}
    kid: list[int] = []
    src: list[int] = []
    for index, (_, keys) in enumerate(open_dataset(spec).records()):
        for key in keys:
            kid.append(ids.setdefault(key, len(ids)))
            src.append(index % sources)
    return list(ids), np.array(kid, dtype=np.int32), np.array(src, dtype=np.int32)


def avg_imbalance(names, kid, src, workers, sources, family, distinct, d=2) -> float:
    """pkg's avg imbalance fraction with hash family ``family``, via the fast path's kernel."""
    base = BASE_SEED + 1000 * family
    table = fast.KeyTable(d, workers, sources, "shuffle")
    table._grow(len(names))
    draw = distinct_choices if distinct else choices
    for i, name in enumerate(names):
        table.cand[i] = draw(name, d, workers, base)
    table.size = len(names)
    checkpoint = default_checkpoint(len(kid))
    st = fast.RouteState(fast.FastSpec(fast.PKG_LOCAL, d, None, 1.0, "pkg"), workers, sources, "shuffle", 1.0,
                         checkpoint, table)
    st.run(fast.IdChunk(kid, src))
    return fast.run_result(st, 0.0).avg_imbalance_fraction


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", default="5,8,10,20,50")
    ap.add_argument("--sources", type=int, default=5)
    ap.add_argument("--dataset", action="append")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    specs = args.dataset
    tmp = None
    if not specs:
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "demo.txt")
        subprocess.run([sys.executable, "-m", "keysplit.cli", "datasets", "generate", DEMO, "--words-per-line",
                        "10", "--out", path], check=True, capture_output=True)
        specs = ["zipf:z=1.0,keys=10000,messages=1000000,seed=1", f"text:{path}"]
    fast.warmup()
    rows = []
    for spec in specs:
        names, kid, src = encode(spec, args.sources)
        hottest = names[Counter(kid.tolist()).most_common(1)[0][0]]
        for w in workers:
            row = {"dataset": "demo file" if tmp and spec.startswith("text:") else spec, "workers": w}
            for distinct in (False, True):
                values = [avg_imbalance(names, kid, src, w, args.sources, s, distinct) for s in range(args.seeds)]
                draw = distinct_choices if distinct else choices
                unsplit = sum(len(set(draw(hottest, 2, w, BASE_SEED + 1000 * s))) == 1 for s in range(args.seeds))
                tag = "distinct" if distinct else "independent"
                row[f"{tag}_mean"] = float(np.mean(values))
                row[f"{tag}_worst"] = float(np.max(values))
                row[f"{tag}_unsplit"] = unsplit
            rows.append(row)
    if args.json:
        print(json.dumps({"seeds": args.seeds, "sources": args.sources, "rows": rows}, indent=2))
        return 0
    print(f"pkg (d=2), S={args.sources}, {args.seeds} hash families; avg imbalance fraction")
    print("| dataset | W | distinct=false mean | worst | hottest unsplit "
          "| distinct=true mean | worst | hottest unsplit |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['workers']} | {r['independent_mean']:.1e} | {r['independent_worst']:.1e} | "
              f"{r['independent_unsplit']}/{args.seeds} | {r['distinct_mean']:.1e} | {r['distinct_worst']:.1e} | "
              f"{r['distinct_unsplit']}/{args.seeds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
