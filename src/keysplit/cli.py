"""The ``keysplit`` command. Each subcommand lives in ``keysplit.commands.<name>`` and exposes
``add_parser(subparsers)`` (which sets ``func``) so that this file stays a table of contents.

User mistakes (``KeysplitError``) print one line, ``keysplit: error: ...``, and exit 2; nothing else is
caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from keysplit import __version__
from keysplit.errors import KeysplitError

# Order is the order of `keysplit --help`.
COMMANDS = (
    "simulate",
    "datasets",
    "run",
    "replay",
    "compare",
    "partition",
    "rebalance",
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
        return int(args.func(args) or 0)
    except KeysplitError as exc:
        print(f"keysplit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("keysplit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
