"""An SVG chart of points with intervals (``ldpem.server.pages.svg``'s style): a run's estimate
with its confidence intervals, one coordinate per row."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ldpem.server.pages.svg import (
    PALETTE,
    axis_chart_head,
    format_number,
    linear_ticks,
    x_axis_ticks,
)

__all__ = ["Interval", "interval_chart"]


@dataclass(frozen=True)
class Interval:
    """One row of an interval chart: a point ``value`` and its interval from ``low`` to
    ``high`` (an infinite end runs to the edge of the plot, with an arrow)."""

    name: str
    value: float
    low: float
    high: float
    color: str = PALETTE[0]


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _number(value: float) -> str:
    if math.isnan(value):
        return "?"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return format_number(value)


def interval_chart(
    rows: Sequence[Interval], *, chart_id: str, title: str, label: str, width: int = 880
) -> str:
    """One row per entry: its point and its interval on a shared horizontal axis with
    labelled ticks, e.g. each coordinate of an estimate with its confidence interval.
    The axis covers 0 and every finite point and end; the legend on the right spells each
    row out ("β₁ = 1.2: [0.9, 1.5]")."""
    left, right, top, row_h = 64, 220, 30, 22
    plot_w, height = width - left - right, top + row_h * len(rows) + 44
    values = [0.0] + [v for r in rows for v in (r.value, r.low, r.high) if math.isfinite(v)]
    axis_low, axis_high, ticks = linear_ticks(min(values), max(values))
    bottom = top + row_h * len(rows)

    def px(value: float) -> float:
        value = min(max(value, axis_low), axis_high)  # an infinite end: the plot's edge
        return left + (value - axis_low) / (axis_high - axis_low) * plot_w

    head = axis_chart_head(
        chart_id, title, width=width, height=height, left=left, plot_w=plot_w, axis_y=bottom
    )
    parts = [*head, *x_axis_ticks(ticks, px, top=top, bottom=bottom, stroke="#ddd")]
    for i, row in enumerate(rows):
        y = top + row_h * i + row_h / 2
        low = row.low if not math.isnan(row.low) else -math.inf
        high = row.high if not math.isnan(row.high) else math.inf
        x1, x2 = px(low), px(high)
        arrows = "".join(
            f'<path d="M{x:.1f},{y} l{sign * 6},-4 v8 z" fill="{row.color}"/>'
            for x, sign, end in ((x1, -1, low), (x2, 1, high))
            if not math.isfinite(end)
        )
        text = f"{row.name} = {_number(row.value)}: [{_number(low)}, {_number(high)}]"
        point = (
            f'<circle cx="{px(row.value):.1f}" cy="{y}" r="3.5" fill="{row.color}"/>'
            if math.isfinite(row.value)
            else ""
        )
        parts.append(
            f'<g class="interval"><title>{_esc(text)}</title><text x="{left - 8}" '
            f'y="{y + 4}" font-size="11" text-anchor="end">{_esc(row.name)}</text>'
            f'<line x1="{x1:.1f}" y1="{y}" x2="{x2:.1f}" y2="{y}" stroke="{row.color}" '
            f'stroke-width="2"/>{arrows}{point}<text x="{left + plot_w + 14}" y="{y + 4}" '
            f'font-size="11" fill="{row.color}">{_esc(text)}</text></g>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 4}" '
        f'font-size="12" text-anchor="middle">{_esc(label)}</text></svg>'
    )
    return "".join(parts)
