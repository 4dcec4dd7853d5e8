"""The ``keysplit`` command. Each subcommand lives in ``keysplit.commands.<name>`` and exposes
``add_parser(subparsers)`` (which sets ``func``) so that this file stays a table of contents.

User mistakes (``KeysplitError``) print one line, ``keysplit: error: ...``, and exit 2; a reader that
closes the pipe early (``keysplit simulate --json | head``) ends the command quietly with 141; nothing else
is caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
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
    "runs",
    "replay",
    "compare",
    "partition",
    "rebalance",
    "execution",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keysplit",
        description="Skew-aware stream groupings for Apache Storm: simulate them, run them in a real "
        "streamparse topology, replay them in Spark, and compare.",
    )
    parser.add_argument("--version", action="version", version=f"keysplit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"keysplit.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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


if __name__ == "__main__":
    sys.exit(main())
