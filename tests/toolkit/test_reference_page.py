"""Every Python example of the toolkit's API reference (docs/reference/toolkit.md) runs as a user pastes it, and
prints what the page says it prints: a print line's trailing comment, and the comment lines that end a block."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "toolkit.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks() -> list[str]:
    return BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def expected_output(code: str) -> list[str]:
    lines = code.rstrip("\n").splitlines()
    trailing: list[str] = []
    while lines and lines[-1].startswith("# "):
        trailing.insert(0, lines.pop()[2:])
    inline = [line.split("  # ", 1)[1] for line in lines if "print(" in line and "  # " in line]
    return inline + trailing


def test_the_page_documents_every_public_name():
    import keysplit.toolkit as toolkit

    headings = " ".join(line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
    missing = [name for name in toolkit.__all__ if not re.search(rf"\b{name}\b", headings)]
    assert not missing, f"no section heading names {missing}"


@pytest.mark.parametrize("code", blocks(), ids=lambda code: code.splitlines()[-1][:40])
def test_each_example_runs_and_prints_what_the_page_says(code, tmp_path):
    path = tmp_path / "example.py"
    path.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == expected_output(code)
