"""Reading a text file at the machine's speed (docs/benchmarks/ingest.md): ``wc -w``, ``keysplit simulate``, a
plain PySpark word count and ``keysplit replay`` on one generated file, with the ratios, and the replay's Python
worker memory.

    .venv/bin/python benchmarks/ingest.py [--lines 2000000] [--cache DIR] [--master local[2]]
                                         [--no-memory] [--no-speed] [--json]

The file is generated once into ``--cache`` (``keysplit datasets generate zipf:z=1.1,keys=100000,
messages=<10 x lines>,seed=3 --words-per-line 10``, 88 MB at the default 2M lines) and reused. Every command
runs as its own process and is timed wall-clock, start-up included:

- ``wc -w FILE``: a C word scan, the floor;
- ``keysplit simulate --dataset text:FILE -g pkg -W 10 -S 5``;
- a plain PySpark word count (``read.text``, ``lower``, ``split``, ``explode``, ``groupBy().count()``, write
  Parquet) on ``--master``, Spark's start-up included;
- ``keysplit replay --dataset text:FILE -g pkg -W 10 -S 5 --master M``.

Targets: simulate within 5x ``wc -w``, replay within 1.5x the plain word count. Then (unless ``--no-memory``)
the peak resident size (``VmHWM``) of the largest Python process under the replay (the ``pyspark.daemon``
workers), sampled twice a second, for ``pkg`` alone and ``pkg:load=global`` alone over the file's first tenth
and over the whole file: the bound is 1.25x. The machine may be shared: the ratios matter more than the times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from replay import descendants, peak_kib  # benchmarks/replay.py: the process-tree sampler

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SIM_TARGET, REPLAY_TARGET, MEMORY_BOUND = 5.0, 1.5, 1.25

WORD_COUNT = """
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master(sys.argv[1]).appName("wordcount").getOrCreate()
words = spark.read.text(sys.argv[2]).select(F.explode(F.split(F.lower("value"), "[^a-z0-9']+")).alias("word"))
words.where(F.col("word") != "").groupBy("word").count().write.mode("overwrite").parquet(sys.argv[3])
spark.stop()
"""


class TreeSampler(threading.Thread):
    """The largest ``VmHWM`` of any Python process below ``pid`` (the replay's ``pyspark.daemon`` workers)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.python_kib = pid, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for child in descendants(self.pid):
                cmd, hwm = peak_kib(child)
                if "python" in cmd.split(" ", 1)[0]:  # not the JVM (its command line names pyspark too)
                    self.python_kib = max(self.python_kib, hwm)
            self.stopped.wait(0.5)


def timed(cmd: list[str], sample: bool = False) -> tuple[float, float]:
    """Wall seconds of ``cmd`` (its output discarded, a failure shown) and, if ``sample``, the peak MiB of its
    largest Python descendant."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    sampler = TreeSampler(proc.pid)
    if sample:
        sampler.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - started
    if sample:
        sampler.stopped.set()
        sampler.join()
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    return seconds, sampler.python_kib / 1024


def generate(cache: Path, lines: int) -> tuple[Path, Path]:
    """The benchmark file and a copy of its first tenth of the lines (made once, kept in ``cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    big = cache / f"zipf-{lines}-lines.txt"
    small = cache / f"zipf-{lines}-lines-first-tenth.txt"
    if not big.exists():
        spec = f"zipf:z=1.1,keys=100000,messages={10 * lines},seed=3"
        subprocess.run([BIN / "keysplit", "datasets", "generate", spec, "--words-per-line", "10", "--out", big],
                       check=True, stdout=subprocess.DEVNULL)
    if not small.exists():
        with open(big, "rb") as src, open(small, "wb") as dst:
            for n, line in enumerate(src):
                if n == lines // 10:
                    break
                dst.write(line)
    return big, small


def replay_cmd(path: Path, spec: str, master: str, out: str) -> list[str]:
    return [str(BIN / "keysplit"), "replay", "--dataset", f"text:{path}", "-g", spec, "-W", "10", "-S", "5",
            "--master", master, "--out", out]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=2_000_000, help="lines of 10 words (default 2M: 20M words)")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "keysplit-bench-ingest"))
    p.add_argument("--master", default="local[2]")
    p.add_argument("--no-memory", action="store_true", help="skip the four replays of the memory bound")
    p.add_argument("--no-speed", action="store_true", help="only the memory bound")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    args = p.parse_args()
    big, small = generate(Path(args.cache), args.lines)
    work = tempfile.mkdtemp(prefix="keysplit-bench-ingest-")
    try:
        say = (lambda _text: None) if args.json else (lambda text: print(text, flush=True))
        result: dict = {"file": str(big), "words": 10 * args.lines, "load_before": os.getloadavg()[0]}
        say(f"file {big} ({big.stat().st_size / 1e6:.0f} MB, {10 * args.lines:,} words); "
            f"load average before: {result['load_before']:.2f}")
        if not args.no_speed:
            result["speed"] = speed(big, args.master, work, say)
        if not args.no_memory:
            result["memory_mib"] = memory(big, small, args.lines, args.master, work, say)
        result["load_after"] = os.getloadavg()[0]
        say(f"\nload average after: {result['load_after']:.2f}")
        if args.json:
            print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def speed(big: Path, master: str, work: str, say: Callable[[str], None]) -> dict:
    """The four timings and their ratios, as a markdown table."""
    wc, _ = timed(["wc", "-w", str(big)])
    sim, _ = timed([str(BIN / "keysplit"), "simulate", "--dataset", f"text:{big}", "-g", "pkg", "-W", "10",
                    "-S", "5"])
    spark, _ = timed([sys.executable, "-c", WORD_COUNT, master, "file://" + str(big),
                      os.path.join(work, "wordcount.parquet")])
    rep, _ = timed(replay_cmd(big, "pkg", master, os.path.join(work, "replay")))
    say(f"\n| what | wall s | ratio | target |\n|---|---:|---:|---|\n"
          f"| `wc -w` | {wc:.2f} | 1.00 | |\n"
          f"| `keysplit simulate` pkg | {sim:.2f} | {sim / wc:.2f}x `wc -w` | <= {SIM_TARGET}x: "
          f"{'met' if sim / wc <= SIM_TARGET else 'MISSED'} |\n"
          f"| plain PySpark word count ({master}) | {spark:.2f} | 1.00 | |\n"
          f"| `keysplit replay` pkg ({master}) | {rep:.2f} | {rep / spark:.2f}x word count | "
          f"<= {REPLAY_TARGET}x: {'met' if rep / spark <= REPLAY_TARGET else 'MISSED'} |")
    return {"wc_s": wc, "simulate_s": sim, "spark_wordcount_s": spark, "replay_s": rep,
            "simulate_over_wc": sim / wc, "replay_over_wordcount": rep / spark}


def memory(big: Path, small: Path, lines: int, master: str, work: str, say: Callable[[str], None]) -> dict:
    """The largest Python worker's peak over the first tenth and over the whole file, per grouping."""
    say(f"\n| grouping | worker peak MiB at {lines:,} msgs | at {10 * lines:,} msgs | ratio | bound |\n"
        "|---|---:|---:|---:|---|")
    out = {}
    for spec in ("pkg", "pkg:load=global"):
        _, low = timed(replay_cmd(small, spec, master, os.path.join(work, "m")), sample=True)
        _, high = timed(replay_cmd(big, spec, master, os.path.join(work, "m")), sample=True)
        ratio = high / low if low else float("inf")
        say(f"| {spec} | {low:.0f} | {high:.0f} | {ratio:.2f} | <= {MEMORY_BOUND}: "
            f"{'met' if ratio <= MEMORY_BOUND else 'MISSED'} |")
        out[spec] = {"small": low, "large": high, "ratio": ratio}
    return out


if __name__ == "__main__":
    sys.exit(main())
