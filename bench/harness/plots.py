"""Plots with matplotlib on the Agg backend, or skipped with one line where matplotlib
is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figure(**kwargs: Any) -> Any | None:
    """``plt.figure(**kwargs)`` on the Agg backend, or None (with a line saying so) when
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot skipped: matplotlib is not installed")
        return None
    return plt.figure(**kwargs)


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any] | None:
    """``plt.subplots(nrows, ncols, **kwargs)``'s figure and axes on the Agg backend, or
    None (with a line saying so) when matplotlib is missing."""
    fig = figure(**{k: kwargs.pop(k) for k in ("figsize", "dpi") if k in kwargs})
    if fig is None:
        return None
    return fig, fig.subplots(nrows, ncols, **kwargs)


def loglog(ax: Any, xlabel: str | None = None, ylabel: str | None = None,
           title: str | None = None, fontsize: float | None = None) -> None:
    """Log-log axes with a grid, the labels and title given, and a legend when any line
    has a label."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=fontsize)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def save(fig: Any, path: Path | str, title: str | None = None, dpi: int = 110) -> None:
    """Lay out, title, write ``path`` (its folder made) and close the figure."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    print(f"wrote {path}")
