"""Argument helpers shared by the subcommands: lists, positive numbers, JSON output, progress bars."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def int_list(text: str) -> list[int]:
    """``10`` or ``5,10,20`` -> [5, 10, 20]; every value at least 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be at least 1, got {text!r}")
    return values


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be positive, got 0")
    return value


def spec_list(text: str) -> list[str]:
    """Comma-separated grouping specs, where a spec's own parameters also use commas:
    ``pkg:d=4,load=global,kg`` -> ["pkg:d=4,load=global", "kg"] (an item with '=' continues a spec)."""
    specs: list[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" in item and ":" not in item and specs:
            specs[-1] += "," + item
        else:
            specs.append(item)
    if not specs:
        raise argparse.ArgumentTypeError("expected at least one grouping")
    return specs


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def progress_bar(total: int | None, desc: str, enabled: bool = True) -> Any:
    """A tqdm bar on stderr, shown only on a terminal; ``update(n)`` advances it."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="msg", unit_scale=True, leave=False, file=sys.stderr,
                disable=None if enabled else True)


def print_table(rows: list[dict], columns: list[tuple[str, str, Callable[[Any], str]]]) -> None:
    """A plain aligned table: columns are (header, field, formatter)."""
    cells = [[h for h, _, _ in columns]] + [[fmt(r[f]) for _, f, fmt in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
