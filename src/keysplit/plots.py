"""PNG figures drawn with matplotlib's non-interactive Agg backend (no display needed)."""

from __future__ import annotations

from collections.abc import Sequence

from keysplit.errors import KeysplitError


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (imported on first use: it is slow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def imbalance_over_time(runs: Sequence, path: str, title: str = "") -> None:
    """The running average of I(t_j)/t_j up to t, for each run: the PKG paper's Fig. 5 view ("fraction of
    average imbalance through time"). Its last point is the run's ``avg_imbalance_fraction``. The y axis is
    logarithmic down to 1e-6 and linear below, so a perfectly balanced run (exactly 0) still shows."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in runs:
        xs, ys, total = run.series_t, [], 0.0
        for j, (t, value) in enumerate(zip(xs, run.series_imbalance), start=1):
            total += value / t
            ys.append(total / j)
        ax.plot(xs, ys, label=f"{run.grouping} (W={run.workers})")
    ax.set_yscale("symlog", linthresh=1e-6)
    ax.set_xlabel("messages t")
    ax.set_ylabel("average imbalance fraction")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def save_figure(fig, path: str) -> str:
    """Lay out, write and close ``fig``; an unwritable path is a one-line KeysplitError."""
    plt = pyplot()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise KeysplitError(f"cannot write plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
