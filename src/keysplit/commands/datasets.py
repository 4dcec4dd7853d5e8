"""``keysplit datasets``: generate dataset files and print dataset statistics.

Write a generated dataset to a file, or print a dataset's statistics."""

from __future__ import annotations

import argparse

from keysplit.cli import command_summary
from keysplit.commands.common import positive_int, print_json
from keysplit.datasets import GENERATORS, READERS, FileDataset, open_dataset, require_records, write_dataset
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
                       epilog=dataset_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    dsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    g = dsub.add_parser("generate", help="write a generated dataset as a CSV file the readers read back",
                        epilog=dataset_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("spec", metavar="SPEC", help="generator spec, e.g. zipf:z=1.2,keys=1000,messages=100000")
    g.add_argument("--out", required=True, metavar="FILE", help="output file (.csv, or .csv.gz to gzip)")
    g.add_argument("--words-per-line", type=positive_int, metavar="N",
                   help="write a text corpus instead, N keys a line (one line = one spout tuple in the topology)")
    g.set_defaults(func=generate)
    s = dsub.add_parser("stats", help="messages, distinct keys and p1 of a dataset")
    s.add_argument("spec", metavar="SPEC", help="any dataset spec")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=stats)


def generate(args: argparse.Namespace) -> int:
    refuse_state("--out", args.out)
    dataset = open_dataset(args.spec)
    # Opening --out truncates it, and the records are streamed from the input while they are written.
    if isinstance(dataset, FileDataset) and same_file(dataset.path, args.out):
        raise DatasetError(f"--out {args.out} is the dataset being read; choose another output file")
    spec, count = write_dataset(dataset, args.out, args.words_per_line)
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
