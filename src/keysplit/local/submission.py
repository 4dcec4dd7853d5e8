"""What ``sparse submit`` hands to Storm, rebuilt without a JVM: the topology jar's ``resources/`` tree and
the topology configuration, so the local runner starts components exactly as a supervisor would.

- **Resources.** streamparse's ``prepare_topology`` (``streamparse/util.py``) copies the project's ``src/``
  into ``_resources/resources/``, and ``lein jar`` (``project.clj``: ``:resource-paths ["_resources"]``) zips
  it as ``resources/...``. A supervisor extracts ``resources/`` from the jar next to the topology's code
  (apache/storm ``daemon/supervisor``: ``ServerConfigUtils.RESOURCES_SUBDIR``), and Storm's ``ShellProcess``
  starts each multi-lang component there (``builder.directory(new File(context.getCodeDir()))``, apache/storm
  ``utils/ShellProcess.java``). :func:`build_resources` makes that tree, :func:`write_jar` the jar.
- **Configuration.** ``sparse submit`` sends ``streamparse.cli.common.resolve_options(-o options, the
  config.json env, the topology class)`` as the topology's JSON conf: the env's ``options``, its
  ``log`` settings as ``pystorm.log.*``, the topology's ``config``, then ``-o``. :func:`submit_conf` calls that
  same function.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.outputs import atomic_file

from .source_tree import read_source_tree

#: What the topology jar holds of the ``keysplit`` package (paths below it, globs allowed): the components
#: (``storm/``) and what they import, every registered grouping with its sketches and Gedik's partitioning
#: functions, and the dataset readers the router and the feed decode records with. Nothing else: no CLI, no
#: local runner, no simulator and no compiled extension (a cluster's workers run another Python or CPU as often
#: as not). ``tests/local/test_jar.py`` starts every component and builds every registered grouping from this tree
#: alone under ``python -S``, so a module missing here fails there.
JAR_CONTENTS = (
    "__init__.py", "errors.py", "specs.py", "hashing.py", "javahash.py", "fingerprint.py", "stream.py",
    "redis_client.py", "latency.py", "sizes.py",
    "datasets/*.py", "groupings/*.py", "sketches/*.py", "storm/*.py", "toolkit/*.py",
    "partitioning/__init__.py", "partitioning/adaptive.py", "partitioning/construct.py", "partitioning/function.py",
    "partitioning/penalties.py", "partitioning/readj.py", "partitioning/redist.py", "partitioning/resources.py",
    "partitioning/scan.py", "partitioning/threshold.py", "partitioning/utility.py",
)


def jar_files(package: Path) -> list[Path]:
    """The files of ``package`` (the ``keysplit`` package folder) that :data:`JAR_CONTENTS` names, sorted."""
    found = {path for pattern in JAR_CONTENTS for path in package.glob(pattern) if path.is_file()}
    return sorted(found)


def build_resources(dest: str | os.PathLike, src: str | os.PathLike | None = None, *,
                    with_keysplit: bool = False, left_out: list[tuple[str, str]] | None = None) -> Path:
    """Make ``dest``, laid out as the jar's ``resources/``; returns ``dest``.

    A given ``src`` is copied as :func:`~.source_tree.read_source_tree` lists it (the files under it, no link out of
    it, no key or credential file), and what it left out is appended to ``left_out``. Without one, or with
    ``with_keysplit`` when ``src`` holds no ``keysplit`` package (a user's project whose topology uses
    keysplit.toolkit), the files of the ``keysplit`` package this code runs from that :data:`JAR_CONTENTS` names
    are copied to ``dest/keysplit``; it works for an installed keysplit too (whose parent directory is
    site-packages).
    """
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path, name in resource_files(src, with_keysplit=with_keysplit, left_out=left_out):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(path, target)
            shutil.copystat(path, target)
        except OSError as exc:
            raise KeysplitError(f"cannot copy {path}: {exc.strerror or exc}") from None
    return dest


def resource_files(src: str | os.PathLike | None = None, *, with_keysplit: bool = False,
                   left_out: list[tuple[str, str]] | None = None, include: tuple[str, ...] = ()
                   ) -> list[tuple[Path, str]]:
    """What :func:`build_resources` puts in ``resources/``: ``(file to read, name below resources/)``, sorted."""
    files: list[tuple[Path, str]] = []
    if src is not None:
        tree = read_source_tree(src, include)
        if left_out is not None:
            left_out.extend(tree.left_out)
        files = tree.files
        if not with_keysplit or any(name.startswith("keysplit/") for _, name in files):
            return files
    package = Path(__file__).resolve().parents[1]
    files += [(path, f"{package.name}/{path.relative_to(package).as_posix()}") for path in jar_files(package)]
    return sorted(files, key=lambda f: f[1])


def write_jar(out: str | os.PathLike, src: str | os.PathLike | None = None, *, with_keysplit: bool = False,
              include: tuple[str, ...] = (), left_out: list[tuple[str, str]] | None = None) -> list[str]:
    """Write the topology jar ``sparse submit -j`` uploads: ``resources/<the files of build_resources>`` plus a
    manifest; no Storm class (the cluster's own Storm runs the multi-lang components). Returns the entries; what
    of ``src`` was left out is appended to ``left_out``. Zipped straight from the files (no temporary copy), and
    written private (0600): it may hold whatever the project's code holds."""
    out = Path(out)
    files = resource_files(src, with_keysplit=with_keysplit, left_out=left_out, include=include)
    names: list[str] = ["META-INF/MANIFEST.MF"]
    # written whole under a temporary name and renamed: never half a jar, never through a symlink at ``out``
    with atomic_file(out, "the jar", "wb", permissions=0o600) as fh, \
            zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: keysplit jar\r\n\r\n")
        for path, name in files:
            try:
                jar.write(path, "resources/" + name)
            except OSError as exc:
                raise KeysplitError(f"cannot read {path}: {exc.strerror or exc}") from None
            names.append("resources/" + name)
    return names


def read_env(config_file: str | os.PathLike, env_name: str) -> dict[str, Any]:
    """The ``envs[env_name]`` object of a streamparse ``config.json``; one-line errors."""
    try:
        with open(config_file, encoding="utf-8") as fh:
            config = json.load(fh)
    except OSError as exc:
        raise KeysplitError(f"cannot read {config_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise KeysplitError(f"{config_file} is not valid JSON: {exc}") from None
    envs = config.get("envs") if isinstance(config, dict) else None
    if not isinstance(envs, dict) or env_name not in envs:
        raise KeysplitError(f"{config_file} has no env {env_name!r} (envs: {sorted(envs or {})})")
    return envs[env_name]


def submit_conf(topology_class: Any, name: str, options: Mapping[str, Any] | None = None, *,
                env_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The topology configuration ``sparse submit -e ENV -o ...`` would send for ``topology_class``.

    ``env_config`` is the config.json env (:func:`read_env`); None stands for a project without one (no
    virtualenv, no log settings). Nimbus is not asked for its workers (``local_only``), so
    ``topology.workers`` and ``topology.acker.executors`` default to 1 unless set.
    """
    with warnings.catch_warnings():  # streamparse's CLI imports paramiko and pkg_resources, which warn on import
        warnings.simplefilter("ignore")
        from streamparse.cli.common import resolve_options

    env = dict(env_config) if env_config is not None else {"use_virtualenv": False}
    conf = resolve_options(dict(options or {}), env, topology_class, name, local_only=True)
    conf.setdefault("topology.name", name)
    return conf
