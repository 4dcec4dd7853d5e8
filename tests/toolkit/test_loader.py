"""`keysplit run FILE` runs the class `sparse submit` deploys: both find it with streamparse's own loader
(``streamparse.util.get_topology_from_file``), and whatever would make them differ is refused in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from keysplit.errors import KeysplitError
from keysplit.runs.topology_file import load_topology

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "your-topology.md"
COMPONENTS = ["views", "route", "partial", "total"]

#: What `sparse submit` does in a fresh process: streamparse's loader, then the Thrift topology it sends to Nimbus.
SPARSE = """
import json, sys, warnings
warnings.simplefilter("ignore")
from streamparse.util import get_topology_from_file
cls = get_topology_from_file(sys.argv[1])
print(json.dumps({"class": cls.__name__, "spouts": sorted(cls.thrift_topology.spouts),
                  "bolts": sorted(cls.thrift_topology.bolts)}))
"""


def deployed_by_sparse(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", SPARSE, str(path)], capture_output=True, text=True,
                          cwd=path.parent.parent, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def guide_topology(project: Path) -> Path:
    """The guide's topology file, as its heredoc writes it."""
    text = GUIDE.read_text()
    match = re.search(r"cat > mysite/topologies/(\w+\.py) <<'EOF'\n(.*?)\nEOF\n", text, re.DOTALL)
    assert match, "the guide writes its topology with a heredoc"
    path = project / "topologies" / match.group(1)
    path.parent.mkdir(parents=True)
    path.write_text(match.group(2) + "\n")
    return path


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / "topologies" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


PAGES = """
    from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology

    class {name}(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=4)
        total = Aggregate.merge(inputs=partial, top=5, par={merges})
"""


@pytest.mark.parametrize("which", ["example", "guide"])
def test_sparse_submit_deploys_the_class_keysplit_runs(which, tmp_path):
    path = ROOT / "topologies" / "pageviews.py" if which == "example" else guide_topology(tmp_path / "mysite")
    sparse = deployed_by_sparse(path)
    assert sparse["spouts"] == ["views"] and sparse["bolts"] == ["partial", "route", "total"]
    loaded = load_topology(str(path))
    assert loaded.name == sparse["class"]
    assert [spec.name for spec in loaded.cls.specs] == COMPONENTS


def test_the_same_file_name_in_two_projects_loads_each_its_own(tmp_path):
    one = write(tmp_path / "one", "pages.py", PAGES.format(name="One", merges=1))
    two = write(tmp_path / "two", "pages.py", PAGES.format(name="Two", merges=3))
    assert load_topology(str(one)).parallelism["total"] == 1
    assert load_topology(str(two)).parallelism["total"] == 3


def test_a_package_an_earlier_project_imported_from_its_src_does_not_shadow_a_later_file(tmp_path):
    """A fresh sparse process has none of an earlier load's modules: not its topology file, not its src/ packages."""
    body = PAGES.format(name="Views", merges=1).replace('accumulator=Sum("bytes")', "accumulator=pages.BYTES")
    earlier = write(tmp_path / "earlier", "views.py", body.replace("\n    class", "\n    import pages\n\n    class"))
    (tmp_path / "earlier" / "src" / "pages").mkdir(parents=True)
    (tmp_path / "earlier" / "src" / "pages" / "__init__.py").write_text(
        'from keysplit.toolkit import Sum\nBYTES = Sum("bytes")\n')
    later = write(tmp_path / "later", "pages.py", PAGES.format(name="Later", merges=2))
    assert load_topology(str(earlier)).parallelism["total"] == 1
    assert "pages" in sys.modules  # the earlier project's src/pages, imported by its topology file
    assert load_topology(str(later)).parallelism["total"] == 2
    assert Path(sys.modules["pages"].__file__) == later.resolve()


