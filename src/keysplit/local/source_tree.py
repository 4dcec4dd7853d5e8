"""What of a project's ``src/`` goes to the workers: the files under ``src/`` itself, never a key or a credential.

``sparse jar`` copies ``src/`` whole (``shutil.copytree``, which follows every symlink): a link to ``/etc/shadow``
put that file in the jar, two links looping into each other made it copy for ever, and a private key beside the
code went to Nimbus and every supervisor. The jar (and the local runner's copy of it, ``resources/``) holds instead
what :func:`read_source_tree` lists:

- the regular files under ``src/``, walked without following a link to a folder (a folder inside ``src/`` is in
  the jar under its own path already: following a link to it would copy it twice, or for ever in a loop);
- a link to a regular file inside ``src/``, as that file's content (a module shared under two names);
- never a link that leaves ``src/``, a dangling link or a loop of links, a FIFO, socket or device (reading a FIFO
  blocks), a hidden file or folder (``.git``, ``.env``), or a file named as keys and credentials are
  (:data:`SECRET_PATTERNS`) unless the caller names it (``keysplit jar --include``);
- nor build leftovers (bytecode, ``*.egg-info``), which the worker rebuilds.

Everything else left out is listed with its reason, so that ``keysplit jar`` can say what it did not ship.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from keysplit.errors import KeysplitError

#: Build leftovers, left out without a word (as ``sparse jar``'s own ignore list does).
BUILD_LEFTOVERS = ("__pycache__", "*.pyc", "*.pyo", "*.egg-info")

#: File names of private keys and credentials (matched case-insensitively): SSH keys, PEM/PKCS#12/Java key stores,
#: PuTTY and KeePass files, and the usual secrets and credentials files of deployment tools.
SECRET_PATTERNS = ("id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks",
                   "*.keystore", "*.ppk", "*.kdbx", "secret", "secret.*", "secrets", "secrets.*", "credentials",
                   "credentials.*", "*.htpasswd", "htpasswd")


@dataclass
class SourceTree:
    """The files to ship, as ``(path to read, name relative to src/)``, and what was left out, with why."""

    files: list[tuple[Path, str]] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)


def looks_secret(name: str) -> bool:
    low = name.lower()
    return any(fnmatch.fnmatchcase(low, pattern) for pattern in SECRET_PATTERNS)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def read_source_tree(src: str | os.PathLike, include: tuple[str, ...] | list[str] = ()) -> SourceTree:
    """List what of ``src`` the workers get (the module's docstring); ``include`` names files under ``src`` (paths
    relative to it) to ship although they are named as credentials are. One-line errors."""
    root = Path(src)
    if not root.is_dir():
        raise KeysplitError(f"{src} is not a directory: a streamparse project keeps its Python code in src/")
    real_root = os.path.realpath(root)
    wanted = {Path(os.path.normpath(name)).as_posix() for name in include}
    tree = SourceTree()
    folders: list[tuple[Path, str]] = [(root, "")]
    while folders:  # a stack, not recursion: a deep tree is no RecursionError
        folder, rel = folders.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise KeysplitError(f"cannot read {folder}: {exc.strerror or exc}") from None
        for entry in reversed(entries):  # popped in name order
            name = f"{rel}{entry.name}"
            if any(fnmatch.fnmatchcase(entry.name, p) for p in BUILD_LEFTOVERS):
                continue
            if entry.name.startswith("."):
                tree.left_out.append((name, "a hidden file or folder"))
                continue
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    why = _link_refused(path, real_root)
                    if why:
                        tree.left_out.append((name, why))
                        continue
                    target = os.path.realpath(path)
                    if looks_secret(os.path.basename(target)) and name not in wanted:
                        tree.left_out.append((name, f"a link to {os.path.basename(target)}, named as keys and "
                                                    "credentials are"))
                        continue
                    mode = os.stat(path).st_mode
                else:
                    mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                raise KeysplitError(f"cannot read {path}: {exc.strerror or exc}") from None
            if stat.S_ISDIR(mode):
                folders.append((path, f"{name}/"))
            elif not stat.S_ISREG(mode):
                tree.left_out.append((name, "not a regular file (a FIFO, socket or device)"))
            elif looks_secret(entry.name) and name not in wanted:
                tree.left_out.append((name, "named as keys and credentials are"))
            else:
                tree.files.append((path, name))
    tree.files.sort(key=lambda f: f[1])
    tree.left_out.sort()
    return tree


def _link_refused(link: Path, real_root: str) -> str | None:
    """Why the symlink ``link`` under ``src/`` is not followed, or None for a link to a regular file inside it."""
    try:
        os.stat(link)  # follows the chain
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symlinks"
        try:
            return f"a dangling symlink (to {os.readlink(link)})"
        except OSError:
            return "a dangling symlink"
    target = os.path.realpath(link)
    if not _inside(target, real_root):
        return f"a symlink out of src/ (to {target})"
    if os.path.isdir(target):
        return f"a symlink to a folder inside src/ ({os.path.relpath(target, real_root)}: shipped under its own path)"
    return None

