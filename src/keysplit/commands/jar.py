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
    p.add_argument("--force", action="store_true", help="replace --out even if keysplit did not build it")
    p.add_argument("--json", action="store_true", help="print one JSON object (path, entries) instead of a line")
    p.set_defaults(func=run)


def jar_folder(path: str) -> None:
    """Create ``_build/`` for the default jar path, as `sparse jar` makes it; a folder another --out names must
    exist (a typo there is an error, not a new tree of folders)."""
    from keysplit.errors import KeysplitError

    folder = os.path.dirname(path)
    if path == DEFAULT_OUT:
        os.makedirs(folder, exist_ok=True)
    elif folder and not os.path.isdir(folder):
        raise KeysplitError(f"cannot write {path}: directory {folder} does not exist")


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
    from keysplit.errors import KeysplitError
    from keysplit.local.submission import write_jar
    from keysplit.outputs import refuse_state

    if not args.out.strip() or os.path.isdir(args.out):
        raise KeysplitError(f"--out {args.out!r} is {'a directory' if args.out.strip() else 'empty'}; name a file")
    refuse_state("--out", args.out)
    refuse_foreign_jar(args.out, "--out", args.force)
    jar_folder(args.out)
    names = write_jar(args.out, args.src, with_keysplit=True)
    if args.json:
        print_json({"jar": os.path.abspath(args.out), "entries": len(names), "bytes": os.path.getsize(args.out)})
    else:
        sys.stdout.write(f"{args.out}: {len(names)} entries, {os.path.getsize(args.out):,} bytes "
                         f"(sparse submit -j {args.out})\n")
    return 0
