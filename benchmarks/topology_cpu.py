"""Where the word-count topology's CPU goes: CPU microseconds per word of each kind of process (spout, routers,
counters, aggregators, top-k, the local runner, Redis) in one ``keysplit run wordcount`` without CPU delay.

Why. On a shared machine a run's words/s is its share of the cores divided by what a word costs; the share
changes from minute to minute, the cost does not. So the ceiling on two free cores is ``2 s / (CPU s per word)``,
and the process with the largest share of that cost is what to make cheaper. Each mode below is one subprocess,
run back to back; the CPU of every process of its tree and of the Redis server is read from ``/proc/<pid>/stat``
every ``--interval`` seconds, and only the samples while the spout is busy count (not the start-up's imports or
the load of the feed). Per word is that CPU over the run's words.

    .venv/bin/python benchmarks/topology_cpu.py [--lines 30000] [--modes "--batch 100;--batch 1"] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from topology_effect import KEYSPLIT, ROOT, add_topology_args, dataset_file

#: process kinds, by a word of their command line (the first that matches)
KINDS = (("spout", "Spout"), ("routers", "RouterBolt"), ("counters", "CounterBolt"),
         ("aggregators", "AggregatorBolt"), ("top-k", "TopKBolt"), ("redis", "redis-server"),
         ("runner", "keysplit run"))
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_by_pid() -> dict[int, tuple[int, float, str]]:
    """Every process: pid -> (parent pid, CPU seconds so far, command line)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces: skip past its ")"
        out[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS, cmd)
    return out


def kind_of(cmd: str) -> str | None:
    return next((kind for kind, word in KINDS if word in cmd), None)


def descendants(root: int, procs: dict[int, tuple[int, float, str]]) -> set[int]:
    tree, grew = {root}, True
    while grew:
        new = {pid for pid, (parent, _, _) in procs.items() if parent in tree and pid not in tree}
        tree |= new
        grew = bool(new)
    return tree


def measure(cmd: list[str], interval: float) -> tuple[dict, dict[str, float]]:
    """Run ``cmd`` (a ``keysplit run ... --json``); its summary and the CPU seconds by kind while the spout was
    busy (a sample counts when the spout used at least 2% of a core in it)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    last: dict[int, float] = {}
    busy: dict[str, float] = {}
    while proc.poll() is None:
        procs = cpu_by_pid()
        mine = descendants(proc.pid, procs) | {p for p, v in procs.items() if "redis-server" in v[2]}
        step: dict[str, float] = {}
        for pid in mine & procs.keys():
            kind = kind_of(procs[pid][2]) or "other"
            cpu = procs[pid][1]
            step[kind] = step.get(kind, 0.0) + cpu - last.get(pid, cpu)
            last[pid] = cpu
        if step.get("spout", 0.0) >= 0.02 * interval:
            for kind, cpu in step.items():
                busy[kind] = busy.get(kind, 0.0) + cpu
        time.sleep(interval)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return json.loads(out), busy


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_topology_args(p, max_pending=20000, lines=30000)
    p.add_argument("--grouping", default="sg")
    p.add_argument("--modes", default="--batch 100;--batch 1",
                   help="';'-separated extra options of keysplit run, one run each (default '--batch 100;--batch 1')")
    p.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    path = dataset_file(args)
    rows = []
    for mode in (m.strip() for m in args.modes.split(";") if m.strip()):
        cmd = [KEYSPLIT, "run", "wordcount", "--grouping", args.grouping, "--dataset", f"text:{path}",
               "-S", str(args.sources), "-W", str(args.workers), "-A", str(args.aggregators), "--cpu-delay", "0",
               "--flush", f"{args.flush:g}", "--max-pending", str(args.max_pending), "--json", *mode.split()]
        summary, busy = measure(cmd, args.interval)
        words = summary["messages"]
        per_word = {kind: busy.get(kind, 0.0) / words * 1e6 for kind in [k for k, _ in KINDS] + ["other"]}
        total = sum(per_word.values())
        rows.append({"mode": mode, "words_per_second": summary["words_per_second"], "words": words,
                     "us_per_word": per_word, "total_us_per_word": total, "two_core_limit": 2e6 / total,
                     "load": os.getloadavg()})
        if not args.json:
            print(f"{mode}: {summary['words_per_second']:,.0f} words/s, {total:.1f} CPU us a word (two free cores: "
                  f"{2e6 / total:,.0f} words/s), load {', '.join(f'{v:.1f}' for v in os.getloadavg())}",
                  file=sys.stderr, flush=True)
    if args.json:
        json.dump({"grouping": args.grouping, "dataset": f"text:{path}", "rows": rows}, sys.stdout, indent=2)
        print()
        return 0
    kinds = [k for k, _ in KINDS] + ["other"]
    print("| mode | words/s | " + " | ".join(kinds) + " | total CPU us a word | two free cores: words/s |")
    print("|---|---:|" + "---:|" * len(kinds) + "---:|---:|")
    for r in rows:
        cells = " | ".join(f"{r['us_per_word'][k]:.1f}" for k in kinds)
        print(f"| `{r['mode']}` | {r['words_per_second']:,.0f} | {cells} | {r['total_us_per_word']:.1f} | "
              f"{r['two_core_limit']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
