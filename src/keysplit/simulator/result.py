"""What one simulated run measured (``keysplit simulate --json`` prints its :meth:`RunResult.summary`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RunResult:
    grouping: str
    workers: int
    sources: int
    avg_imbalance_fraction: float
    final_imbalance_fraction: float
    load_stddev: float
    dist_cost: float
    loads: list[int]
    messages_per_second: float
    messages: int = 0
    keys: int = 0  #: distinct keys routed
    top_key_messages: int = 0  #: messages of the most frequent key (p1 = top_key_messages / messages)
    distinct_per_worker: list[int] = field(default_factory=list)
    series_t: list[int] = field(default_factory=list, repr=False)
    series_imbalance: list[float] = field(default_factory=list, repr=False)
    #: what the grouping reports about itself via an optional ``stats()`` (e.g. gedik's rebuilds, migration)
    grouping_stats: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """The fields of ``keysplit simulate --json`` (scripts depend on these names)."""
        keep = ("grouping", "workers", "sources", "avg_imbalance_fraction", "final_imbalance_fraction",
                "load_stddev", "dist_cost", "loads", "messages_per_second")
        full = asdict(self)
        out = {k: full[k] for k in keep}
        if self.grouping_stats:
            out["grouping_stats"] = dict(self.grouping_stats)
        return out
