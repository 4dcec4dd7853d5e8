"""The ``keysplit`` command. Each subcommand lives in ``keysplit.commands.<name>`` and exposes
``add_parser(subparsers)`` (which sets ``func``) so that this file stays a table of contents.

User mistakes (``KeysplitError``) print one line, ``keysplit: error: ...``, and exit 2; a reader that
closes the pipe early (``keysplit simulate --json | head``) ends the command quietly with 141; nothing else
is caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys

from keysplit import __version__
from keysplit.errors import KeysplitError

# Order is the order of `keysplit --help`.
COMMANDS = (
    "simulate",
    "datasets",
    "run",
    "jar",
    "submit",
    "runs",
    "logs",
    "replay",
    "compare",
    "calibrate",
    "partition",
    "rebalance",
    "execution",
    "advise",
    "demo",
)

# The command name and one-line help of each subcommand module, for `keysplit --help`, so that a command imports
# only its own module (numba, streamparse and pyspark cost ~1 s to import). Must equal what the module's add_parser
# registers (tests/test_cli.py checks); a module missing here is simply imported up front.
SUMMARIES = {
    "simulate": ("simulate", "route a dataset through groupings in process and measure balance and memory"),
    "datasets": ("datasets", "generate dataset files and print dataset statistics"),
    "run": ("run", "run the word-count / top-k Storm topology locally and measure throughput and latency"),
    "jar": ("jar", "build the topology jar for `sparse submit -j` (no lein, no JVM)"),
    "submit": ("submit", "submit a run loaded with `keysplit run wordcount --load-only` to a Storm cluster "
               "(sparse submit)"),
    "runs": ("runs", "list, show or delete the word-count runs stored in Redis"),
    "logs": ("logs", "print the last lines of each task's log and stderr of a local run"),
    "replay": ("replay", "replay a dataset through groupings in PySpark: exact loads, counts and a queueing "
               "estimate"),
    "compare": ("compare", "put measured topology runs next to a replay's estimates (throughput, latency, "
                "balance, counts)"),
    "calibrate": ("calibrate", "fit the topology model's costs to measured runs stored in Redis and store a named "
                  "profile"),
    "partition": ("partition-experiment", "Gedik's §5 experiment: b and m of scan/redist/readj vs uniform and "
                  "consistent hashing, N = 1..10"),
    "rebalance": ("rebalance", "measure the key state that moves when a worker is added or removed mid-stream"),
    "execution": ("execution", "execution time and latency of each grouping on workers of given (e.g. unequal) "
                  "speeds"),
    "advise": ("advise", "measure a dataset and recommend a grouping (with parameters) from simulations at each W"),
    "demo": ("demo", "the whole product on a skewed dataset: simulate, run the topology, replay, compare"),
}


def requested_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line: the first word that is not an option (the top-level
    options take no value)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: list[str] | None = None, *, eager: bool = False) -> argparse.ArgumentParser:
    """The parser; only the requested subcommand's module is imported (every one with ``eager``)."""
    parser = argparse.ArgumentParser(
        prog="keysplit",
        description="Skew-aware stream groupings for Apache Storm: simulate them, run them in a real "
        "streamparse topology, replay them in Spark, and compare.",
    )
    parser.add_argument("--version", action="version", version=f"keysplit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = requested_command(sys.argv[1:] if argv is None else argv)
    for module in COMMANDS:
        if eager or module not in SUMMARIES or SUMMARIES[module][0] == wanted:
            importlib.import_module(f"keysplit.commands.{module}").add_parser(sub)
        else:
            name, summary = SUMMARIES[module]
            sub.add_parser(name, help=summary)  # a placeholder: never parsed, only listed
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="keysplit: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # so that a closed pipe shows up here, not in the interpreter's exit flush
        return status
    except BrokenPipeError:
        # The reader stopped early, which is its right (`| head`): no traceback, and stdout goes to devnull so
        # that the exit flush does not fail again (Python's documented recipe). 141 = 128 + SIGPIPE is what a
        # shell reports for `cat` or `yes` in the same pipe, so `set -o pipefail` scripts see the usual status.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeysplitError as exc:
        print(f"keysplit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("keysplit: interrupted", file=sys.stderr)
        return 130


def console() -> int:
    """The ``keysplit`` executable: :func:`main`, then the process ends. Its objects are frozen first, which
    spares the interpreter's shutdown its collections over every one of them (a 5 M-message simulate holds
    100 k keys: ~15 ms of its exit); commands close their resources themselves. Not for callers of main()
    that go on running, whose later garbage would then never be collected."""
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(console())
