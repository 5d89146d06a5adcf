"""Hand-written SVG charts for the status pages: no JavaScript, no plotting library.

Every chart is a self-contained ``<svg>`` string with real axes: tick marks with labels
(``<g class="tick">``), grid lines and axis titles, chosen by the usual 1-2-5 rule on a
linear axis and by decades (or 1-2-5 within a decade or two) on a log axis. Text is
HTML-escaped; colours are fixed so pages look the same on every refresh.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "PALETTE",
    "HLine",
    "Marker",
    "Series",
    "Span",
    "axis_chart_head",
    "format_number",
    "line_chart",
    "linear_ticks",
    "log_ticks",
    "scale_bar",
    "x_axis_ticks",
]

#: Colour-blind-safe categorical palette (Okabe–Ito, then Tableau's extra hues).
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#000000",
    "#8C564B",
    "#7F7F7F",
)

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


@dataclass(frozen=True)
class Series:
    """A polyline: ``points`` are (x, y) pairs in data units."""

    name: str
    points: Sequence[tuple[float, float]]
    color: str = PALETTE[0]
    dashed: bool = False
    markers: bool = True


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line across the plot at height ``y``."""

    y: float
    name: str
    color: str = "#555555"
    dashed: bool = True


@dataclass(frozen=True)
class Span:
    """A shaded interval from ``low`` to ``high`` (a band of expected values): across a
    line chart's plot, or along a scale bar."""

    low: float
    high: float
    name: str
    color: str = PALETTE[0]


@dataclass(frozen=True)
class Marker:
    """A point on a scale bar."""

    value: float
    name: str
    color: str = PALETTE[0]


@dataclass
class _Axis:
    low: float
    high: float
    ticks: list[float] = field(default_factory=list)
    log: bool = False

    def fraction(self, value: float) -> float:
        if self.log:
            value = max(value, self.low)
            return (math.log10(value) - math.log10(self.low)) / (
                math.log10(self.high) - math.log10(self.low)
            )
        return (value - self.low) / (self.high - self.low)


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def axis_chart_head(
    chart_id: str, title: str, *, width: int, height: int, left: int, plot_w: int, axis_y: float
) -> list[str]:
    """The opening of a chart on one horizontal axis (``scale_bar``, ``svgintervals``):
    the ``<svg>`` element with its accessible title, the bold title and the axis line at
    ``axis_y`` from ``left`` over ``plot_w`` pixels."""
    return [
        f'<svg id="{_esc(chart_id)}" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="#333"/>',
    ]


