"""Comments and docstrings point only at what a reader of the repository can open.

Design notes live in the site (docs/design/...), so a pointer at a design file outside the repository, at an
issue tracker's number or at a paper's path on one machine is a dead end for everyone else; this test fails on
the first one, naming its file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("src", "spark_replay", "tests", "benchmarks", "topologies")
# Built by concatenation so that this file does not match its own patterns.
OUTSIDE = re.compile("|".join([r"DESIGN" + r"\.md", r"\bissue" + r"s? #?\d", r"papers" + r"/0", r"\bshared" + r"/"]))
SUFFIXES = {".py", ".md", ".txt", ".cfg", ".toml"}


def outside_pointers() -> list[str]:
    found = []
    for top in CHECKED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or "__pycache__" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_comment_or_docstring_points_outside_the_repository():
    assert outside_pointers() == []


def test_the_pattern_catches_each_kind_of_outside_pointer():
    for line in ["see DESIGN" + ".md", "(issue" + " 12)", "papers" + "/003", "/work/shared" + "/DESIGN"]:
        assert OUTSIDE.search(line), line
    assert not OUTSIDE.search("docs/design/exactly-once.md")


def test_every_page_the_code_cites_exists():
    cited = set()
    for top in CHECKED:
        for path in (ROOT / top).rglob("*.py"):
            cited.update(re.findall(r"docs/[\w/.-]+?\.md", path.read_text(encoding="utf-8", errors="replace")))
    assert len(cited) >= 5
    assert [page for page in sorted(cited) if not (ROOT / page).is_file()] == []
