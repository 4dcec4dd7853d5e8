"""What the parts of :class:`~keysplit.local.cluster.LocalCluster` share, in one explicit object.

The cluster's event loop, the supervisor, the executor, the output collector and the pacing timers all act on
the same tasks in one thread. Rather than each part reaching into the others' attributes, the cluster builds one
:class:`ClusterState` and hands it to each part: the topology (conf, components, tasks), the acker, the selector
the loop waits on, the set of tasks with something to write, the tuple-id counter, the errors the components
reported, and the one fatal error the loop raises at the end of its turn. Everything else is owned by one part:
the supervisor's workers and restarts, the pacing's timers, the executor's protocol handling.
"""

from __future__ import annotations

import itertools
import selectors
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .acker import Acker
from .context import ComponentInfo, TopologyError
from .task import TaskProcess


@dataclass(slots=True, eq=False)
class ClusterState:
    """The local cluster's shared state (see the module's docstring). Every field is one object for the cluster's
    lifetime, so a part may keep a reference to it (``dirty`` is emptied in place, never replaced)."""

    conf: dict[str, Any]
    components: dict[str, ComponentInfo]
    tasks: dict[int, TaskProcess]
    acker: Acker
    #: whether tuple trees are tracked (``topology.acker.executors`` is not 0)
    acking: bool
    n_workers: int
    log_dir: Path | None
    spouts: list[TaskProcess] = field(init=False)
    bolts: list[TaskProcess] = field(init=False)
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    #: tasks with something to write: the loop flushes them at the end of its turn
    dirty: set[TaskProcess] = field(default_factory=set)
    #: ids of the tuples given to bolts (inputs, ticks, heartbeats), as ``str(next(ids))``
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    #: ``(component, task id, text)`` of every ``error`` command and every fatal ShellBolt error
    errors: list[tuple[str, int, str]] = field(default_factory=list)
    #: a Storm runtime error (or a crash loop) that ends the run: the loop raises it at the end of its turn
    fatal: TopologyError | None = None
    #: monotonic time at which every task had started (0 while the topology starts)
    started_at: float = 0.0

    def __post_init__(self) -> None:
        self.spouts = [t for t in self.tasks.values() if t.is_spout]
        self.bolts = [t for t in self.tasks.values() if not t.is_spout]
