"""``keysplit datasets``: generate dataset files and print dataset statistics.

Write a generated dataset to a file, or print a dataset's statistics."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from keysplit.cli import command_summary
from keysplit.commands.common import Stopped, positive_int, print_json, stop_on_signals
from keysplit.datasets import (
    GENERATORS,
    READERS,
    Dataset,
    FileDataset,
    Generator,
    open_dataset,
    require_records,
    write_dataset,
)
from keysplit.errors import DatasetError
from keysplit.outputs import refuse_state, same_file

NAME, HELP = command_summary(__doc__)


def dataset_help() -> str:
    lines = ["generators (spec NAME:key=value,...):"]
    for name, gen in GENERATORS.items():
        params = ", ".join(f"{k}={p.default}" for k, p in gen.PARAMS.items())
        lines.append(f"  {name:<13} {gen.summary}\n  {'':<13} [{params}]")
    lines.append("readers (gzip read transparently):")
    for kind, reader in READERS.items():
        lines.append(f"  {kind:<13} {(reader.__doc__ or '').strip().splitlines()[0]}")
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME, help=HELP,
                       description="Generate dataset files and print dataset statistics.",
                       epilog="examples:\n"
                       "  keysplit datasets generate zipf:z=1.1,keys=5000,messages=30000,seed=42 --out zipf.txt "
                       "--words-per-line 10\n"
                       "  keysplit datasets stats text:zipf.txt\n"
                       "  keysplit datasets stats zipf:z=1.2,keys=1000,messages=20000,seed=1 --json\n\n"
                       + dataset_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    dsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    g = dsub.add_parser("generate", help="write a generated dataset as a CSV file the readers read back",
                        description="Write a dataset as CSV (one key a row), or with --words-per-line as a text "
                        "corpus. The file's name says its format (.csv or .txt, .gz to gzip); an existing "
                        "file is replaced only with --force.",
                        epilog="examples:\n"
                        "  keysplit datasets generate zipf:z=1.1,keys=5000,messages=30000,seed=42 --out zipf.csv\n"
                        "  keysplit datasets generate zipf:z=1.1,keys=5000,messages=30000,seed=42 --out zipf.txt "
                        "--words-per-line 10\n\n" + dataset_help(),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("spec", metavar="SPEC", help="generator spec, e.g. zipf:z=1.2,keys=1000,messages=100000")
    g.add_argument("--out", required=True, metavar="FILE",
                   help="output file: .csv (or .csv.gz); .txt (or .txt.gz) with --words-per-line")
    g.add_argument("--words-per-line", type=positive_int, metavar="N",
                   help="write a text corpus instead, N keys a line (one line = one spout tuple in the topology)")
    g.add_argument("--force", action="store_true", help="replace --out if it exists")
    g.set_defaults(func=generate)
    s = dsub.add_parser("stats", help="messages, distinct keys and p1 of a dataset",
                        epilog="examples:\n  keysplit datasets stats text:zipf.txt\n"
                        "  keysplit datasets stats csv:views.csv,key=page --json\n\n" + dataset_help(),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("spec", metavar="SPEC", help="any dataset spec")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=stats)


#: The file names each format is written under: a name says what the file holds, and a reader picks by it.
SUFFIXES = {"CSV": (".csv", ".csv.gz"), "text": (".txt", ".txt.gz")}


def check_out(out: str, text: bool, force: bool) -> None:
    """A one-line DatasetError unless ``out`` names a file of the format about to be written and replaces no
    file without ``force``."""
    fmt = "text" if text else "CSV"
    name = out.lower()
    if not name.endswith(SUFFIXES[fmt]):
        other = "CSV" if text else "text"
        if name.endswith(SUFFIXES[other]):
            fix = ("name it .txt or drop --words-per-line" if text
                   else "add --words-per-line N to write a text corpus, or name it .csv")
            raise DatasetError(f"--out {out} names a {other} file, but this writes {fmt}; {fix}")
        raise DatasetError(f"--out {out}: name the file {' or '.join(SUFFIXES[fmt])} (it will hold {fmt}"
                           f"{'' if text else '; --words-per-line N writes a .txt corpus'})")
    if os.path.isdir(out):
        raise DatasetError(f"--out {out} is a directory; name a file")
    if os.path.lexists(out) and not force:
        raise DatasetError(f"--out {out} exists; choose another name, or add --force to replace it")


def check_room(dataset: Dataset, out: str) -> None:
    """A one-line DatasetError when a generated dataset plainly will not fit on the disk that holds ``out``,
    before any of it is written: the size is the first thousand records' size times the messages asked for."""
    if not isinstance(dataset, Generator) or out.lower().endswith(".gz"):
        return  # a file's copy is about the file's size; gzip's ratio is not known before it runs
    sample = 0
    for n, (_, keys) in enumerate(dataset.records(), 1):
        sample += sum(len(k.encode()) + 1 for k in keys)
        if n == 1000:
            break
    estimate = sample / n * dataset.message_count()
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(out))).free
    if estimate > free:
        raise DatasetError(f"--out {out}: {dataset.message_count():,} messages make about {estimate / 1e9:,.1f} "
                           f"GB, and its disk has {free / 1e9:,.1f} GB free; ask for fewer messages")


def generate(args: argparse.Namespace) -> int:
    refuse_state("--out", args.out)
    dataset = open_dataset(args.spec)
    # A file copied onto itself is a mistake, even with --force (its records would be read while replaced).
    if isinstance(dataset, FileDataset) and same_file(dataset.path, args.out):
        raise DatasetError(f"--out {args.out} is the dataset being read; choose another output file")
    check_out(args.out, args.words_per_line is not None, args.force)
    check_room(dataset, args.out)
    try:  # SIGTERM and SIGHUP, like Ctrl-C, remove the temporary file (only kill -9 leaves it, under a dot name)
        with stop_on_signals():
            spec, count = write_dataset(dataset, args.out, args.words_per_line)
    except Stopped as exc:
        print(f"keysplit: stopped by {exc}; {args.out} was not written", file=sys.stderr)
        return exc.status
    print(f"wrote {count:,} {'lines' if args.words_per_line else 'records'} to {args.out}; "
          f"read it back with --dataset {spec}")
    return 0


def stats(args: argparse.Namespace) -> int:
    dataset = open_dataset(args.spec)
    require_records(dataset)
    st = dataset.stats()
    if args.json:
        print_json(st)
    else:
        print(f"{st['spec']}\n  records   {st['records']:,}\n  messages  {st['messages']:,}\n"
              f"  keys      {st['keys']:,}\n  p1        {st['p1']:.4f}")
    return 0
