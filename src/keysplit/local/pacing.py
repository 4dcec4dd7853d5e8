"""The timers of :class:`~keysplit.local.cluster.LocalCluster`: heartbeats, tick tuples, message timeouts and the
spout ``next`` calls.

- Heartbeats: a ``__heartbeat`` tuple to every bolt each ``keysplit.local.heartbeat.secs`` (Storm's ShellBolt
  sends one a second); a task silent for ``topology.subprocess.timeout.secs`` is killed, as ShellBolt's and
  ShellSpout's heartbeat timer tasks kill theirs (apache/storm ``task/ShellBolt.java``, ``spout/ShellSpout.java``).
- Ticks: ``__system``/``__tick`` tuples every ``topology.tick.tuple.freq.secs`` of a bolt; they stay pending
  until acked like any input. Every bolt's come at the wall clock's multiples of its period, the instants at which
  the word count's counters flush by their own timers (storm/flush_clock.py). Storm starts each executor's ticks
  one period after the executor started (``Executor.setupTicks``), at no particular phase; no bolt can tell the
  two apart, and on the local runner a ``--batch 1`` aggregator's tick then commits at the counters' flush, as
  the topology model assumes.
- Message timeouts: the acker's expired trees are failed back to their spouts.
- Spout ``next``: pipelined ``next`` commands within ``topology.max.spout.pending`` at the spout's measured emits
  per call, none while some bolt's queue is over ``keysplit.local.queue.high`` (back-pressure), and Storm's
  spout wait strategy (``topology.sleep.spout.wait.strategy.time.ms``) after a call that emitted nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time

from .collector import OutputCollector
from .context import component_conf
from .protocol import NEXT, encode_tuple
from .state import ClusterState
from .task import TaskProcess

log = logging.getLogger("keysplit.local")


class Pacing:
    """When each bolt gets its heartbeats and ticks, and each spout its ``next`` calls."""

    def __init__(self, state: ClusterState, collector: OutputCollector) -> None:
        self.state = state
        self.collector = collector
        conf = state.conf
        self.next_heartbeat = 0.0
        self.ticks: list[tuple[list[TaskProcess], float, list[float]]] = []
        self.quiet = False  # quiesce(): no more ticks or spout "next"
        max_pending = {}
        for comp in state.components.values():
            value = component_conf(conf, comp).get("topology.max.spout.pending")
            max_pending[comp.name] = int(value) if value else None
        self.max_pending = max_pending
        self.next_batch = max(1, int(conf["keysplit.local.spout.next.batch"]))
        self.spout_wait = float(conf["topology.sleep.spout.wait.strategy.time.ms"]) / 1000

    def heartbeat_secs(self) -> float:
        return float(self.state.conf.get("keysplit.local.heartbeat.secs") or 0)

    def start(self, now: float) -> None:
        """The topology has started at ``now`` (the monotonic clock): the first heartbeat is due a period from now,
        each bolt's first tick at the wall clock's next multiple of its period (the module's docstring)."""
        state = self.state
        self.next_heartbeat = now + self.heartbeat_secs()
        wall = time.time()
        for comp in state.components.values():
            freq = component_conf(state.conf, comp).get("topology.tick.tuple.freq.secs")
            if freq and not comp.is_spout:
                tasks = [state.tasks[t] for t in comp.task_ids]
                self.ticks.append((tasks, float(freq), [now + float(freq) - wall % float(freq)]))

    def timers(self, now: float, wake: float) -> float:
        """Heartbeats, ticks, message timeouts and spout ``next``; returns the next wake time."""
        state = self.state
        hb = self.heartbeat_secs()
        if hb > 0:
            if now >= self.next_heartbeat:
                self.next_heartbeat = now + hb
                self.heartbeats(now)
            wake = min(wake, self.next_heartbeat)
        for tasks, freq, next_tick in self.ticks:
            if self.quiet:
                break
            if now >= next_tick[0]:
                next_tick[0] = max(next_tick[0] + freq, now)
                values = json.dumps([int(freq) if float(freq).is_integer() else freq])
                for task in tasks:
                    if task.alive:
                        tid = str(next(state.ids))
                        task.inputs.add(tid)  # ShellBolt.execute keeps ticks in _inputs like any tuple
                        task.queue.append(encode_tuple(tid, '","comp":"__system","stream":'
                                                       '"__tick","task":-1,"tuple":', values))
                        task.executed += 1
                        state.dirty.add(task)
            wake = min(wake, next_tick[0])
        for rec in state.acker.expire(now):  # the spout executor's pending map rotated them out (acker.py)
            rec.spout.timed_out += 1
            self.collector.to_spout(rec.spout, "fail", rec.msg_id)
        deadline = state.acker.next_deadline()
        if deadline is not None:
            wake = min(wake, deadline)
        return self.spout_nexts(now, wake)

    def spout_nexts(self, now: float, wake: float) -> float:
        """Queue ``next`` commands for the spouts that may emit; returns the next wake time."""
        state = self.state
        throttled = False
        high = state.conf["keysplit.local.queue.high"]
        for task in state.bolts:
            if len(task.queue) > high:
                throttled = True
                break
        batch = self.next_batch
        for task in state.spouts:
            if task.ready and task.next_out <= batch // 2 and not throttled and not self.quiet:
                if now < task.next_at:
                    wake = min(wake, task.next_at)
                    continue
                if task.idle and task.next_out:
                    continue  # an idle (or new) spout gets one call at a time
                want = 1 if task.idle else batch - task.next_out
                limit = self.max_pending[task.name] if state.acking else None
                if limit is not None:
                    # pipelined calls only for free slots (at the spout's measured emits per call), so the bound
                    # holds; with nothing outstanding, call whenever pending < limit, exactly as Storm does
                    per_next = max(1.0, task.per_next)
                    free = limit - task.pending - task.next_out * per_next
                    want = min(want, int(free // per_next))
                    if task.next_out == 0 and task.pending < limit:
                        want = max(want, 1)
                if want <= 0:
                    continue
                task.urgent.extend([NEXT] * want)
                task.sent_kinds.extend([True] * want)
                task.next_out += want
                task.nexts_sent += want
                state.dirty.add(task)
        return wake

    def heartbeats(self, now: float) -> None:
        """Heartbeat tuples to bolts; kill a task silent for ``topology.subprocess.timeout.secs``.

        A bolt is silent when it answers nothing, not even heartbeats; a spout when it leaves a command
        unanswered (Storm's ShellSpout watches its ``sync`` replies the same way).
        """
        state = self.state
        for task in state.tasks.values():
            if not task.ready or not task.alive:
                continue
            limit = float(task.conf.get("topology.subprocess.timeout.secs") or 0)
            silent = now - task.last_sync
            if limit and silent > limit and (not task.is_spout or task.sent_kinds):
                log.error("task %s[%d] was silent for %.0f s (topology.subprocess.timeout.secs); killing it",
                          task.name, task.index, silent)
                with contextlib.suppress(OSError):
                    os.kill(task.proc.pid if task.proc else task.pid, signal.SIGKILL)  # type: ignore[arg-type]
                continue
            if task.is_spout:
                continue
            task.urgent.append(encode_tuple(str(next(state.ids)), '","comp":"__system","stream":"__heartbeat",'
                                            '"task":-1,"tuple":', "[]"))
            state.dirty.add(task)

    def spout_synced(self, task: TaskProcess) -> None:
        """A spout answered a command with ``sync``; after its last outstanding ``next``, measure the emits per
        call, and an idle spout waits (Storm's spout wait strategy) before it is called again."""
        if task.is_spout and task.sent_kinds and task.sent_kinds.popleft():
            if task.up_since is None:  # its first ``next`` answered: initialize() has returned, nextTuple ran
                task.up_since = time.monotonic()
            task.next_out -= 1
            if task.next_out == 0:
                task.idle = task.emits_since_next == 0
                task.per_next = task.emits_since_next / max(1, task.nexts_sent)
                task.emits_since_next = 0
                task.nexts_sent = 0
                if task.idle:  # nothing to emit: Storm's spout wait strategy sleeps before calling again
                    task.next_at = time.monotonic() + self.spout_wait
