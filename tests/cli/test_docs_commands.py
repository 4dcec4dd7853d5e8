"""The commands in the README and the manual do not go stale.

Every ``keysplit ...`` command line in README.md and docs/ (fenced blocks and inline code) is parsed by the real
parser (``keysplit.cli.build_parser``), so a renamed command or flag, or a flag the command no longer accepts,
fails here, naming the page and line. The placeholders the pages use (``RUN_ID``, ``...``, ``[--json]``) are
filled with values of the right shape first. The examples whose output the pages show (``$ keysplit ...``
followed by that output) are run for real and their output compared.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from keysplit.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^\s*```")
IN_BLOCK = re.compile(r"(?:^|\$ |\$\(|^\.venv/bin/)(keysplit [^#)]*)")
INLINE = re.compile(r"`(keysplit [^`]+)`")
DATASET = "zipf:messages=1000,seed=1"

#: Placeholders the pages write, and a value of the right shape for each (applied in this order).
PLACEHOLDERS = [
    (r"--dataset \.\.\.", f"--dataset {DATASET}"),
    (r"(?<=replay) \.\.\.", f" --dataset {DATASET}"),
    (r"RUN_ID\[,RUN_ID\.\.\.\]", "r1"),
    (r"RUN_ID\.\.\.", "r1 r2"),
    (r'"\$RUN_ID"|\bRUN_ID\b|(?<=--resume )(?:ID|R)\b', "r1"),
    (r"\$REDIS\b", "--redis redis://127.0.0.1:6379/0"),
    (r"\bDIR\b", "out"),
    (r"--dataset SPEC\b", f"--dataset {DATASET}"),
    (r"--rate R\b", "--rate 2000"),
    (r"\bAT:W\b", "500:11"),
    (r"\[(--[^\]]+)\]", r"\1"),
]


def command_lines() -> list[tuple[str, str]]:
    """(where, command) for every keysplit command line of the pages; where is ``page:line``."""
    found = []
    for page in PAGES:
        inside, pending = False, ""
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{page.relative_to(ROOT)}:{number}"
            if FENCE.match(line):
                inside = not inside
                continue
            if inside:
                text = f"{pending} {line.strip()}".strip() if pending else line.strip()
                pending = ""
                if text.endswith("\\"):  # a command continued on the next line
                    pending = text[:-1]
                    continue
                match = IN_BLOCK.search(text)
                if match:
                    found.append((where, match.group(1).strip()))
            else:
                found.extend((where, match.group(1).strip()) for match in INLINE.finditer(line))
    return found


def filled(command: str) -> list[str]:
    for pattern, value in PLACEHOLDERS:
        command = re.sub(pattern, value, command)
    return shlex.split(command)[1:]


@cache
def parser() -> argparse.ArgumentParser:
    return build_parser([], eager=True)


def command_path(words: list[str]) -> list[str]:
    """The leading words of ``words`` that name commands and subcommands; the rest are arguments."""
    current, path = parser(), []
    for word in words:
        children = {}
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                children = action.choices
        if word not in children:
            break
        current = children[word]
        path.append(word)
    return path


def parses(argv: list[str]) -> tuple[bool, str]:
    """Whether the real parser accepts ``argv`` (``--help`` counts as accepted), and what it printed."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser().parse_args(argv)
        except SystemExit as exc:
            return exc.code == 0, err.getvalue().strip()
    return True, ""


COMMANDS = command_lines()


def test_the_pages_have_commands_to_check():
    assert len(COMMANDS) > 80
    assert any("docs/guides/local.md" in where for where, _ in COMMANDS)


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_command_in_the_pages_parses(where, command):
    argv = filled(command)
    path = command_path(argv)
    assert path or argv[0].startswith("-"), f"{where}: {command!r} names no keysplit command"
    if len(argv) > len(path):  # a whole command line, not just a command's name
        ok, message = parses(argv)
        assert ok, f"{where}: {command!r} is refused by the parser: {message}"


def test_a_renamed_flag_is_caught():
    assert not parses(filled("keysplit simulate --dataset zipf:messages=10 --nodes 8"))[0]
    assert command_path(["datasets", "stats", "text:x.txt"]) == ["datasets", "stats"]
    assert not parses(["runs", "shw", "r1"])[0]


def shown_examples() -> list[tuple[str, str, list[str]]]:
    """(where, command, output lines) for every ``$ keysplit ...`` line of a fenced block with its output."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if line.startswith("$ keysplit "):
                output = []
                for after in lines[number + 1:]:
                    if FENCE.match(after) or after.startswith("$ "):
                        break
                    output.append(after)
                found.append((f"{page.relative_to(ROOT)}:{number + 1}", line[2:], output))
    return found


EXAMPLES = shown_examples()


def test_the_pages_show_examples():
    assert len(EXAMPLES) >= 5
    assert any("simulate --dataset" in command and output for _, command, output in EXAMPLES)


@pytest.mark.parametrize(("where", "command", "output"), EXAMPLES, ids=[where for where, _, _ in EXAMPLES])
def test_every_shown_example_prints_what_the_page_shows(where, command, output, tmp_path):
    keysplit = Path(sys.executable).with_name("keysplit")
    result = subprocess.run([str(keysplit), *shlex.split(command)[1:]], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, check=False)
    printed = (result.stdout + result.stderr).splitlines()
    for line in output:
        if line.endswith(" …"):  # a page's way of saying "this line, up to what varies from run to run"
            shown = any(out.startswith(line[:-1].rstrip()) for out in printed)
        else:
            shown = line in printed
        assert shown, f"{where}: {command!r} no longer prints {line!r}; it printed {printed[:5]}"


def test_every_benchmark_script_the_pages_name_exists():
    named = set()
    for page in PAGES:
        named.update(re.findall(r"benchmarks/[\w-]+\.py", page.read_text(encoding="utf-8")))
    assert len(named) >= 8
    assert [script for script in sorted(named) if not (ROOT / script).is_file()] == []