def test_two_topology_classes_in_one_file_are_refused(tmp_path):
    path = write(tmp_path, "twice.py", PAGES.format(name="First", merges=1) + PAGES.format(name="Second", merges=2)
                 .replace("from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology", ""))
    assert deployed_by_sparse(path)["class"] == "First"  # sparse takes the first one silently
    with pytest.raises(KeysplitError, match=r"2 topology classes \(First, Second\): sparse submit deploys the first"):
        load_topology(str(path))


def test_a_subclass_of_a_topology_is_refused(tmp_path):
    base = textwrap.dedent(PAGES.format(name="_Base", merges=1))
    path = write(tmp_path, "sub.py", base + "\n\nclass Mine(_Base):\n    pass\n")
    with pytest.raises(KeysplitError, match="a subclass inherits no components"):  # streamparse refuses it
        load_topology(str(path))
    (tmp_path / "other" / "src").mkdir(parents=True)
    (tmp_path / "other" / "src" / "basepages.py").write_text(base)
    path = write(tmp_path / "other", "sub2.py", "import basepages\nfrom keysplit.toolkit import FeedSpout\n\n\n"
                 "class Mine(basepages._Base):\n    more = FeedSpout.spec(fields=['page'])\n")
    with pytest.raises(KeysplitError, match="subclasses the topology _Base, but streamparse builds a topology from its "
                       "own class body alone"):
        load_topology(str(path))


def test_a_topology_built_with_type_loads_as_sparse_finds_it(tmp_path):
    path = write(tmp_path, "built.py", """
        from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology

        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=4)
        Built = type("Built", (Topology,), {"views": views, "route": route, "partial": partial,
                                            "total": Aggregate.merge(inputs=partial)})
    """)
    assert deployed_by_sparse(path)["class"] == "Built"
    assert [spec.name for spec in load_topology(str(path)).cls.specs] == COMPONENTS


def test_a_file_that_exits_while_imported_says_so(tmp_path):
    path = write(tmp_path, "leaves.py", "import sys\nsys.exit(3)\n")
    with pytest.raises(KeysplitError, match=r"leaves.py exited while it was imported \(SystemExit: 3\)"):
        load_topology(str(path))


def test_a_file_named_after_another_module_is_refused(tmp_path):
    # streamparse imports the file by its stem with its folder appended to sys.path: json.py would be the stdlib's
    path = write(tmp_path, "json.py", PAGES.format(name="Pages", merges=1))
    with pytest.raises(KeysplitError, match="'json' is another module here"):
        load_topology(str(path))


def test_a_file_without_a_topology_class_says_what_to_write(tmp_path):
    path = write(tmp_path, "empty.py", "X = 1\n")
    with pytest.raises(KeysplitError, match="defines no topology class"):
        load_topology(str(path))


def test_the_example_topologies_docstring_commands_parse_and_name_real_datasets():
    import ast
    import shlex

    from keysplit.cli import build_parser
    from keysplit.datasets import open_dataset

    for path in sorted((ROOT / "topologies").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        commands = [line.strip() for line in doc.splitlines() if line.strip().startswith("keysplit ")]
        for command in commands:
            argv = shlex.split(command.split("  #")[0])[1:]
            build_parser(argv).parse_args(argv)  # a renamed flag exits 2 here
            if argv[:2] == ["datasets", "generate"]:
                assert open_dataset(argv[2]).spec, f"{path.name}: {command}"


def test_a_file_named_after_a_package_of_the_projects_src_is_refused(tmp_path):
    # sparse puts ../src on the path before the file's folder: `import pages` imports src/pages/, and sparse then
    # finds no topology class in it
    (tmp_path / "src" / "pages").mkdir(parents=True)
    (tmp_path / "src" / "pages" / "__init__.py").write_text("")
    path = write(tmp_path, "pages.py", PAGES.format(name="Pages", merges=1))
    with pytest.raises(KeysplitError, match=r"'pages' is another module here \(.*src/pages/__init__.py\)"):
        load_topology(str(path))
