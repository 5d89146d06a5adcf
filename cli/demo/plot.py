"""The convergence figure of ``ldpem demo`` (``convergence.svg``): the federated run's
error per round against the in-process baselines' and β = 0's, drawn with the status
pages' own SVG charts (``ldpem.server.pages.svg``): no plotting library, so every install draws
it, and in a few milliseconds where matplotlib took ~0.4 s of the demo's CPU
(docs/PERFORMANCE.md, "The demo's CPU, fourth pass")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ldpem.common.mechanisms import get_mechanism
from ldpem.server.pages.svg import PALETTE, HLine, Series, line_chart

__all__ = ["convergence_svg", "plot_convergence"]


def convergence_svg(result: dict[str, Any], baselines: Sequence[tuple[str, str]]) -> str:
    """The SVG document of the demo's ``result``: its ``errors`` (T,) per round, the
    ``baseline_errors[name]`` (T,) of each of ``baselines`` (mechanism name, label) dashed,
    and ``trivial_error`` (β = 0) as a reference line, on a log scale."""
    rounds = range(1, len(result["errors"]) + 1)
    kind = get_mechanism(result["mechanism"]).label
    series = [
        Series(
            f"federated, {kind} (ε={result['epsilon']})",
            [(float(t), float(e)) for t, e in zip(rounds, result["errors"], strict=True)],
            PALETTE[0],
        )
    ]
    for i, (name, label) in enumerate(baselines, start=1):
        errors = result["baseline_errors"][name]
        series.append(
            Series(
                label,
                [(float(t), float(e)) for t, e in zip(rounds, errors, strict=True)],
                PALETTE[i % len(PALETTE)],
                dashed=True,
            )
        )
    chart = line_chart(
        series,
        chart_id="convergence",
        title=f"ldpem demo: {result['model']}, n={result['n']}, d={result['d']}",
        x_label="round",
        y_label="‖β − β*‖",
        log_y=True,
        hlines=[HLine(float(result["trivial_error"]), "β = 0")],
        # The legend's labels are long (the baselines' descriptions, ~55 characters).
        width=1040,
        height=360,
        legend_width=400,
    )
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + chart + "\n"


def plot_convergence(
    result: dict[str, Any], path: Path, baselines: Sequence[tuple[str, str]]
) -> str:
    """Write ``convergence_svg(result, baselines)`` to ``path``; returns its path."""
    path.write_text(convergence_svg(result, baselines), encoding="utf-8")
    return str(path)
