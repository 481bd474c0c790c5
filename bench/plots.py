"""Matplotlib figures for the benchmark scripts (imported lazily: plotting is optional)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def new_figure() -> tuple[Any, Any]:
    """A headless 8x4.5 in figure and its axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 4.5))


def save_figure(fig: Any, ax: Any, path: Path) -> Path:
    """Add the legend, lay the figure out and write it to ``path`` (120 dpi)."""
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def racks_spanned(series: Sequence[tuple[str, Sequence[int]]], title: str, path: Path) -> Path:
    """One dot per gang: how many racks it spans, for each labelled run."""
    fig, ax = new_figure()
    for label, spans in series:
        ax.plot(range(len(spans)), spans, ".", label=label, alpha=0.6)
    ax.set_xlabel("gang, in the order placed")
    ax.set_ylabel("racks spanned")
    ax.set_title(title)
    return save_figure(fig, ax, path)


def cores_over_time(
    series: Sequence[tuple[str, Sequence[tuple[float, int]]]], title: str, path: Path
) -> Path:
    """A step line per labelled run: cores taken, from (time, cores) samples."""
    fig, ax = new_figure()
    for label, samples in series:
        ax.step([t for t, _ in samples], [c for _, c in samples], where="post", label=label)
    ax.set_xlabel("seconds")
    ax.set_ylabel("cores taken")
    ax.set_title(title)
    return save_figure(fig, ax, path)
