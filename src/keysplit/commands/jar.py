"""``keysplit jar``: build the topology jar for `sparse submit -j` (no lein, no JVM)."""

from __future__ import annotations

import argparse
import os
import sys

from keysplit.cli import command_summary
from keysplit.commands.common import print_json

DEFAULT_OUT = os.path.join("_build", "wordcount.jar")

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Write the jar streamparse's `sparse jar` would build for this project: a zip whose "
        "resources/ tree holds the keysplit package (what `sparse jar` copies from src/), which a Storm "
        "supervisor extracts and runs the Python components in. It holds no Storm class: the cluster's own "
        "Storm runs the multi-lang components. Submit it with `sparse submit -j FILE`.",
        epilog="example:\n  keysplit jar --out _build/wordcount.jar\n  LEIN_ROOT=1 sparse submit -e prod -n "
        "wordcount -j _build/wordcount.jar -o keysplit.run_id=RUN_ID ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", "-o", default=DEFAULT_OUT, metavar="FILE",
                   help=f"where to write it (default {DEFAULT_OUT})")
    p.add_argument("--src", metavar="DIR",
                   help="your streamparse project's src/ (a topology built with keysplit.toolkit): the jar holds it "
                   "and keysplit's worker files, so the workers need only keysplit's base dependencies "
                   "(default: keysplit's own topologies)")
    p.add_argument("--include", action="append", default=[], metavar="PATH",
                   help="with --src: ship this file (a path below --src) although it is named as keys and "
                   "credentials are (id_rsa*, *.pem, *.key, secrets.*, ...), which the jar otherwise leaves out; "
                   "repeatable")
    p.add_argument("--force", action="store_true", help="replace --out even if keysplit did not build it")
    p.add_argument("--json", action="store_true", help="print one JSON object (path, entries) instead of a line")
    p.set_defaults(func=run)


def jar_folder(path: str) -> str | None:
    """Create the folder --out names if it is missing, as `sparse jar` makes ``_build/``; returns the folder it
    created (None: it was there). One line when it cannot be made."""
    from keysplit.errors import KeysplitError

    folder = os.path.dirname(path)
    if not folder or os.path.isdir(folder):
        return None
    try:
        os.makedirs(folder)
    except OSError as exc:
        raise KeysplitError(f"cannot write {path}: cannot create its folder {folder}: {exc.strerror or exc}") from None
    return folder


def refuse_foreign_jar(path: str, option: str, force: bool = False) -> None:
    """A one-line KeysplitError when ``path`` holds a file that is not a jar keysplit built (its manifest says
    ``Created-By: keysplit jar``), unless ``force``: `sparse jar`'s uberjar or any other file stays the user's."""
    import zipfile

    from keysplit.errors import KeysplitError

    if force or not os.path.lexists(path):
        return
    try:
        with zipfile.ZipFile(path) as jar:
            ours = b"Created-By: keysplit jar" in jar.read("META-INF/MANIFEST.MF")
    except (OSError, KeyError, zipfile.BadZipFile):
        ours = False
    if not ours:
        raise KeysplitError(f"{option} {path} exists and keysplit did not build it; choose another file, or add "
                            "--force to replace it")


def run(args: argparse.Namespace) -> int:
    """SIGTERM and SIGHUP stop it as Ctrl-C does: the jar's temporary file removed, nothing written at --out."""
    from keysplit.commands.common import Stopped, stop_on_signals

    try:
        with stop_on_signals():
            return _run(args)
    except (Stopped, KeyboardInterrupt) as exc:
        name, status = (str(exc), exc.status) if isinstance(exc, Stopped) else ("Ctrl-C", 130)
        print(f"keysplit: jar stopped by {name}; nothing was written to {args.out}", file=sys.stderr)
        return status


def _run(args: argparse.Namespace) -> int:
    from keysplit.errors import KeysplitError
    from keysplit.local.submission import write_jar
    from keysplit.outputs import refuse_state

    if not args.out.strip() or os.path.isdir(args.out):
        raise KeysplitError(f"--out {args.out!r} is {'a directory' if args.out.strip() else 'empty'}; name a file")
    if args.include and not args.src:
        raise KeysplitError("--include names files below --src; give --src DIR")
    refuse_state("--out", args.out)
    refuse_foreign_jar(args.out, "--out", args.force)
    left_out: list[tuple[str, str]] = []
    if args.src:
        from keysplit.local.source_tree import read_source_tree

        read_source_tree(args.src, args.include)  # its one-line errors before any folder is made
    created = jar_folder(args.out)
    names = write_jar(args.out, args.src, with_keysplit=True, include=tuple(args.include), left_out=left_out)
    unused = [name for name in args.include if os.path.normpath(name) not in
              {os.path.normpath(n[len("resources/"):]) for n in names}]
    if args.json:
        print_json({"jar": os.path.abspath(args.out), "entries": len(names), "bytes": os.path.getsize(args.out),
                    "left_out": [{"path": p, "why": why} for p, why in left_out]})
    else:
        sys.stdout.write(f"{args.out}: {len(names)} entries, {os.path.getsize(args.out):,} bytes, readable by you "
                         f"alone (sparse submit -j {args.out})" + (f"; created {created}/" if created else "") + "\n")
    for path, why in left_out:  # on stderr, so that --json's stdout stays one object
        sys.stderr.write(f"keysplit: left out of the jar: {os.path.join(args.src, path)}: {why}\n")
    if left_out and any("credentials" in why for _, why in left_out):
        sys.stderr.write("keysplit: a file named as keys and credentials are ships only if you name it: "
                         "--include PATH\n")
    for name in unused:
        sys.stderr.write(f"keysplit: --include {name}: no such file below {args.src} went into the jar\n")
    return 0
