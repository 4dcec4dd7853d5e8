"""Figures (PNG, or any format matplotlib writes) drawn with the non-interactive Agg backend (no display needed)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from keysplit.errors import KeysplitError, SpecError


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (imported on first use: it is slow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str, option: str = "--plot") -> None:
    """Refuse, before any long run, a plot path matplotlib would reject or silently change: an empty path,
    a directory, a missing extension (savefig would append .png), a format it cannot write, or a parent
    directory that does not exist. A path that passes is exactly where the figure is written."""
    from matplotlib import rcParams
    from matplotlib.backend_bases import FigureCanvasBase

    if not path.strip():
        raise SpecError(f"{option} is an empty path; name a file such as imbalance.png")
    if os.path.isdir(path):
        raise SpecError(f"{option} {path} is a directory; name a file in it, such as {os.path.join(path, 'plot.png')}")
    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if not ext:
        raise SpecError(f"{option} {path} has no extension (matplotlib would write {path}.png); add one of: "
                        + ", ".join(sorted(formats)))
    if ext not in formats:
        raise SpecError(f"{option} {path}: format .{ext} is not supported; use one of: {', '.join(sorted(formats))}")
    if ext == "pgf" and shutil.which(rcParams["pgf.texsystem"]) is None:  # pgf typesets with TeX when saving
        raise SpecError(f"{option} {path}: the pgf format needs {rcParams['pgf.texsystem']}, which is not installed")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise SpecError(f"{option} {path}: directory {parent} does not exist")


def refuse_foreign_plot(path: str, option: str = "--plot") -> None:
    """A one-line SpecError when ``path`` holds a file keysplit did not draw (:func:`written_by_keysplit`): a
    figure is drawn again in place, a user's file is never replaced. Called after a command's own input
    checks, whose message (the plot would overwrite the dataset) says more."""
    if os.path.lexists(path) and not written_by_keysplit(path):
        raise SpecError(f"{option} {path} exists and keysplit did not draw it; choose another name, or remove it "
                        "first")


#: The creator every figure keysplit draws carries in its metadata (PNG, SVG, PDF, PS, EPS): a plot path that
#: holds a file without it is the user's, and is never replaced.
CREATOR = "keysplit plot"
_MARKED = ("png", "svg", "pdf", "ps", "eps")


def written_by_keysplit(path: str) -> bool:
    """Whether ``path`` is a regular file of at most 64 MiB whose bytes hold :data:`CREATOR` (a figure keysplit
    drew; formats without metadata, JPEG for one, never are)."""
    try:
        if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > 64 << 20:
            return False
        with open(path, "rb") as fh:
            return CREATOR.encode() in fh.read()
    except OSError:
        return False


#: Ten colors and four line styles that change together: series i and j share both only when i = j mod 20, so
#: twelve groupings (kg and gedik, sg and salt had the same blue and orange on matplotlib's 10-color cycle) stay
#: apart by line style at least; markers add a third cue for lines with few points.
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
          "tab:olive", "tab:cyan")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")  # 12: the twelve groupings differ here too


def series_style(index: int) -> dict:
    """Color, line style and marker of the ``index``-th series of a figure; unique (color, style) for 20."""
    return {"color": COLORS[index % len(COLORS)], "linestyle": LINESTYLES[index % len(LINESTYLES)],
            "marker": MARKERS[index % len(MARKERS)]}


def legend_outside(ax, **kwargs) -> None:
    """The legend right of the axes, never over the data; ``save_figure``'s tight layout makes room for it."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, **kwargs)


#: One color per grouping in a figure of many runs: ten tab colors and four more, for the twelve groupings.
GROUPING_COLORS = (*COLORS, "black", "gold", "navy", "lime")


def imbalance_figure(runs: Sequence, title: str = ""):
    """The running average of I(t_j)/t_j up to t, for each run: the PKG paper's Fig. 5 view ("fraction of
    average imbalance through time"). Its last point is the run's ``avg_imbalance_fraction``. The y axis is
    logarithmic down to 1e-6 and linear below, so a perfectly balanced run (exactly 0) still shows. A grouping
    keeps one color (and marker) over every W, and a W one line style over every grouping, as ``advise --plot``
    does: W=10 and W=50 of one grouping read as one family."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    groupings = list(dict.fromkeys(run.grouping for run in runs))
    widths = list(dict.fromkeys(run.workers for run in runs))
    for run in runs:
        xs, ys, total = run.series_t, [], 0.0
        for j, (t, value) in enumerate(zip(xs, run.series_imbalance), start=1):
            total += value / t
            ys.append(total / j)
        g, w = groupings.index(run.grouping), widths.index(run.workers)
        ax.plot(xs, ys, label=f"{run.grouping} (W={run.workers})", markevery=max(1, len(xs) // 8), markersize=4,
                color=GROUPING_COLORS[g % len(GROUPING_COLORS)], linestyle=LINESTYLES[w % len(LINESTYLES)],
                marker=MARKERS[g % len(MARKERS)])
    ax.set_yscale("symlog", linthresh=1e-6)
    ax.set_xlabel("messages routed, t (count)")
    ax.set_ylabel("average imbalance fraction\n(max − mean load, per message)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    return fig


def imbalance_over_time(runs: Sequence, path: str, title: str = "") -> str:
    """:func:`imbalance_figure` written to ``path`` (``keysplit simulate --plot``)."""
    return save_figure(imbalance_figure(runs, title), path)


def save_figure(fig, path: str) -> str:
    """Lay out, write and close ``fig``; an unwritable path is a one-line KeysplitError. The figure is drawn
    under a temporary name (same extension: matplotlib picks the format by it) and renamed, so a failure
    leaves the old file or none, never a truncated one."""
    plt = pyplot()
    fig.tight_layout()
    folder, name = os.path.split(path)
    base, ext = os.path.splitext(name)
    tmp = os.path.join(folder, f".{base}.{os.getpid()}.tmp{ext}")
    marked = ext.lstrip(".").lower() in _MARKED
    try:
        fig.savefig(tmp, dpi=120, **({"metadata": {"Creator": CREATOR}} if marked else {}))
        os.replace(tmp, path)
    except OSError as exc:
        raise KeysplitError(f"cannot write plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
