"""Sizes checked against this machine's memory before anything is allocated: ``simulate``, ``advise`` and
``replay`` refuse a worker or source count whose per-worker state cannot fit (``-W 100000000`` used to grow to
4-10 GB, ``-W 99999999999`` to end in a MemoryError traceback), as ``run`` refuses a topology it cannot start;
and the simulator's key table checks each growth (keys x workers) before it allocates it.

The figures are estimates from measurements (``simulate --dataset zipf:messages=10000,keys=10 -W 1000000 -S 5``
under ``/usr/bin/time``): bytes of state per worker per source, whatever the data (the loads each source
estimates, the ring of virtual nodes, the partitioner's tables), rounded up about twofold.
"""

from __future__ import annotations

from keysplit.errors import KeysplitError

#: Bytes of state per worker and source of a grouping (measured: kg 16, pkg 24, dkg and wchoices 65, fish more
#: than 1,500, gedik more than 4,800), rounded up; a grouping not named here costs the default.
WORKER_SOURCE_BYTES = {"dkg": 128, "wchoices": 128, "dchoices": 128, "fish": 4096, "gedik": 16384}
DEFAULT_WORKER_SOURCE_BYTES = 64
#: Worker ids are 32-bit integers in the kernels and the replay's columns.
MAX_WORKERS = (1 << 31) - 1
#: The longest per-word CPU delay (``--cpu-delay``, ms): a minute a word; beyond it a run or a replay only waits.
MAX_CPU_DELAY_MS = 60_000.0


def available_bytes() -> int | None:
    """Memory available to a new allocation (``MemAvailable`` of /proc/meminfo), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gigabytes(n: float) -> str:
    return f"{n / (1 << 30):,.1f} GB" if n >= 1 << 30 else f"{n / (1 << 20):,.0f} MB"


def check_memory(need: float, what: str, fix: str) -> None:
    """A one-line KeysplitError when ``need`` bytes exceed the memory this machine has available."""
    available = available_bytes()
    if available is not None and need > available:
        raise KeysplitError(f"{what} needs about {gigabytes(need)} of memory, more than the {gigabytes(available)} "
                            f"this machine has available: {fix}")


def check_workers(workers: int | list[int], sources: int, groupings: list[str] | None = None) -> None:
    """Refuse worker and source counts whose per-worker state cannot fit in memory, before any is allocated."""
    from keysplit.specs import parse_spec

    for w in [workers] if isinstance(workers, int) else workers:
        if w > MAX_WORKERS:
            raise KeysplitError(f"-W {w:,} is more workers than keysplit can count (at most {MAX_WORKERS:,})")
        names = []
        for spec in groupings or ["kg"]:
            try:
                names.append(parse_spec(spec)[0])
            except KeysplitError:  # a bad spec is reported by the grouping's own check, with its valid choices
                names.append("")
        per = max(WORKER_SOURCE_BYTES.get(name, DEFAULT_WORKER_SOURCE_BYTES) for name in names)
        check_memory(float(w) * sources * per, f"-W {w:,} with -S {sources:,}", "lower -W or -S")
