"""A figure of ``ldpem experiment``: panels of lines (mean and spread over seeds), written
as CSV and, with matplotlib (the ``plot`` extra), as PNG."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.errors import UserError

__all__ = ["FigureResult", "Panel", "Series", "check_plotting", "write_csv", "write_png"]

FloatArray = NDArray[np.float64]
#: Panels with at most this many lines show the min–max band over seeds.
_SHADED = 5


@dataclass(frozen=True)
class Series:
    """One line of a panel: y[seed, i] at x[i]."""

    label: str
    x: tuple[float, ...]
    runs: FloatArray
    style: str = "-"
    color: int = 0


@dataclass(frozen=True)
class Panel:
    title: str
    xlabel: str
    series: list[Series]
    logx: bool = False


@dataclass(frozen=True)
class FigureResult:
    name: str
    title: str
    panels: list[Panel]


def write_csv(figure: FigureResult, path: Path) -> None:
    """One row per point: figure, panel, series, x, mean, std, min, max, seeds."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["figure", "panel", "series", "x", "mean", "std", "min", "max", "seeds"])
        for panel in figure.panels:
            for series in panel.series:
                runs = series.runs
                for j, x in enumerate(series.x):
                    column = runs[:, j]
                    writer.writerow(
                        [
                            figure.name,
                            panel.title,
                            series.label,
                            f"{x:g}",
                            f"{column.mean():.6g}",
                            f"{column.std():.6g}",
                            f"{column.min():.6g}",
                            f"{column.max():.6g}",
                            runs.shape[0],
                        ]
                    )


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "the PNG figures need matplotlib: pip install 'ldpem[plot]' (or use --no-plot)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_png(figure: FigureResult, path: Path) -> None:
    """The figure's panels: mean over seeds on a log scale; in panels of at most
    ``_SHADED`` lines the band from the smallest to the largest error over seeds."""
    plt = _pyplot()
    colors = plt.get_cmap("tab10").colors
    count = len(figure.panels)
    columns = 2 if count == 4 else min(count, 3)
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.0 * columns, 4.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, figure.panels, strict=False):
        shaded = len(panel.series) <= _SHADED
        for series in panel.series:
            color = colors[series.color % len(colors)]
            mean = series.runs.mean(axis=0)
            ax.plot(series.x, mean, series.style, color=color, marker=".", label=series.label)
            if shaded:
                low, high = series.runs.min(axis=0), series.runs.max(axis=0)
                ax.fill_between(series.x, low, high, color=color, alpha=0.12)
        ax.set_yscale("log")
        if panel.logx:
            ax.set_xscale("log")
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel("‖β − β*‖₂")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if len(panel.series) > 6 else 1)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    fig.suptitle(figure.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_plotting() -> None:
    """UserError, naming the extra to install, when matplotlib is missing."""
    _pyplot()
