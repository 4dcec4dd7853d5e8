"""The manual builds: ``mkdocs build --strict`` (what ``make docs`` and CI run) succeeds, so no link is broken and
no page is missing; the command line reference, generated from the parsers, lists every command; the groupings'
parameter tables come from their classes; the README stays an entrance."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from keysplit.cli import COMMANDS, listed_command
from keysplit.groupings import available, grouping_class

ROOT = Path(__file__).resolve().parents[2]


def hooks():
    spec = importlib.util.spec_from_file_location("generated_pages", ROOT / "docs_hooks" / "generated_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_has_every_command_and_subcommand():
    page = hooks().cli_reference()
    for name, _summary in map(listed_command, COMMANDS):
        assert f"`keysplit {name}`" in page, name
        assert f"usage: keysplit {name}" in page, name
    for nested in ("keysplit run wordcount", "keysplit datasets generate", "keysplit datasets stats"):
        assert f"`{nested}`" in page, nested


def test_the_parameter_tables_are_the_classes_parameters():
    table = hooks().params_table(",".join(available()))
    for name in available():
        for key in grouping_class(name).PARAMS:
            assert f"| `{name}` | `{key}` |" in table, (name, key)
    for page in ("pkg", "choices", "dkg", "fish", "gedik"):
        assert "<!-- keysplit-params: " in (ROOT / "docs" / "groupings" / f"{page}.md").read_text(), page


def test_the_site_builds_strict(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert all(f"keysplit {name}" in cli for name, _ in map(listed_command, COMMANDS))
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "PartialKeyGrouping" in api and "least loaded" in api
    assert (tmp_path / "site" / "img" / "demo" / "simulate.png").stat().st_size > 0


def test_the_readme_is_an_entrance():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert "make demo" in readme and "make test" in readme and "make docs" in readme


def test_the_readmes_links_lead_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 15
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_the_home_page_ends_with_the_first_command_and_code_wraps():
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", home, re.DOTALL)
    assert blocks and blocks[-1].strip() == "make demo"
    assert home.rindex("make demo") > home.rindex("## ")  # in the page's last section, after every other
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "white-space: pre-wrap" in css and "stylesheets/extra.css" in (ROOT / "mkdocs.yml").read_text()
