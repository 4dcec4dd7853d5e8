"""Argument helpers shared by the subcommands: lists, positive numbers, output directories, JSON output,
progress bars."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from keysplit.errors import KeysplitError, SpecError

log = logging.getLogger("keysplit")


def comma_list(text: str) -> list[str]:
    """``a,b`` -> ["a", "b"]; an empty item (``a,``, ``a,,b``, ``""``) is refused, not skipped: it is
    usually a value that went missing."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected at least one value, got ''")
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"empty item in {text!r}")
    return items


def int_list(text: str) -> list[int]:
    """``10`` or ``5,10,20`` -> [5, 10, 20]; every value at least 1."""
    try:
        values = [int(v) for v in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if any(v < 1 for v in values):
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


def finite_float(text: str) -> float:
    """A number; ``nan`` and ``inf``, which float() accepts, are refused: every comparison with nan is false,
    so it would slip past the range checks after it."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def cpu_delay(text: str) -> float:
    """A ``--cpu-delay`` in ms: not negative, at most :data:`keysplit.sizes.MAX_CPU_DELAY_MS`."""
    from keysplit.sizes import MAX_CPU_DELAY_MS

    value = non_negative_float(text)
    if value > MAX_CPU_DELAY_MS:
        raise argparse.ArgumentTypeError(f"at most {MAX_CPU_DELAY_MS:,.0f} ms (a minute a word), got {text}")
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
    for item in comma_list(text):
        if "=" in item and ":" not in item and specs:
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def ensure_output_dir(path: str, option: str = "--out") -> str:
    """Create the output directory ``path`` (and its parents) if needed, before any work that writes to it;
    a one-line KeysplitError when it cannot be (an existing file, a read-only place, an empty path)."""
    if not path.strip():
        raise SpecError(f"{option} is an empty path; name a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise KeysplitError(f"cannot create output directory {path}: {exc.strerror or exc}") from None
    return path


def print_json(obj: Any) -> None:
    """``obj`` on stdout as strict JSON: a one-line KeysplitError, not ``NaN``/``Infinity``, for a non-finite value."""
    from keysplit.outputs import json_text

    sys.stdout.write(json_text(obj, "the --json output") + "\n")


class ExamplesHelpFormatter(argparse.HelpFormatter):
    """A description wrapped to the terminal as usual, and an epilog of examples (``examples:`` then one command
    a line, pasted as they are) kept line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


#: Seconds of work before a progress bar appears (tqdm's ``delay``): shorter commands never import tqdm.
PROGRESS_DELAY = 1.0


class Progress:
    """A progress bar on stderr, shown only on a terminal and only once the work has lasted
    :data:`PROGRESS_DELAY`; tqdm is imported then, so a command that ends sooner does not pay its ~20 ms import.
    ``update(n)`` advances it; ``n`` is the count so far."""

    def __init__(self, total: int | None, desc: str, unit: str = "msg", enabled: bool = True) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self._bar: Any = None
        self._shown = enabled and sys.stderr.isatty()
        self._started = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._shown and time.monotonic() - self._started >= PROGRESS_DELAY:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, unit_scale=True, leave=False,
                             file=sys.stderr, initial=self.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: int | None, desc: str, enabled: bool = True, unit: str = "msg") -> Progress:
    """A :class:`Progress` of ``total`` units (None: unknown) labelled ``desc``."""
    return Progress(total, desc, unit, enabled)


