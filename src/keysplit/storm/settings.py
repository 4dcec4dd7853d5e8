"""Settings of the word-count topology: what shapes it (parallelism, flush period) and what its components
read at run time (grouping, CPU delay, k, Redis, run id).

Two sources, one name each:

- the **topology configuration** key ``keysplit.<name>`` (``sparse submit -o keysplit.grouping=pkg:d=2``,
  or the ``conf`` the local runner passes), read by the components in ``initialize``;
- the **environment** variable ``KEYSPLIT_<NAME>`` (``KEYSPLIT_WORKERS=10 sparse submit ...``), read when the
  topology class is built; it supplies the defaults written into the topology's config.

Redis credentials never travel in the configuration (Storm prints the topology configuration in nimbus.log and
worker.log and shows it in its UI): ``keysplit.redis_url`` carries no password, and the components read it from
the file ``keysplit.redis_password_file`` or the environment variable ``keysplit.redis_password_env`` names on
the worker hosts (:meth:`RunSettings.redis_connect_url`).

Parallelism (``spouts``, ``sources``, ``workers``'s counter tasks, ``aggregators``) and ``flush_secs`` (the
tick frequency) are fixed when the topology is built, so they come from the environment only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from keysplit.errors import KeysplitError
from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS
from keysplit.storm.exactly_once import DELIVERIES
from keysplit.storm.window import WindowPolicy, latency_target, window_start
from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS, SPLITS

PREFIX = "keysplit."
#: Storm's settings of the costs between components (executor batching and flushing, ackers) that the components
#: record as they received them, so that a cluster run's summary carries them to `keysplit calibrate`
#: (``keysplit.topology_model.storm_terms``); the flush interval under its Storm 2.8 and its Storm 2.0 names.
STORM_COST_SETTINGS = ("topology.producer.batch.size", "topology.transfer.batch.size",
                       "topology.batch.flush.interval.millis", "topology.flush.tuple.freq.millis",
                       "topology.acker.executors")
ENV_PREFIX = "KEYSPLIT_"
#: The environment variable ``keysplit run`` gives its components the managed Redis password in.
PASSWORD_ENV = "KEYSPLIT_REDIS_PASSWORD"


@dataclass(frozen=True)
class RunSettings:
    """Everything a run is parameterised by, the word count's or a toolkit topology's (its Redis, run id, delivery,
    window and batches; the word count's own knobs beside them). Defaults follow the PKG paper's §6 setup where it
    gives one: 5 sources, 10 workers, CPU delay 0.1-1 ms, top-k with k=10, aggregation period T."""

    run_id: str = "default"
    redis_url: str = ""  # without a password (check() rejects one)
    redis_password_file: str = ""  # a file on every worker host holding the Redis password
    redis_password_env: str = ""  # or the environment variable of the workers that holds it
    split: str = "shuffle"  # how lines are dealt to the routers, as the simulator deals records: shuffle or key
    route: str = "fields"  # how the router reaches the chosen counter task: fields or direct (storm/router.py)
    grouping: str = "pkg"
    spouts: int = 1
    sources: int = 5
    workers: int = 10  # W: counter tasks the grouping chooses among (<= counter_tasks)
    counter_tasks: int = 0  # counter parallelism; 0 means W
    aggregators: int = 2
    cpu_delay_ms: float = DEFAULT_CPU_DELAY_MS
    flush_secs: float = 1.0  # the paper's aggregation period T, delivered by tick tuples
    top_k: int = 10
    stats_secs: float = 1.0  # how often components write their metrics to Redis
    rate: float = 0.0  # open loop: the spouts emit at most this many words (messages) per second; 0: closed loop
    delivery: str = "exactly-once"  # or at-least-once (Storm's plain acking): storm/exactly_once.py
    window: int = 0  # exactly-once: lines a spout may emit above the lowest incomplete one; 0: 4 x max pending x spouts
    # the spouts' adaptive window against timeout meltdown (storm/window.py): lines added per window of acks, the
    # factor a timeout cuts it by (1: never, Storm's fixed max pending), the fewest lines it keeps in flight
    aimd_increase: float = 1.0
    aimd_decrease: float = 0.5
    aimd_min: int = 1
    batch: int = DEFAULT_BATCH  # words a router sends a counter in one tuple at most (1: one per word; storm/router.py)
    batch_ms: float = DEFAULT_BATCH_MS  # ... or once the first waited this long, whichever comes first (batch > 1)

    def __post_init__(self) -> None:
        if self.counter_tasks == 0:
            object.__setattr__(self, "counter_tasks", self.workers)
        self.check()

    def check(self) -> None:
        """One-line KeysplitErrors for impossible combinations."""
        for name in ("spouts", "sources", "workers", "counter_tasks", "aggregators", "top_k"):
            if getattr(self, name) < 1:
                raise KeysplitError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.workers > self.counter_tasks:
            raise KeysplitError(f"W={self.workers} workers is more than the {self.counter_tasks} counter tasks; "
                                f"the grouping can only choose among existing tasks (use W <= counter tasks)")
        if self.cpu_delay_ms < 0:
            raise KeysplitError(f"cpu delay must not be negative, got {self.cpu_delay_ms}")
        if self.rate < 0:
            raise KeysplitError(f"rate must not be negative, got {self.rate}")
        if self.flush_secs <= 0 or self.stats_secs <= 0:
            raise KeysplitError("flush and stats periods must be positive")
        if self.delivery not in DELIVERIES:
            raise KeysplitError(f"keysplit.delivery must be one of {', '.join(DELIVERIES)}, got {self.delivery!r}")
        if self.batch < 1:
            raise KeysplitError(f"keysplit.batch must be at least 1 (1: one tuple per word), got {self.batch}")
        if not self.batch_ms > 0:
            raise KeysplitError(f"keysplit.batch_ms must be positive, got {self.batch_ms}")
        if self.window < 0:
            raise KeysplitError(f"keysplit.window must not be negative, got {self.window}")
        if not self.aimd_increase > 0:
            raise KeysplitError(f"keysplit.aimd_increase must be positive, got {self.aimd_increase}")
        if not 0 < self.aimd_decrease <= 1:
            raise KeysplitError(f"keysplit.aimd_decrease must be in (0, 1] (1: never cut), got {self.aimd_decrease}")
        if self.aimd_min < 1:
            raise KeysplitError(f"keysplit.aimd_min must be at least 1, got {self.aimd_min}")
        if self.split not in SPLITS:
            raise KeysplitError(f"keysplit.split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.route not in ("fields", "direct"):
            raise KeysplitError(f"keysplit.route must be fields or direct, got {self.route!r}")
        try:
            has_password = urlsplit(self.redis_url).password is not None
        except ValueError:
            has_password = False  # a malformed URL fails where the components connect, with its own message
        if has_password:
            raise KeysplitError("keysplit.redis_url must not carry a password: the topology configuration is printed "
                                "in Storm's logs and UI; name a file or environment variable on the workers with "
                                "keysplit.redis_password_file or keysplit.redis_password_env")

    def redis_connect_url(self, environ: Mapping[str, str] | None = None) -> str:
        """``redis_url`` with the password read from ``redis_password_file`` / ``redis_password_env``."""
        password = None
        if self.redis_password_file:
            try:
                with open(self.redis_password_file, encoding="utf-8") as fh:
                    password = fh.read().strip()
            except OSError as exc:
                raise KeysplitError(f"cannot read keysplit.redis_password_file {self.redis_password_file}: "
                                    f"{exc.strerror or exc}") from None
        elif self.redis_password_env:
            environ = os.environ if environ is None else environ
            if self.redis_password_env not in environ:
                raise KeysplitError(f"keysplit.redis_password_env names {self.redis_password_env}, which is not "
                                    "set in this worker's environment")
            password = environ[self.redis_password_env]
        return with_password(self.redis_url, password) if password else self.redis_url

    def conf(self) -> dict[str, Any]:
        """The settings as topology configuration entries ``keysplit.<name>``."""
        return {PREFIX + k: v for k, v in asdict(self).items()}

    @property
    def exactly_once(self) -> bool:
        """Whether the totals are committed exactly once (storm/exactly_once.py)."""
        return self.delivery == "exactly-once"

    def window_lines(self, max_pending: int | None) -> int:
        """The spouts' exactly-once window: ``window``, else 4 x max spout pending x spouts (20,000 lines a spout
        when max pending is unlimited)."""
        return self.window or 4 * (max_pending or 5000) * self.spouts

    @property
    def window_policy(self) -> WindowPolicy:
        """The spouts' AIMD rule (storm/window.py)."""
        return WindowPolicy(self.aimd_increase, self.aimd_decrease, self.aimd_min)

    @property
    def latency_target(self) -> float:
        """The latency up to which the spouts' window grows past its start (storm/window.py)."""
        return latency_target(self.flush_secs, self.batch, self.batch_ms)

    def window_start(self, words_per_line: float) -> int:
        """The lines each spout's window starts at, for a feed of ``words_per_line`` words a line on average
        (storm/window.py)."""
        return window_start(self.workers, self.cpu_delay_ms, self.latency_target, words_per_line, self.spouts)

    @property
    def tick_secs(self) -> int:
        """Storm's ``topology.tick.tuple.freq.secs`` is a whole number of seconds (at least 1)."""
        return max(1, round(self.flush_secs))

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], base: RunSettings | None = None) -> RunSettings:
        """Settings from a topology configuration; missing keys keep ``base``'s (or the defaults)."""
        values = asdict(base) if base is not None else {}
        for f in fields(cls):
            if PREFIX + f.name in conf:
                values[f.name] = _coerce(f.name, conf[PREFIX + f.name], f.type)
        return cls(**values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunSettings:
        """Settings from ``KEYSPLIT_<NAME>`` environment variables (defaults for the rest)."""
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            key = ENV_PREFIX + f.name.upper()
            if key in environ:
                values[f.name] = _coerce(f.name, environ[key], f.type)
        return cls(**values)


def split_password(url: str) -> tuple[str, str | None]:
    """``(url without its password, the password or None)``.

    >>> split_password("redis://:s3cret@host:6379/0")
    ('redis://host:6379/0', 's3cret')
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url, None
    host = parts.netloc.rsplit("@", 1)[1]
    netloc = f"{parts.username}@{host}" if parts.username else host
    url = urlunsplit(parts._replace(netloc=netloc))  # "unix:/path" when no netloc is left: keep its "//"
    return url if url.startswith(f"{parts.scheme}://") else url.replace(":", "://", 1), unquote(parts.password)


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` put back (the inverse of :func:`split_password`)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


def _coerce(name: str, value: Any, kind: Any) -> Any:
    kind = {"int": int, "float": float, "str": str}.get(kind if isinstance(kind, str) else kind.__name__, str)
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise KeysplitError(f"setting {name}={value!r} is not a valid {kind.__name__}") from None
