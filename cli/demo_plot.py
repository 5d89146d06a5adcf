"""The convergence figure of ``ldpem demo`` (``convergence.png``): the federated run's
error per round against the in-process baselines' and β = 0's, with matplotlib's object
API (the `plot` extra; without it, no figure)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ldpem.common.mechanisms import get_mechanism

__all__ = ["plot_convergence", "prewarm_plotting"]


def _import_plotting() -> None:
    with contextlib.suppress(ImportError):
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401


def prewarm_plotting() -> None:
    """Import matplotlib in a background thread: it takes seconds, and the demo spends them
    waiting for its processes; ``plot_convergence`` then finds the modules loaded."""
    threading.Thread(target=_import_plotting, name="import-matplotlib", daemon=True).start()


def plot_convergence(
    result: dict[str, Any], path: Path, baselines: Sequence[tuple[str, str]]
) -> str | None:
    """Convergence plot of the demo's ``result`` with each of its ``baselines`` (mechanism
    name, label), drawn at ``path`` (needs matplotlib, the `plot` extra); returns its path
    or None."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    # The object API, not pyplot: no global state, no GUI backend, cheaper to import.
    figure = Figure(figsize=(6, 4))
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    rounds = range(1, len(result["errors"]) + 1)
    kind = get_mechanism(result["mechanism"]).label
    axes.plot(
        rounds, result["errors"], marker="o", label=f"federated, {kind} (ε={result['epsilon']})"
    )
    for name, label in baselines:
        errors = result["baseline_errors"][name]
        axes.plot(rounds, errors, marker=".", linestyle="--", label=label)
    axes.axhline(result["trivial_error"], color="grey", linewidth=0.8, label="β = 0")
    axes.set_yscale("log")
    axes.set_xlabel("round")
    axes.set_ylabel("‖β − β*‖")
    axes.set_title(f"ldpem demo: {result['model']}, n={result['n']}, d={result['d']}")
    axes.legend(fontsize=8)
    # Fixed margins: tight_layout would draw the figure once more to measure it (~0.5 s).
    figure.subplots_adjust(left=0.13, right=0.97, top=0.92, bottom=0.12)
    figure.savefig(path, dpi=120)
    return str(path)
