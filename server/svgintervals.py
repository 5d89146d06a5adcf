"""An SVG chart of points with intervals (``ldpem.server.svg``'s style): a run's estimate
with its confidence intervals, one coordinate per row."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ldpem.server.svg import PALETTE, format_number, linear_ticks

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
    step = ticks[1] - ticks[0] if len(ticks) > 1 else None
    bottom = top + row_h * len(rows)

    def px(value: float) -> float:
        value = min(max(value, axis_low), axis_high)  # an infinite end: the plot's edge
        return left + (value - axis_low) / (axis_high - axis_low) * plot_w

    parts = [
        f'<svg id="{_esc(chart_id)}" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{left + plot_w}" y2="{bottom}" stroke="#333"/>',
    ]
    for tick in ticks:
        x = px(tick)
        parts.append(
            f'<g class="tick x-tick"><line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" '
            f'y2="{bottom + 5}" stroke="#ddd"/><text x="{x:.1f}" y="{bottom + 18}" '
            f'font-size="11" text-anchor="middle">{_esc(format_number(tick, step))}</text></g>'
        )
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
