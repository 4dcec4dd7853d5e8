"""Every command's ``--help`` ends with examples, and every example is a command line the parser takes."""

from __future__ import annotations

import argparse
import shlex

import pytest

from keysplit.cli import build_parser


def _commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """(``keysplit X [Y]``, its parser) for every command and every subcommand of a command that has them."""
    root = build_parser(eager=True)
    out = []
    todo = [("keysplit", root)]
    while todo:
        name, parser = todo.pop()
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subs:
            for sub_name, sub in action.choices.items():
                out.append((f"{name} {sub_name}", sub))
                todo.append((f"{name} {sub_name}", sub))
    return sorted(out, key=lambda item: item[0])


def examples(help_text: str, command: str) -> list[str]:
    """The example command lines of a help text (continued lines joined, comments dropped)."""
    block = help_text.split("\nexample", 1)[1].replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in block.splitlines()
            if line.strip().startswith(command + " ") or line.strip() == command]


COMMANDS = _commands()


@pytest.mark.parametrize("command, parser", COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_help_shows_examples_that_parse(command, parser):
    text = parser.format_help()
    assert "\nexample" in text, f"`{command} --help` shows no examples"
    found = examples(text, command)
    assert found, f"`{command} --help` has an examples section without a `{command} ...` line"
    for line in found:
        argv = shlex.split(line)[1:]
        if any(arg.startswith("$") for arg in argv):  # a shell variable the text set before
            continue
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"`{line}` (from `{command} --help`) does not parse: exit {exc.code}")
