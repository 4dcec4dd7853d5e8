"""A topology file, loaded exactly as ``sparse submit`` loads it (streamparse's own
:func:`streamparse.util.get_topology_from_file`), so the class keysplit runs, replays and submits is the class the
cluster deploys; whatever would make the two differ is refused in one line."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.toolkit.accumulators import check_shipped
from keysplit.toolkit.specs import FeedSpoutSpec, PartialSpec, check_topology


@dataclass
class LoadedTopology:
    """A user's topology class, where it came from, and the project it belongs to."""

    cls: Any
    name: str  # the class name (the topology's name, as `sparse submit -n` takes it for one file)
    path: Path
    root: Path  # the streamparse project: the folder holding topologies/ (and src/), else the file's folder

    def specs_of(self, kind: type) -> list:
        return [s for s in self.cls.specs if isinstance(s, kind)]

    @property
    def spout_names(self) -> set[str]:
        from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec

        return {s.name for s in self.cls.specs if isinstance(s, (ShellSpoutSpec, JavaSpoutSpec))}

    @property
    def parallelism(self) -> dict[str, int]:
        return {s.name: s.par for s in self.cls.specs}


def load_topology(target: str) -> LoadedTopology:
    """The topology class of ``path/to/topology.py`` exactly as ``sparse submit`` finds it (streamparse's own loader,
    :func:`streamparse.util.get_topology_from_file`), checked (:func:`keysplit.toolkit.check_topology`); one-line
    errors. Whatever would make the cluster deploy something other than what keysplit runs is refused."""
    path = Path(target)
    if path.suffix != ".py":
        raise KeysplitError(f"{target}: a topology is `wordcount` or a Python file (path/to/topology.py)")
    if not path.is_file():
        raise KeysplitError(f"topology file not found: {target}")
    path = path.resolve()
    root = path.parent.parent if path.parent.name == "topologies" else path.parent
    cls = _import_as_sparse_does(path, target)
    _refuse_what_sparse_would_deploy_otherwise(cls, target)
    loaded = LoadedTopology(cls, cls.__name__, path, root)
    check_topology(loaded.cls)
    for partial in loaded.specs_of(PartialSpec):  # an accumulator from the project but outside src/: not shipped
        check_shipped(partial.accumulator, f"Aggregate.partial {partial.name}", root=root)
    if len(loaded.specs_of(FeedSpoutSpec)) > 1:
        raise KeysplitError(f"{target}: {loaded.name} has more than one FeedSpout; keysplit run loads one feed a run")
    return loaded


#: The folders the project this process works on put on sys.path (a topology file's folder and its ``../src``, or a
#: run's ``src/`` whose accumulator a command imports). One project at a time: switching to another forgets these
#: folders and every module imported from them, as a fresh ``sparse`` process (or a fresh keysplit) would not have
#: them, so one project's ``src/pages`` cannot shadow another's ``pages.py``.
_PROJECT_FOLDERS: list[str] = []
#: keysplit's own packages are never a project's, even when the project is keysplit's repository (whose
#: ``topologies/../src`` holds them): dropping them would make a second copy of every class.
_OWN_PACKAGES = ("keysplit", "spark_replay")


def _forget_the_project() -> None:
    roots = [Path(folder).resolve() for folder in _PROJECT_FOLDERS]
    for folder in _PROJECT_FOLDERS:
        while folder in sys.path:
            sys.path.remove(folder)
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if where and name.split(".")[0] not in _OWN_PACKAGES and any(
                Path(where).resolve().is_relative_to(root) for root in roots):
            del sys.modules[name]
    _PROJECT_FOLDERS.clear()


def use_project_src(src: str) -> None:
    """Make a project's ``src/`` importable (a run's accumulator lives there), forgetting another project's first."""
    if any(Path(folder).resolve() == Path(src).resolve() for folder in _PROJECT_FOLDERS) and src in sys.path:
        return
    _forget_the_project()
    sys.path.insert(0, src)
    _PROJECT_FOLDERS.append(src)


