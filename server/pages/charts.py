"""The run page's charts and its table of rounds: the expected error on its scale, β and
the step norm by round, and the round timeline (``ldpem.server.pages.status`` lays them
out)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ldpem.common.wire import Forecast, RunCreate, RunSummary
from ldpem.server.health import LATE_FACTOR, LATE_FLOOR, RoundView, RunHealth
from ldpem.server.pages.kit import clock, duration, escape
from ldpem.server.pages.secagg import round_cells
from ldpem.server.pages.svg import (
    PALETTE,
    HLine,
    Marker,
    Series,
    Span,
    format_number,
    line_chart,
    linear_ticks,
    scale_bar,
)
from ldpem.server.pages.svgintervals import Interval, interval_chart

__all__ = ["accuracy", "beta_plot", "estimate_plot", "round_table", "step_plot", "timeline"]

#: Coordinates of β drawn at most (a plot of 100 lines shows nothing).
MAX_COORDINATES = 10
#: Rounds drawn on the timeline and listed in its table at most (the latest).
MAX_TIMELINE_ROUNDS = 30


def _sensitivity(forecast: Forecast) -> str:
    """How the expected error moves with ‖β*‖/σ, in words (or that it was not simulated)."""
    if not forecast.sensitivity:
        return "this coordinator simulates no other ‖β*‖/σ (forecast_sensitivity_seeds = 0)"
    parts = []
    for band in forecast.sensitivity:
        expected = "the simulated runs diverge" if band.mean is None else f"{band.mean:.3g}"
        parts.append(f"at ‖β*‖/σ = {band.snr:g}, {expected} (β = 0: {band.trivial_error:.3g})")
    return "; ".join(parts)


def accuracy(run: RunSummary, request: RunCreate) -> str:
    markers = [Marker(run.trivial_error, f"β = 0: {run.trivial_error:.3g}", "#555555")]
    spans: list[Span] = []
    forecast = run.forecast
    if forecast is not None and forecast.mean is not None:
        assert forecast.low is not None and forecast.high is not None  # a finite mean
        markers.insert(0, Marker(forecast.mean, f"forecast: {forecast.mean:.3g}", PALETTE[5]))
        spans.append(
            Span(
                forecast.low,
                forecast.high,
                f"10–90%: {forecast.low:.3g}–{forecast.high:.3g}",
                PALETTE[5],
            )
        )
        note = (
            f"The forecast is the mean final error ‖β̂ − β*‖ of {forecast.seeds} simulated "
            f"runs of this setting at the assumed ‖β*‖/σ = {forecast.snr:g} (seeds "
            f"{forecast.first_seed}…, {forecast.records:,} records); the shaded band, their "
            "10–90% quantiles taken to allow for their number, should hold a run's final "
            "error 8 times in 10. The "
            f"assumption matters: {_sensitivity(forecast)}. β = 0 is the error of not "
            "estimating at all: a useful run lands well left of it."
        )
    elif run.expected_error is not None:
        # A run created before forecasts kept their band.
        markers.insert(
            0, Marker(run.expected_error, f"forecast: {run.expected_error:.3g}", PALETTE[5])
        )
        note = (
            f"The forecast is the mean final error of simulated runs of this setting at "
            f"‖β*‖/σ = {request.snr:g}; this run was created before forecasts kept a band."
        )
    elif "forecast" in run.pending:
        note = (
            "Forecast pending: the coordinator is simulating this run in the background, and "
            "this page reloads until it is shown. Meanwhile only the error of β = 0, for scale."
        )
    else:
        note = "No forecast for this run (disabled or failed): only the error of β = 0, for scale."
    chart = scale_bar(
        markers,
        chart_id="accuracy",
        title="Expected error of the estimate",
        high=run.trivial_error,
        label="‖β̂ − β*‖",
        spans=spans,
    )
    return f'{chart}<p class="note">{escape(note)}</p>'


def beta_plot(
    betas: Sequence[Sequence[float]],
    d: int,
    *,
    estimate: Sequence[float] | None = None,
    averaged: int = 1,
) -> str:
    """β's coordinates by round; for a finished run whose reported ``estimate`` averages
    its last ``averaged`` iterates, each coordinate's estimate as a dashed segment over
    those rounds (with one iterate, the estimate is the last point itself)."""
    shown = min(d, MAX_COORDINATES)
    series = [
        Series(
            f"β{_subscript(j + 1)}",
            [(float(t), float(b[j])) for t, b in enumerate(betas)],
            PALETTE[j % len(PALETTE)],
        )
        for j in range(shown)
    ]
    last = len(betas) - 1
    if estimate is not None and averaged > 1:
        series += [
            Series(
                f"β̂{_subscript(j + 1)} (reported)",
                [(float(last - averaged + 1), float(estimate[j])), (float(last), estimate[j])],
                PALETTE[j % len(PALETTE)],
                dashed=True,
                markers=False,
            )
            for j in range(shown)
        ]
    chart = line_chart(
        series,
        chart_id="beta",
        title="β coordinates by round",
        x_label="round t (βᵗ; the last is the current estimate)",
        y_label="β_j",
    )
    more = f"First {shown} of {d} coordinates. " if d > shown else ""
    if estimate is None:
        reported = ""
    elif averaged > 1:
        reported = (
            f" The reported estimate β̂ (dashed) is the weighted average of the last "
            f"{averaged} iterates β{_superscript(last - averaged + 1)} … β{_superscript(last)}."
        )
    else:
        reported = f" The reported estimate β̂ is the last iterate β{_superscript(last)}."
    note = f"{more}β⁰ is the start the coordinator drew.{reported}"
    return f'{chart}<p class="note">{escape(note)}</p>'


def estimate_plot(run: RunSummary) -> str:
    """A finished run's reported estimate β̂ (d,) with its confidence intervals, one
    coordinate per row (the first ``MAX_COORDINATES``), or a line saying why there are
    none: still being computed (pending), or none made."""
    estimate, confidence = run.beta, run.confidence
    if confidence is None:
        why = (
            "the coordinator is computing it by parametric bootstrap"
            if "confidence" in run.pending
            else "this coordinator makes none (confidence_draws = 0) or its bootstrap "
            "failed (see its log)"
        )
        return f'<p id="confidence" class="note">No confidence region: {why}.</p>'
    shown = min(len(estimate), MAX_COORDINATES)

    def end(value: float | None, default: float) -> float:
        return default if value is None else value

    rows = [
        Interval(
            f"β̂{_subscript(j + 1)}",
            float(estimate[j]),
            end(confidence.low[j], -math.inf),
            end(confidence.high[j], math.inf),
            PALETTE[j % len(PALETTE)],
        )
        for j in range(shown)
    ]
    level = f"{100 * confidence.level:g}%"
    chart = interval_chart(
        rows,
        chart_id="confidence",
        title=f"Reported estimate β̂ with {level} confidence intervals",
        label="β_j",
    )
    radius = "unbounded" if confidence.radius is None else f"{confidence.radius:.3g}"
    more = f"First {shown} of {len(estimate)} coordinates. " if len(estimate) > shown else ""
    note = (
        f"{more}Each interval holds the true coordinate β*_j with probability {level}; the "
        f"whole β* lies within ‖β − β̂‖ ≤ {radius} of β̂ at the same level (up to sign for "
        f"a sign-invariant model). From {confidence.draws} reruns of this run's pipeline on "
        f"synthetic data drawn at β̂ ({confidence.method}): they read only β̂ and the "
        "public parameters, so they cost no privacy. They assume the model holds (for "
        "regressions, covariates as the model's generator draws them: docs/RESULTS.md)."
    )
    return f'{chart}<p class="note">{escape(note)}</p>'


def _superscript(number: int) -> str:
    return str(number).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))


def _subscript(number: int) -> str:
    return str(number).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def step_plot(steps: Sequence[float], run: RunSummary) -> str:
    lines = [HLine(run.trivial_error, "β = 0 error ‖β*‖ (scale)", "#555555")]
    bands: list[Span] = []
    forecast = run.forecast
    if run.expected_error is not None:
        lines.insert(0, HLine(run.expected_error, "forecast error (mean)", PALETTE[5]))
    if forecast is not None and forecast.low is not None and forecast.high is not None:
        bands.append(Span(forecast.low, forecast.high, "forecast 10–90%", PALETTE[5]))
    if not steps:
        return '<p id="steps">No round closed yet: no step to plot.</p>'
    chart = line_chart(
        [Series("‖βᵗ⁺¹ − βᵗ‖", [(float(t), s) for t, s in enumerate(steps)])],
        chart_id="steps",
        title="Step norm ‖βᵗ⁺¹ − βᵗ‖ (log scale)",
        x_label="round t",
        y_label="step norm",
        log_y=True,
        hlines=lines,
        bands=bands,
    )
    note = (
        "The step shrinks as EM converges. Steps are distances in β, like the errors drawn "
        "for scale: a step below the forecast error moves β by less than the estimate's "
        "expected error, so the run is as settled as its privacy noise allows."
    )
    return f'{chart}<p class="note">{escape(note)}</p>'


def timeline(
    rounds: Sequence[RoundView],
    names: Sequence[str],
    run: RunSummary,
    now: float,
) -> str:
    """Rows = rounds (latest MAX_TIMELINE_ROUNDS), x = time since the run was created: a
    bar from opening to closing (or now), a dot per report in its hospital's colour."""
    shown = list(rounds)[-MAX_TIMELINE_ROUNDS:]
    if not shown:
        return '<p id="timeline">No round yet.</p>'
    origin = run.created_at
    end = max(
        [r.closed_at if r.closed_at is not None else now for r in shown]
        + [p.received_at for r in shown for p in r.reports]
    )
    span_start = shown[0].opened_at - origin
    span = max(end - origin, span_start + 1e-3)
    unit, factor = ("s", 1.0) if span < 300 else ("min", 60.0) if span < 3 * 3600 else ("h", 3600.0)
    lo, hi, ticks = linear_ticks(span_start / factor, span / factor, target=6)
    width, left, right, top, row = 880, 64, 220, 30, 16
    plot_w = width - left - right
    height = top + row * len(shown) + 44
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}

    def px(timestamp: float) -> float:
        return left + ((timestamp - origin) / factor - lo) / (hi - lo) * plot_w

    parts = [
        f'<svg id="timeline" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        'aria-label="round timeline"><title>round timeline</title>',
        f'<text x="{left}" y="18" font-size="13" font-weight="bold">Round timeline</text>',
    ]
    bottom = top + row * len(shown)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else None
    for tick in ticks:
        x = left + (tick - lo) / (hi - lo) * plot_w
        parts.append(
            f'<g class="tick x-tick"><line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" '
            f'stroke="#e4e4e4"/><line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" '
            f'y2="{bottom + 5}" stroke="#333"/><text x="{x:.1f}" y="{bottom + 18}" '
            f'font-size="11" text-anchor="middle">{escape(format_number(tick, step))}</text></g>'
        )
    for i, r in enumerate(shown):
        y = top + i * row
        closed = r.closed_at if r.closed_at is not None else now
        x1, x2 = px(r.opened_at), px(closed)
        fill = "#9ecae1" if r.status == "open" else "#d9d9d9"
        parts.append(
            f'<g class="round"><text x="{left - 8}" y="{y + 12}" font-size="11" '
            f'text-anchor="end">t = {r.t}</text><rect x="{x1:.1f}" y="{y + 3}" '
            f'width="{max(x2 - x1, 1.5):.1f}" height="{row - 6}" fill="{fill}">'
            f"<title>round {r.t}: {escape(duration(closed - r.opened_at))}</title></rect>"
        )
        if r.deadline <= end:
            xd = px(r.deadline)
            parts.append(
                f'<line class="deadline" x1="{xd:.1f}" y1="{y + 1}" x2="{xd:.1f}" '
                f'y2="{y + row - 1}" stroke="#b00" stroke-width="2"/>'
            )
        for p in r.reports:
            parts.append(
                f'<circle cx="{px(p.received_at):.1f}" cy="{y + row / 2:.1f}" r="3.5" '
                f'fill="{colors.get(p.hospital, "#000")}"><title>{escape(p.hospital)} at +'
                f"{escape(duration(p.received_at - r.opened_at))}</title></circle>"
            )
        parts.append("</g>")
    for i, name in enumerate(list(names)[:12]):
        y = top + 8 + i * 16
        parts.append(
            f'<g class="legend"><circle cx="{left + plot_w + 22}" cy="{y}" r="4" '
            f'fill="{colors[name]}"/><text x="{left + plot_w + 32}" y="{y + 4}" '
            f'font-size="11">{escape(name)}</text></g>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" '
        f'font-size="12" text-anchor="middle">time since the run was created ({unit}); '
        "red: a deadline</text></svg>"
    )
    return "".join(parts)


