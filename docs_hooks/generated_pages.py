"""mkdocs hook: the pages written from the code, so that nothing is written twice.

- ``reference/cli.md``: every ``keysplit`` command and subcommand, from the argparse parsers of
  ``keysplit.cli.build_parser(eager=True)`` (the same objects the executable parses with), help text verbatim;
- ``changes.md``: the repository's ``CHANGES.md``;
- in any page, ``<!-- keysplit-params: pkg,salt -->`` becomes the table of those groupings' spec parameters
  (name, default, help) from their classes' ``PARAMS``, the table ``keysplit simulate --help`` also reads.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
HELP_COLUMNS = "100"  # argparse wraps to $COLUMNS: fixed, so the page is the same on every terminal


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The (name, parser) pairs of a parser's subparsers, in the order they were added; aliases once."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) not in seen:
                    seen.add(id(child))
                    found.append((name, child))
    return found


def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """Every command line prefix (``("keysplit", "runs", "show")``) with its ``--help`` text, depth first."""
    pages = [(words, parser.format_help())]
    for name, child in subcommands(parser):
        pages.extend(walk(child, (*words, name)))
    return pages


def cli_reference() -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        from keysplit.cli import build_parser

        entries = walk(build_parser([], eager=True), ("keysplit",))
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    lines = [
        "# Command line reference",
        "",
        "Generated at build time from the argparse parsers the `keysplit` executable uses "
        "(`keysplit.cli.build_parser`), so it is exactly what `--help` prints. Mistakes are one line, "
        "`keysplit: error: ...`, and exit status 2.",
        "",
    ]
    for words, text in entries:
        depth = min(len(words) + 1, 5)  # `keysplit` is h2 under the page title
        lines += [f"{'#' * depth} `{' '.join(words)}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


PARAMS_MARK = re.compile(r"<!-- keysplit-params: ([a-z,]+) -->")


def params_table(names: str) -> str:
    from keysplit.groupings import grouping_class
    from keysplit.groupings.base import spec_value

    rows = ["| spec | parameter | default | meaning |", "|---|---|---|---|"]
    for name in names.split(","):
        cls = grouping_class(name)
        if not cls.PARAMS:
            rows.append(f"| `{name}` | (none) | | {cls.summary} |")
        for key, param in cls.PARAMS.items():
            rows.append(f"| `{name}` | `{key}` | `{spec_value(param.default)}` | {param.help.replace('|', '/')} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    return PARAMS_MARK.sub(lambda match: params_table(match.group(1)), markdown)


def on_files(files, config):
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    changes = (ROOT / "CHANGES.md").read_text(encoding="utf-8")
    # CHANGES.md links into the repository's docs/; in the site those pages are at its root.
    files.append(File.generated(config, "changes.md", content=changes.replace("](docs/", "](")))
    return files