def _import_as_sparse_does(path: Path, target: str) -> Any:
    """streamparse's ``get_topology_from_file``: it appends the file's folder and ``../src`` to ``sys.path`` and
    imports the module by the file's stem, then takes the first ``TopologyType`` in the module that is not
    ``streamparse.Topology``. What this process imported from an earlier project (a file of the same stem, a package
    of its src/) is dropped first, as a fresh ``sparse`` process would not have it."""
    import warnings

    with warnings.catch_warnings():  # streamparse.util imports paramiko and pkg_resources, which warn on import
        warnings.simplefilter("ignore")
        from streamparse.util import get_topology_from_file

    _forget_the_project()
    stale = sys.modules.get(path.stem)
    if stale is not None:
        where = getattr(stale, "__file__", None) or "a built-in module"
        raise KeysplitError(f"{target}: streamparse imports a topology by its file name, and {path.stem!r} is "
                            f"another module here ({where}); rename the file")
    try:
        cls = get_topology_from_file(str(path))
    except KeysplitError as exc:
        raise KeysplitError(f"{target}: {exc}") from None
    except SystemExit as exc:  # the user's file called sys.exit (or exit) while it was imported
        raise KeysplitError(f"{target} exited while it was imported (SystemExit: {exc.code}); a topology file "
                            "only defines its class") from None
    except ValueError as exc:
        if "Could not find topology subclass" in str(exc):
            _refuse_another_module(path, target)  # the module imported may not be this file at all
            raise KeysplitError(f"{target} defines no topology class (class MyTopology(Topology): ... with "
                                "Topology from keysplit.toolkit or streamparse)") from None
        if "requires at least one Spout" in str(exc):  # streamparse's TopologyType, for a class with no spout spec
            raise KeysplitError(f"cannot import {target}: a topology class has no spout (streamparse builds each "
                                "class from its own body alone: a subclass inherits no components)") from None
        raise KeysplitError(f"cannot import {target}: ValueError: {exc}") from None
    except Exception as exc:  # the user's file: say what it raised and where, in one line
        raise KeysplitError(f"cannot import {target}: {type(exc).__name__}: {exc}") from None
    finally:  # the folders streamparse's loader appended
        _PROJECT_FOLDERS[:] = [str(path.parent), os.path.join(str(path.parent), "..", "src")]
    _refuse_another_module(path, target)
    return cls


def _refuse_another_module(path: Path, target: str) -> None:
    """The module streamparse imported for the file's stem must be the file: a package of the same name in the
    project's src/ (which sparse puts first on the path), the standard library's or an installed one would be
    imported instead, here and on the cluster."""
    module = sys.modules.get(path.stem)
    if module is None or Path(getattr(module, "__file__", "") or "/").resolve() != path:
        where = getattr(module, "__file__", None) or "a built-in module"
        raise KeysplitError(f"{target}: streamparse imports a topology by its file name, and {path.stem!r} is "
                            f"another module here ({where}); rename the file")


def _refuse_what_sparse_would_deploy_otherwise(cls: Any, target: str) -> None:
    """streamparse deploys the first topology class of a module and builds each class from its own body alone:
    two classes in one file, or a subclass of another topology, would run one thing here and another on Storm."""
    from streamparse import Topology
    from streamparse.dsl.topology import TopologyType

    module = sys.modules.get(cls.__module__)
    others = [name for name, obj in vars(module).items() if isinstance(obj, TopologyType)
              and obj is not cls and obj is not Topology] if module else []
    if others:
        names = ", ".join([cls.__name__, *others])
        raise KeysplitError(f"{target} holds {len(others) + 1} topology classes ({names}): sparse submit deploys the "
                            f"first it finds ({cls.__name__}); keep one topology class a file (import the others' "
                            "components, not their classes)")
    inherited = [b.__name__ for b in cls.__mro__[1:] if isinstance(b, TopologyType) and b is not Topology]
    if inherited:
        raise KeysplitError(f"{target}: {cls.__name__} subclasses the topology {inherited[0]}, but streamparse builds "
                            f"a topology from its own class body alone, so {inherited[0]}'s components would not "
                            "run; write all the components in one class")