def x_axis_ticks(
    ticks: Sequence[float],
    px: Callable[[float], float],
    *,
    top: float,
    bottom: float,
    stroke: str,
) -> list[str]:
    """Labelled ticks of a horizontal axis at ``bottom``: each a line from ``top`` (a grid
    line when above the axis) to 5 px below it, labelled at ``px(tick)`` with
    ``format_number`` at the ticks' step."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else None
    out = []
    for tick in ticks:
        x = px(tick)
        out.append(
            f'<g class="tick x-tick"><line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" '
            f'y2="{bottom + 5}" stroke="{stroke}"/><text x="{x:.1f}" y="{bottom + 18}" '
            f'font-size="11" text-anchor="middle">{_esc(format_number(tick, step))}</text></g>'
        )
    return out


def format_number(value: float, step: float | None = None) -> str:
    """A tick label: plain decimals between 10⁻³ and 10⁴, else m×10ᵏ; with ``step`` (a
    linear axis), as many decimals as the step needs."""
    if value == 0:
        return "0"
    if step is not None and 1e-3 <= abs(step) < 1e4:
        decimals = max(0, -math.floor(math.log10(abs(step)) + 1e-9))
        if not math.isclose(round(step, decimals), step, rel_tol=1e-6):
            decimals += 1
        return f"{value:.{decimals}f}"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e4:
        return f"{value:.4g}"
    exponent = math.floor(math.log10(magnitude))
    mantissa = value / 10**exponent
    power = f"10{str(exponent).translate(_SUPERSCRIPT)}"
    if math.isclose(abs(mantissa), 1.0, rel_tol=1e-9):
        return power if mantissa > 0 else f"−{power}"
    return f"{mantissa:.3g}×{power}"


def linear_ticks(low: float, high: float, target: int = 5) -> tuple[float, float, list[float]]:
    """Axis limits and ticks at multiples of 1, 2, 2.5 or 5 × 10ᵏ covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"axis limits must be finite, got {low!r} and {high!r}")
    if high < low:
        low, high = high, low
    if high == low:
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(target, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    ticks = [round(k * step, 12) for k in range(first, last + 1)]
    return ticks[0], ticks[-1], ticks


def log_ticks(low: float, high: float) -> tuple[float, float, list[float]]:
    """Axis limits and ticks of a log axis covering [low, high] (both > 0): 1-2-5 × 10ᵏ
    over up to two decades, whole decades (every k-th for long ranges) beyond."""
    if not (low > 0 and high > 0 and math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"log axis limits must be finite and > 0, got {low!r} and {high!r}")
    if high < low:
        low, high = high, low
    first = math.floor(math.log10(low) + 1e-12)
    last = math.ceil(math.log10(high) - 1e-12)
    if last - first <= 2:
        candidates = [m * 10.0**k for k in range(first - 1, last + 2) for m in (1, 2, 5)]
        axis_low = max(c for c in candidates if c <= low * (1 + 1e-12))
        axis_high = min(c for c in candidates if c >= high * (1 - 1e-12))
        if axis_high <= axis_low:
            axis_high = min(c for c in candidates if c > axis_low * (1 + 1e-12))
        ticks = [c for c in candidates if axis_low * (1 - 1e-12) <= c <= axis_high * (1 + 1e-12)]
        return axis_low, axis_high, ticks
    every = math.ceil((last - first) / 6)
    last = first + every * math.ceil((last - first) / every)
    ticks = [10.0**k for k in range(first, last + 1, every)]
    return ticks[0], ticks[-1], ticks


def _dash(dashed: bool) -> str:
    return ' stroke-dasharray="6 4"' if dashed else ""


def line_chart(
    series: Sequence[Series],
    *,
    chart_id: str,
    title: str,
    x_label: str,
    y_label: str,
    log_y: bool = False,
    integer_x: bool = True,
    hlines: Sequence[HLine] = (),
    bands: Sequence[Span] = (),
    width: int = 880,
    height: int = 300,
    legend_width: int = 220,
) -> str:
    """An SVG line chart with ticked, labelled axes, grid lines and a legend on the right
    (``legend_width`` pixels of the ``width``).

    ``series`` points are (x, y); on a log y axis, points with y ≤ 0 are left out (a step
    of exactly 0 has no logarithm). Reference lines and ``bands`` (shaded horizontal
    intervals) count towards the y range, so a forecast is always visible.
    """
    left, right, top, bottom = 64, legend_width, 30, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    pts = [
        (x, y)
        for s in series
        for x, y in s.points
        if math.isfinite(x) and math.isfinite(y) and (y > 0 or not log_y)
    ]
    ys = [y for _, y in pts]
    ys += [h.y for h in hlines if math.isfinite(h.y) and (h.y > 0 or not log_y)]
    shown_bands = [
        b
        for b in bands
        if math.isfinite(b.low) and math.isfinite(b.high) and (b.low > 0 or not log_y)
    ]
    ys += [y for b in shown_bands for y in (b.low, b.high)]
    xs = [x for x, _ in pts]
    if not xs:
        xs = [0.0, 1.0]
    if not ys:
        ys = [1.0] if log_y else [0.0, 1.0]
    x_lo, x_hi, x_ticks = linear_ticks(min(xs), max(xs), target=min(8, max(1, len(set(xs)))))
    if integer_x:
        x_ticks = [t for t in x_ticks if float(t).is_integer()] or x_ticks
    y_lo, y_hi, y_ticks = log_ticks(min(ys), max(ys)) if log_y else linear_ticks(min(ys), max(ys))
    x_axis = _Axis(x_lo, x_hi, x_ticks)
    y_axis = _Axis(y_lo, y_hi, y_ticks, log=log_y)

    def px(x: float) -> float:
        return left + x_axis.fraction(x) * plot_w

    def py(y: float) -> float:
        return top + (1 - y_axis.fraction(y)) * plot_h

    parts = [
        f'<svg id="{_esc(chart_id)}" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{_esc(title)}">',
        f"<title>{_esc(title)}</title>",
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fcfcfc" '
        'stroke="#999"/>',
        f'<text x="{left}" y="18" font-size="13" font-weight="bold">{_esc(title)}</text>',
    ]
    step = x_ticks[1] - x_ticks[0] if len(x_ticks) > 1 else None
    for tick in x_ticks:
        x = px(tick)
        parts.append(
            f'<g class="tick x-tick"><line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" '
            f'y2="{top + plot_h}" stroke="#e4e4e4"/><line x1="{x:.1f}" y1="{top + plot_h}" '
            f'x2="{x:.1f}" y2="{top + plot_h + 5}" stroke="#333"/><text x="{x:.1f}" '
            f'y="{top + plot_h + 18}" font-size="11" text-anchor="middle">'
            f"{_esc(format_number(tick, step))}</text></g>"
        )
    y_step = None if log_y or len(y_ticks) < 2 else y_ticks[1] - y_ticks[0]
    for tick in y_ticks:
        y = py(tick)
        parts.append(
            f'<g class="tick y-tick"><line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" '
            f'y2="{y:.1f}" stroke="#e4e4e4"/><line x1="{left - 5}" y1="{y:.1f}" x2="{left}" '
            f'y2="{y:.1f}" stroke="#333"/><text x="{left - 8}" y="{y + 4:.1f}" font-size="11" '
            f'text-anchor="end">{_esc(format_number(tick, y_step))}</text></g>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" '
        f'font-size="12" text-anchor="middle">{_esc(x_label)}</text>'
        f'<text class="axis-label" x="14" y="{top + plot_h / 2:.1f}" font-size="12" '
        f'text-anchor="middle" transform="rotate(-90 14 {top + plot_h / 2:.1f})">'
        f"{_esc(y_label)}</text>"
    )
    for band in shown_bands:
        y1, y2 = py(band.high), py(band.low)
        parts.append(
            f'<rect class="band" x="{left}" y="{y1:.1f}" width="{plot_w}" '
            f'height="{max(y2 - y1, 1.0):.1f}" fill="{band.color}" fill-opacity="0.15">'
            f"<title>{_esc(band.name)}</title></rect>"
        )
    for line in hlines:
        if not math.isfinite(line.y) or (log_y and line.y <= 0):
            continue
        y = py(line.y)
        parts.append(
            f'<line class="reference" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" '
            f'y2="{y:.1f}" stroke="{line.color}" stroke-width="1.5"{_dash(line.dashed)}/>'
        )
    for s in series:
        points = [
            (px(x), py(y))
            for x, y in s.points
            if math.isfinite(x) and math.isfinite(y) and (y > 0 or not log_y)
        ]
        if not points:
            continue
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(
            f'<polyline class="series" fill="none" stroke="{s.color}" stroke-width="2"'
            f'{_dash(s.dashed)} points="{coords}"><title>{_esc(s.name)}</title></polyline>'
        )
        if s.markers and len(points) <= 60:
            parts.extend(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{s.color}"/>' for x, y in points
            )
    entries: list[tuple[str, str, bool | None]] = [(s.name, s.color, s.dashed) for s in series]
    entries += [(h.name, h.color, h.dashed) for h in hlines]
    entries += [(b.name, b.color, None) for b in shown_bands]  # None: a shaded swatch
    legend_x = left + plot_w + 14
    for i, (name, color, dashed) in enumerate(entries[:14]):
        y = top + 8 + i * 16
        swatch = (
            f'<rect x="{legend_x}" y="{y - 5}" width="22" height="10" fill="{color}" '
            'fill-opacity="0.25"/>'
            if dashed is None
            else f'<line x1="{legend_x}" y1="{y}" x2="{legend_x + 22}" y2="{y}" '
            f'stroke="{color}" stroke-width="2"{_dash(dashed)}/>'
        )
        parts.append(
            f'<g class="legend">{swatch}<text x="{legend_x + 28}" y="{y + 4}" '
            f'font-size="11">{_esc(name)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def scale_bar(
    markers: Sequence[Marker],
    *,
    chart_id: str,
    title: str,
    high: float,
    label: str,
    spans: Sequence[Span] = (),
    width: int = 880,
    height: int = 84,
) -> str:
    """A horizontal axis from 0 to ``high`` with labelled ticks, one marker per entry
    (e.g. the forecast error against the error of β = 0) and a shaded interval per span
    (e.g. the forecast's band); the legend lists markers, then spans."""
    left, right = 64, 220
    plot_w = width - left - right
    spans = [s for s in spans if math.isfinite(s.low) and math.isfinite(s.high)]
    values = [m.value for m in markers if math.isfinite(m.value)] + [s.high for s in spans]
    axis_low, axis_high, ticks = linear_ticks(0.0, max(high, *values, 1e-12))
    y = 46
    head = axis_chart_head(
        chart_id, title, width=width, height=height, left=left, plot_w=plot_w, axis_y=y
    )

    def px(value: float) -> float:
        return left + (value - axis_low) / (axis_high - axis_low) * plot_w

    parts = [*head, *x_axis_ticks(ticks, px, top=y, bottom=y, stroke="#333")]
    for i, span in enumerate(spans):
        x1, x2 = px(span.low), px(span.high)
        parts.append(
            f'<g class="span"><rect x="{x1:.1f}" y="{y - 14}" width="{max(x2 - x1, 1.5):.1f}" '
            f'height="14" fill="{span.color}" fill-opacity="0.25"><title>{_esc(span.name)}'
            f'</title></rect><text x="{left + plot_w + 14}" y="{28 + (len(markers) + i) * 16}" '
            f'font-size="11" fill="{span.color}">▬ {_esc(span.name)}</text></g>'
        )
    for i, marker in enumerate(markers):
        if not math.isfinite(marker.value):
            continue
        x = px(marker.value)
        parts.append(
            f'<g class="marker"><path d="M{x:.1f},{y - 2} l-6,-10 h12 z" fill="{marker.color}"/>'
            f'<text x="{left + plot_w + 14}" y="{28 + i * 16}" font-size="11" '
            f'fill="{marker.color}">▼ {_esc(marker.name)}</text></g>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 4}" '
        f'font-size="12" text-anchor="middle">{_esc(label)}</text></svg>'
    )
    return "".join(parts)
