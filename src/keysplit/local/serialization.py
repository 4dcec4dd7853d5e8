"""Storm's inter-worker serialization (Kryo), emulated: the tuple values a worker cannot send to another worker.

On a Storm cluster a tuple bound for a task of another worker process is serialized by the sending executor
(Java paths below are in apache/storm ``storm-client/src/jvm/org/apache/storm/``:
``executor/ExecutorTransfer.java`` ``tryTransfer`` -> ``daemon/worker/WorkerTransfer.java`` ``tryTransferRemote``
-> ``serialization/KryoTupleSerializer.java``, ``KryoValuesSerializer.java``); a tuple for a task of the same
worker goes through the worker's in-memory queues and is not serialized, unless
``topology.testing.always.try.serialize`` is true (``ExecutorTransfer`` ``tryTransferLocal`` ->
``WorkerState.checkSerialize``).

Kryo writes each value with its class, and the Kryo that ``serialization/SerializationFactory.java`` builds
requires registration (``serialization/DefaultKryoFactory.java``: ``setRegistrationRequired(!conf[
topology.fall.back.on.java.serialization])``, false by default in ``conf/defaults.yaml`` since Storm 1.2.4,
2.1.1 and 2.2.1; true before). Kryo itself registers the primitives, their boxed types and ``String``;
``SerializationFactory`` adds ``ArrayList``, ``HashMap``, ``HashSet``, ``BigInteger`` and Storm's own classes,
then ``topology.kryo.register``. A registration is for one exact class, so what a multi-lang tuple holds is:

- JSON strings, integers (``Integer``/``Long``, ``BigInteger`` past 64 bits), ``true``/``false`` and ``null``:
  registered, they cross workers;
- a JSON array or object: the JSON library's own ``JSONArray``/``JSONObject`` (subclasses of ``ArrayList`` and
  ``HashMap``, from the ``multilang/JsonSerializer.java`` parser: json-smart since Storm 2.6.0, json-simple
  before; shaded under ``org.apache.storm.shade`` in the official binary), not registered: ``Class is not
  registered``, on every Storm release whenever the fall-back is off;
- a JSON number with a fraction or exponent: ``Double``, except that json-smart (Storm >= 2.6.0) reads one
  whose text is longer than 18 characters as ``java.math.BigDecimal`` (json-smart ``JSONParserBase.extractFloat``
  in ``MODE_PERMISSIVE``, which ``JSONValue.parseWithException`` uses), not registered either. Python writes
  floats as their shortest ``repr``, so e.g. ``0.1 + 0.2`` (``0.30000000000000004``) or ``-1/3`` is one. The
  runner follows Storm >= 2.6 here, as it does for integer hashing (:mod:`keysplit.javahash`).

The exception (``java.lang.IllegalArgumentException: Class is not registered: ...``) is thrown inside the
ShellBolt's ``handleEmit`` (or the ShellSpout's emit), whose ``die`` reports it and halts the worker
(``task/ShellBolt.java``, ``spout/ShellSpout.java``: ``System.exit(11)``). Targets earlier in the emit's
target list have their copy; the rest of the tuple and everything in the worker's memory is lost. The
component itself sees nothing but its process being killed with its worker; the run sees the error, the worker
restart, and the tuple trees through the dead worker timing out and being replayed by their spout, where the
replayed tuple kills the worker again if it is emitted the same way (a crash loop).

:class:`KryoCheck` applies these rules per emit; with ``topology.fall.back.on.java.serialization: true`` every
value is Java-serializable and nothing is checked. ``topology.kryo.register`` is not read: registering the
(shaded) JSON classes is not emulated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .context import TopologyError
from .task import TaskProcess

FALL_BACK = "topology.fall.back.on.java.serialization"
ALWAYS_TRY = "topology.testing.always.try.serialize"

#: the longest float text json-smart still reads as a Double (``xs.length() > 18`` -> BigDecimal)
MAX_DOUBLE_TEXT = 18


def unregistered_class(value: Any) -> str | None:
    """What Storm's Kryo calls ``value``'s class if it is not registered (None if it can be written)."""
    kind = type(value)
    if kind is list:
        return "(a JSON array)"
    if kind is dict:
        return "(a JSON object)"
    if kind is float and math.isfinite(value) and len(repr(value)) > MAX_DOUBLE_TEXT:
        return "java.math.BigDecimal"
    return None


def _flag(conf: dict[str, Any], key: str) -> bool:
    value = conf.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise TopologyError(f"{key} must be true or false, got {value!r}")
    return value


class KryoCheck:
    """The Kryo rules of one topology conf (the topology's own: Storm's executors drop a component's
    serialization settings, ``executor/Executor.java`` ``normalizedComponentConf``)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.enabled = not _flag(conf, FALL_BACK)
        self.local_too = _flag(conf, ALWAYS_TRY)

    def failure(self, task: TaskProcess, stream: str, fields: Sequence[str], values: list, targets: Sequence[int],
                tasks: dict[int, TaskProcess]) -> tuple[int, str] | None:
        """``(i, error)`` if sending ``values`` to ``targets[i]`` is the first transfer that Kryo would refuse
        (the error text in the style of Storm's), else None."""
        if not self.enabled:
            return None
        found = next(((f, v, k) for f, v in zip(fields, values) if (k := unregistered_class(v)) is not None), None)
        if found is None:
            return None
        field, value, klass = found
        for i, target_id in enumerate(targets):
            target = tasks[target_id]
            if target.worker != task.worker or self.local_too:
                where = (f"task {target_id} (worker {target.worker})" if target.worker != task.worker else
                         f"task {target_id} in the same worker ({ALWAYS_TRY} is true)")
                shown = json.dumps(value)
                shown = shown if len(shown) <= 120 else shown[:117] + "..."
                hint = ("emit scalars, or set topology.fall.back.on.java.serialization: true" if klass[0] == "(" else
                        f"json-smart reads a number of more than {MAX_DOUBLE_TEXT} characters as a BigDecimal: "
                        "round it or send it as a string")
                return i, (f"java.lang.IllegalArgumentException: Class is not registered: {klass} {shown}, field "
                           f"{field!r} of a tuple {task.name!r} (task {task.task_id}, worker {task.worker}) emitted "
                           f"on stream {stream!r} to {where}: Storm serializes it with Kryo ({hint})")
        return None
