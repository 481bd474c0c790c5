"""Matplotlib figures for the benchmark scripts (imported lazily: plotting is optional)."""

from __future__ import annotations

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