def round_table(
    rounds: Sequence[RoundView],
    names: Sequence[str],
    run: RunSummary,
    health: RunHealth,
    t_min: int | None = None,
) -> str:
    """The latest rounds, newest first: times, reports and who was late or missing (in a
    secagg run, whose ``t_min`` is given: survivors and who was lost)."""
    rows = []
    for r in reversed(list(rounds)[-MAX_TIMELINE_ROUNDS:]):
        reported = ", ".join(
            f"{escape(p.hospital)} +{escape(duration(p.received_at - r.opened_at))}"
            for p in r.reports
        )
        reporters = r.reporters
        absent = [n for n in names if n not in reporters]
        is_open = r.t == health.open_round
        if is_open:
            label, css = ("late", "late") if health.overdue else ("waiting for", "waiting")
        else:
            label, css = "missing", "missing"
        count = f"{len(reporters)}/{len(names)} (quorum {run.quorum})"
        lost = ""
        if r.secagg is not None and t_min is not None:
            count, reported, lost = round_cells(r, names, t_min)
            absent = [n for n in absent if is_open and n not in r.outside]
        absent_cell = (
            f'<span class="{css}">{label}: {escape(", ".join(absent))}</span>' if absent else ""
        )
        absent_cell = " ".join(c for c in (lost, absent_cell) if c) or "—"
        closed = r.closed_at if r.closed_at is not None else health.now
        rows.append(
            f'<tr class="{"open" if is_open else "closed"}"><td class="num">{r.t}</td>'
            f"<td>{clock(r.opened_at)}</td><td>{clock(r.closed_at)}</td>"
            f'<td class="num">{duration(closed - r.opened_at)}{" so far" if is_open else ""}'
            f'</td><td class="num">{count}</td>'
            f"<td>{clock(r.deadline)}</td><td>{reported or '—'}</td>"
            f'<td class="{css if absent or lost else ""}">{absent_cell}</td></tr>'
        )
    note = (
        f"Latest {min(len(rounds), MAX_TIMELINE_ROUNDS)} of {len(rounds)} rounds, newest first. "
        f"Times are UTC; “+x” is a report's delay after its round opened. A hospital is late "
        f"once the open round has lasted {LATE_FACTOR:g}× the median closed round (in round 0: "
        f"× the latest report so far; at least {LATE_FLOOR:g} s), or its deadline passed or "
        "was extended; missing: a closed round went without it."
    )
    return (
        '<table id="rounds"><tr><th>t</th><th>opened</th><th>closed</th><th>duration</th>'
        "<th>reports</th><th>deadline</th><th>reported (delay)</th><th>late / missing</th>"
        f'</tr>{"".join(rows)}</table><p class="note">{escape(note)}</p>'
    )