def print_table(rows: list[dict], columns: list[tuple[str, str, Callable[[Any], str]]]) -> None:
    """A plain aligned table: columns are (header, field, formatter)."""
    cells = [[h for h, _, _ in columns]] + [[fmt(r[f]) for _, f, fmt in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C (a BaseException, so no ``except Exception`` keeps it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def status(self) -> int:
        """The shell's status for a process ended by the signal: 128 + its number (143, 129)."""
        return 128 + self.signum


class Signals:
    """What :func:`stop_on_signals` caught: the exception its first signal raised, if one came."""

    received: BaseException | None = None

    def reason(self, exc: BaseException) -> BaseException | None:
        """The signal an exception stands for: itself when it is one, or the signal received before it (py4j turns
        a KeyboardInterrupt raised in the middle of a call into an error of its own); None for a plain error."""
        if isinstance(exc, (Stopped, KeyboardInterrupt)):
            return exc
        return self.received if isinstance(exc, Exception) else None


@contextlib.contextmanager
def stop_on_signals() -> Iterator[Signals]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Stopped` (and SIGINT KeyboardInterrupt, as usual), so
    ``with`` blocks and ``finally`` clauses clean up: child processes stopped, the Redis lease released. The
    first signal wins: later ones are ignored until the block is left, so they cannot break the clean-up
    half-way (``kill -9`` still works). The block gets a :class:`Signals` that remembers the signal."""
    watched = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    caught = Signals()

    def handler(signum: int, _frame: object) -> None:
        for sig in watched:
            signal.signal(sig, signal.SIG_IGN)
        caught.received = KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)
        raise caught.received

    old = {sig: signal.signal(sig, handler) for sig in watched}
    try:
        yield caught
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


#: The environment variable that may hold the password of the Redis ``--redis`` names.
REDIS_PASSWORD_ENV = "KEYSPLIT_REDIS_PASSWORD"


def add_redis_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--redis URL`` and ``--redis-password-file FILE``: the password never has to be on a command line,
    where every local user sees it in ``ps``."""
    p.add_argument("--redis", metavar="URL", help=f"{what}; give the password with --redis-password-file or "
                   f"${REDIS_PASSWORD_ENV}, not in the URL")
    p.add_argument("--redis-password-file", metavar="FILE",
                   help="a file holding the password of the Redis --redis names (its first line)")


def redis_url(args: argparse.Namespace) -> str | None:
    """``--redis`` with its password from ``--redis-password-file`` or ``$KEYSPLIT_REDIS_PASSWORD`` put in
    (None: the project-managed server). One-line errors for an unreadable file or two passwords."""
    from keysplit.storm.settings import split_password, with_password

    url, file = args.redis, args.redis_password_file
    if url is None:
        if file:
            raise KeysplitError("--redis-password-file needs --redis URL (the managed server has its own password)")
        return None
    given = split_password(url)[1]
    if given is not None:
        log.warning("the --redis URL carries its password, which every local user can read in `ps`: give it with "
                    "--redis-password-file FILE or $%s instead", REDIS_PASSWORD_ENV)
    if file:
        if given is not None:
            raise KeysplitError("the --redis URL carries a password and --redis-password-file gives another: "
                                "give it once, in the file")
        try:
            with open(file, encoding="utf-8") as fh:
                if os.fstat(fh.fileno()).st_mode & 0o044:
                    log.warning("--redis-password-file %s is readable by other users: chmod 600 %s", file, file)
                password = fh.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise KeysplitError(f"cannot read --redis-password-file {file}: {getattr(exc, 'strerror', exc)}") from None
        if not password:
            raise KeysplitError(f"--redis-password-file {file} is empty: its first line is the password")
        return with_password(url, password)
    env = os.environ.get(REDIS_PASSWORD_ENV)
    if given is None and env:
        return with_password(url, env)
    return url


def check_results_writable(path: str) -> None:
    """The folder of ``--results-out`` (``--counts-out``) must exist and be writable (the file is written at the end,
    atomically; nothing is created now, so a run that fails leaves no empty file)."""
    from keysplit.outputs import refuse_state

    if not path.strip():
        raise KeysplitError("--results-out is an empty path; name a file")
    refuse_state("--results-out", path)
    if os.path.isdir(path):
        raise KeysplitError(f"cannot write --results-out {path}: it is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise KeysplitError(f"cannot write --results-out {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise KeysplitError(f"cannot write --results-out {path}: permission denied")


def check_results_out(path: str, dataset: Any) -> None:
    """:func:`check_results_writable`, and never over the dataset the run reads."""
    from keysplit.datasets.readers import FileDataset
    from keysplit.outputs import refuse_inputs

    check_results_writable(path)
    if isinstance(dataset, FileDataset):
        refuse_inputs("--results-out", path, [dataset.path])
