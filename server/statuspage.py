"""The operator's HTML pages, rendered on the server (no JavaScript): the index of runs and
one page per run with its health, plots, round timeline, hospitals and privacy spent.

Everything here is read from the coordinator's state; nothing is computed that an agent
could not also see, except the stated σ_r of each report, which the privacy column turns
into the ε the coordinator can infer (docs/FEDERATED.md, "Status page").
"""

from __future__ import annotations

import html
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ldpem.common.mechanisms import get_mechanism
from ldpem.common.wire import PublicParameters, RunCreate, RunSummary
from ldpem.server.coordinator import Coordinator
from ldpem.server.policy import NOISE_FLOOR_RTOL, implied_delta
from ldpem.server.store import ReportRow
from ldpem.server.svg import (
    PALETTE,
    HLine,
    Marker,
    Series,
    format_number,
    line_chart,
    linear_ticks,
    scale_bar,
)

__all__ = ["index_page", "page", "run_page"]

#: Seconds between reloads of a page whose run is still open.
REFRESH_SECONDS = 5
#: Coordinates of β drawn at most (a plot of 100 lines shows nothing).
MAX_COORDINATES = 10
#: Rounds drawn on the timeline and listed in its table at most (the latest).
MAX_TIMELINE_ROUNDS = 30
#: A hospital is late in the open round once it has been open this many times longer than
#: the median closed round (and at least LATE_FLOOR seconds).
LATE_FACTOR = 1.5
LATE_FLOOR = 5.0

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:64em;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
td,th{padding:.25em .7em;text-align:left;border-bottom:1px solid #e4e4e4;vertical-align:top}
th{background:#f4f4f4}
.num{text-align:right;font-variant-numeric:tabular-nums}
.status-running{color:#0a5}.status-finished{color:#04a}.status-failed{color:#b00}
.late{background:#fde2c8}.missing{background:#f8c9c9}.waiting{color:#777}
.health{border-left:5px solid #0a5;padding:.3em 1em;background:#f3fbf6}
.health.bad{border-color:#d60;background:#fff6ee}
.note{color:#555;font-size:.9em}
.bar{display:inline-block;width:8em;height:.8em;background:#eee;vertical-align:middle}
.bar span{display:block;height:100%;background:#0072B2}
svg.chart{max-width:100%;height:auto;display:block;margin:.5em 0}
"""


def page(title: str, body: str, *, refresh: bool) -> str:
    """A complete HTML document; ``refresh`` reloads it every REFRESH_SECONDS seconds."""
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{meta}"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _clock(timestamp: float | None) -> str:
    if timestamp is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(timestamp)) + "Z"


def _duration(seconds: float) -> str:
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _progress(run: RunSummary) -> str:
    share = 0.0 if run.rounds == 0 else min(1.0, run.round / run.rounds)
    return (
        f'<span class="bar" title="{run.round} of {run.rounds} rounds">'
        f'<span style="width:{share * 100:.0f}%"></span></span> {run.round}/{run.rounds}'
    )


# --- index -------------------------------------------------------------------------------
def index_page(runs: Sequence[RunSummary], *, now: float) -> str:
    """Runs newest first: status, progress and age; reloads while any run is open."""
    ordered = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
    rows = "".join(
        f'<tr><td><a href="/runs/{_e(r.run_id)}">{_e(r.run_id)}</a></td>'
        f'<td class="status-{_e(r.status)}">{_e(r.status)}</td><td>{_progress(r)}</td>'
        f"<td>{_e(r.model)}, d = {r.d}, {_e(r.mechanism)}</td>"
        f'<td class="num">{r.hospitals}</td><td>{_duration(now - r.created_at)} ago</td></tr>'
        for r in ordered
    )
    counts = {s: sum(r.status == s for r in runs) for s in ("running", "finished", "failed")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    body = (
        f"<p>{len(runs)} runs: {summary}.</p>"
        '<table id="runs"><tr><th>run</th><th>status</th><th>progress</th><th>model</th>'
        "<th>hospitals</th><th>created</th></tr>"
        f"{rows or '<tr><td colspan=6>no runs yet</td></tr>'}</table>"
    )
    return page("ldpem coordinator", body, refresh=counts["running"] > 0)


# --- run page ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _HospitalState:
    name: str
    records: int
    reported: list[int]
    last_report_at: float | None
    #: The weakest σ_r its reports declared, the ε per record it implies (tight accounting,
    #: the run's δ) and whether that is weaker than the run's budget (Coordinator.participation).
    noise_std: float | None
    epsilon: float | None
    weaker: bool
    in_open_round: str  # "reported", "waiting", "late" or "" (no open round)


@dataclass(frozen=True)
class _Round:
    t: int
    status: str
    opened_at: float
    deadline: float
    closed_at: float | None
    #: Its reports by arrival.
    reports: list[ReportRow]

    @property
    def reporters(self) -> set[str]:
        return {p.hospital for p in self.reports}


def _rounds(coordinator: Coordinator, run_id: str, reports: Sequence[ReportRow]) -> list[_Round]:
    """The run's rounds with their reports, in one pass over each (a page of a long run
    is rendered on the event loop: no round × report scans)."""
    by_round: dict[int, list[ReportRow]] = {}
    for p in sorted(reports, key=lambda p: p.received_at):
        by_round.setdefault(p.t, []).append(p)
    return [
        _Round(r.t, r.status, r.opened_at, r.deadline, r.closed_at, by_round.get(r.t, []))
        for r in coordinator.store.rounds(run_id)
    ]


def _late_after(rounds: Sequence[_Round]) -> float:
    durations = [r.closed_at - r.opened_at for r in rounds if r.closed_at is not None]
    if not durations:
        return math.inf
    return max(LATE_FLOOR, LATE_FACTOR * statistics.median(durations))


def _extended(r: _Round, request: RunCreate) -> bool:
    """Whether the round's deadline was moved: it had fewer reports than the quorum."""
    return r.deadline - r.opened_at > request.round_deadline + 1e-6


def _overdue(r: _Round, late_after: float, request: RunCreate, now: float) -> bool:
    """Whether a hospital that has not reported in the open round ``r`` is late."""
    return now - r.opened_at > late_after or _extended(r, request)


def run_page(coordinator: Coordinator, run_id: str, *, now: float) -> str:
    """The status page of one run (raises NotFound for an unknown run)."""
    run = coordinator.summary(run_id)
    row = coordinator.store.get_run(run_id)
    assert row is not None  # summary() found it
    params = PublicParameters.model_validate_json(row.params)
    request = RunCreate.model_validate_json(row.request)
    trajectory = coordinator.trajectory(run_id)
    reports = coordinator.store.reports(run_id)
    rounds = _rounds(coordinator, run_id, reports)
    participation = coordinator.participation(run_id)
    open_round = next((r for r in rounds if r.status == "open"), None)
    if run.status != "running":
        open_round = None
    late_after = _late_after(rounds)
    hospitals: list[_HospitalState] = []
    for p in participation:
        state = ""
        if open_round is not None:
            if p.hospital in open_round.reporters:
                state = "reported"
            elif _overdue(open_round, late_after, request, now):
                state = "late"
            else:
                state = "waiting"
        hospitals.append(
            _HospitalState(
                name=p.hospital,
                records=p.records,
                reported=p.rounds_reported,
                last_report_at=p.last_report_at,
                noise_std=p.noise_std,
                epsilon=p.epsilon,
                weaker=p.weaker,
                in_open_round=state,
            )
        )
    body = "".join(
        [
            _health(run, open_round, hospitals, request, now),
            _summary_table(run, params, request, now),
            "<h2>Estimate</h2>",
            _accuracy(run, request),
            _beta_plot(trajectory.betas, params.d),
            "<h2>Convergence</h2>",
            _step_plot(trajectory.steps, run),
            "<h2>Rounds</h2>",
            _timeline(rounds, [h.name for h in hospitals], run, now),
            _round_table(rounds, [h.name for h in hospitals], run, request, now),
            "<h2>Hospitals</h2>",
            _hospital_table(hospitals, params, now),
        ]
    )
    return page(f"run {run_id}", body, refresh=run.status == "running")


def _health(
    run: RunSummary,
    open_round: _Round | None,
    hospitals: Sequence[_HospitalState],
    request: RunCreate,
    now: float,
) -> str:
    problems: list[str] = []
    if run.status == "failed":
        problems.append(f"the run failed: {run.reason or 'no reason recorded'}")
    if run.warning:
        problems.append(f"forecast warning: {run.warning}")
    late = [h.name for h in hospitals if h.in_open_round == "late"]
    if late:
        problems.append(f"late in round t = {run.round}: {', '.join(late)}")
    if open_round is not None:
        if _extended(open_round, request):
            problems.append(f"round t = {open_round.t} was extended: short of quorum")
        if open_round.deadline < now:
            problems.append(f"round t = {open_round.t} is past its deadline")
    if problems:
        items = "".join(f"<li>{_e(p)}</li>" for p in problems)
        return (
            f'<div id="health" class="health bad"><strong>Attention</strong><ul>{items}</ul></div>'
        )
    if run.status == "finished":
        text = f"finished all {run.rounds} rounds"
    else:
        waiting = [h.name for h in hospitals if h.in_open_round == "waiting"]
        text = f"running, round t = {run.round} open, {run.round} of {run.rounds} closed" + (
            f"; waiting for {', '.join(waiting)}" if waiting else ""
        )
    return f'<div id="health" class="health"><strong>Healthy</strong>: {_e(text)}</div>'


def _summary_table(
    run: RunSummary, params: PublicParameters, request: RunCreate, now: float
) -> str:
    rows = [
        ("status", f'<span class="status-{_e(run.status)}">{_e(run.status)}</span>'),
        ("progress", _progress(run)),
        ("model", _e(f"{run.model}, d = {run.d}, σ = {params.sigma:g}, η = {params.eta:g}")),
        (
            "mechanism",
            _e(
                f"{run.mechanism}, ε = {params.epsilon:g}, δ = {params.delta:.3g} "
                f"({params.accounting} accounting)"
            ),
        ),
        (
            "hospitals",
            _e(
                f"{run.hospitals}, quorum {run.quorum}, round deadline "
                f"{_duration(request.round_deadline)} ({request.on_short} when short)"
            ),
        ),
        ("created", _e(f"{_clock(run.created_at)} ({_duration(now - run.created_at)} ago)")),
        ("β", _e(", ".join(f"{v:.4g}" for v in run.beta))),
    ]
    if run.allow_weaker_reports:
        rows.append(
            (
                "weaker reports",
                _e("accepted (allow_weaker_reports): each hospital's ε is in the table below"),
            )
        )
    return (
        '<table id="summary">'
        + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
        + "</table>"
    )


def _accuracy(run: RunSummary, request: RunCreate) -> str:
    markers = [Marker(run.trivial_error, f"β = 0: {run.trivial_error:.3g}", "#555555")]
    if run.expected_error is not None:
        markers.insert(
            0, Marker(run.expected_error, f"forecast: {run.expected_error:.3g}", PALETTE[5])
        )
        note = (
            f"The forecast is the mean final error ‖β̂ − β*‖ of simulated runs of this setting "
            f"at ‖β*‖/σ = {request.snr:g}; it gives no band (no spread over seeds is kept), "
            "so only the expected error is drawn. β = 0 is the error of not estimating at all: "
            "a useful run lands well left of it."
        )
    else:
        note = "No forecast for this run (disabled or failed): only the error of β = 0, for scale."
    chart = scale_bar(
        markers,
        chart_id="accuracy",
        title="Expected error of the estimate",
        high=run.trivial_error,
        label="‖β̂ − β*‖",
    )
    return f'{chart}<p class="note">{_e(note)}</p>'


def _beta_plot(betas: Sequence[Sequence[float]], d: int) -> str:
    shown = min(d, MAX_COORDINATES)
    series = [
        Series(
            f"β{_subscript(j + 1)}",
            [(float(t), float(b[j])) for t, b in enumerate(betas)],
            PALETTE[j % len(PALETTE)],
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
    return f'{chart}<p class="note">{_e(more)}β⁰ is the start the coordinator drew.</p>'


def _subscript(number: int) -> str:
    return str(number).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def _step_plot(steps: Sequence[float], run: RunSummary) -> str:
    lines = [HLine(run.trivial_error, "β = 0 error ‖β*‖ (scale)", "#555555")]
    if run.expected_error is not None:
        lines.insert(
            0,
            HLine(run.expected_error, "forecast error (no band)", PALETTE[5]),
        )
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
    )
    note = (
        "The step shrinks as EM converges. Steps are distances in β, like the errors drawn "
        "for scale: a step below the forecast error moves β by less than the estimate's "
        "expected error, so the run is as settled as its privacy noise allows."
    )
    return f'{chart}<p class="note">{_e(note)}</p>'


def _timeline(
    rounds: Sequence[_Round],
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
            f'font-size="11" text-anchor="middle">{_e(format_number(tick, step))}</text></g>'
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
            f"<title>round {r.t}: {_e(_duration(closed - r.opened_at))}</title></rect>"
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
                f'fill="{colors.get(p.hospital, "#000")}"><title>{_e(p.hospital)} at +'
                f"{_e(_duration(p.received_at - r.opened_at))}</title></circle>"
            )
        parts.append("</g>")
    for i, name in enumerate(list(names)[:12]):
        y = top + 8 + i * 16
        parts.append(
            f'<g class="legend"><circle cx="{left + plot_w + 22}" cy="{y}" r="4" '
            f'fill="{colors[name]}"/><text x="{left + plot_w + 32}" y="{y + 4}" '
            f'font-size="11">{_e(name)}</text></g>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" '
        f'font-size="12" text-anchor="middle">time since the run was created ({unit}); '
        "red: a deadline</text></svg>"
    )
    return "".join(parts)


def _round_table(
    rounds: Sequence[_Round],
    names: Sequence[str],
    run: RunSummary,
    request: RunCreate,
    now: float,
) -> str:
    late_after = _late_after(rounds)
    rows = []
    for r in reversed(list(rounds)[-MAX_TIMELINE_ROUNDS:]):
        reported = ", ".join(
            f"{_e(p.hospital)} +{_e(_duration(p.received_at - r.opened_at))}" for p in r.reports
        )
        reporters = r.reporters
        absent = [n for n in names if n not in reporters]
        is_open = r.status == "open" and run.status == "running"
        if is_open:
            overdue = _overdue(r, late_after, request, now)
            label, css = ("late", "late") if overdue else ("waiting for", "waiting")
        else:
            label, css = "missing", "missing"
        absent_cell = (
            f'<span class="{css}">{label}: {_e(", ".join(absent))}</span>' if absent else "—"
        )
        closed = r.closed_at if r.closed_at is not None else now
        rows.append(
            f'<tr class="{"open" if is_open else "closed"}"><td class="num">{r.t}</td>'
            f"<td>{_clock(r.opened_at)}</td><td>{_clock(r.closed_at)}</td>"
            f'<td class="num">{_duration(closed - r.opened_at)}{" so far" if is_open else ""}'
            f'</td><td class="num">{len(reporters)}/{len(names)} (quorum {run.quorum})</td>'
            f"<td>{_clock(r.deadline)}</td><td>{reported or '—'}</td>"
            f'<td class="{css if absent else ""}">{absent_cell}</td></tr>'
        )
    note = (
        f"Latest {min(len(rounds), MAX_TIMELINE_ROUNDS)} of {len(rounds)} rounds, newest first. "
        f"Times are UTC; “+x” is a report's delay after its round opened. A hospital is late "
        f"once the open round has lasted {LATE_FACTOR:g}× the median closed round (at least "
        f"{LATE_FLOOR:g} s) or its deadline was extended; missing: a closed round went "
        "without it."
    )
    return (
        '<table id="rounds"><tr><th>t</th><th>opened</th><th>closed</th><th>duration</th>'
        "<th>reports</th><th>deadline</th><th>reported (delay)</th><th>late / missing</th>"
        f'</tr>{"".join(rows)}</table><p class="note">{_e(note)}</p>'
    )


def _spent(h: _HospitalState, params: PublicParameters) -> str:
    """A hospital's ε per record as its agent's ledger records it. At or below the run's
    noise that is ε at the run's δ. With more noise (the agent's budget is stricter) the run's
    ε at the δ that noise reaches comes first: an agent with a stricter δ calibrates at its
    own δ and the run's ε and records that pair, and counts its budget as spent where
    ε at the run's δ alone would read as some of it left (issue 24)."""
    assert h.epsilon is not None
    stricter = h.epsilon < params.epsilon * (1.0 - NOISE_FLOOR_RTOL)
    delta = None
    if stricter and h.noise_std is not None:
        delta = implied_delta(params.mechanism, params, h.noise_std, h.records, params.epsilon)
    if delta is None:
        return f"{h.epsilon:.4g} of {params.epsilon:g}"
    return (
        f"{params.epsilon:g} of {params.epsilon:g} at δ = {delta:.3g} "
        f"({h.epsilon:.4g} at the run's δ)"
    )


def _hospital_table(
    hospitals: Sequence[_HospitalState], params: PublicParameters, now: float
) -> str:
    rows = []
    for h in hospitals:
        site = get_mechanism(params.mechanism).noise_site
        if site == "aggregator":
            spent = _e(f"{params.mechanism}: the coordinator's noise")
        elif site == "shares":
            spent = _e(f"{params.mechanism}: the sum's, shared by ≥ {params.t_min} hospitals")
        elif site == "nowhere":
            spent = _e("∞ (no privacy)")
        elif h.epsilon is None:
            spent = _e(f"0 of {params.epsilon:g}")  # no report yet: nothing spent
        else:
            spent = _e(_spent(h, params))
            if h.weaker:
                spent = f'<span class="warn">{spent}: weaker than the run\'s budget</span>'
        noise_std = "—" if h.noise_std is None else f"{h.noise_std:.4g}"
        last = "—" if h.last_report_at is None else f"{_duration(now - h.last_report_at)} ago"
        state = {"reported": "✓ reported", "waiting": "waiting", "late": "late", "": "—"}
        rows.append(
            f'<tr class="{h.in_open_round}"><td>{_e(h.name)}</td>'
            f'<td class="num">{h.records}</td>'
            f'<td class="num">{len(h.reported)}/{params.rounds}</td><td>{last}</td>'
            f"<td>{state[h.in_open_round]}</td><td class='num'>{noise_std}</td>"
            f"<td class='num'>{spent}</td></tr>"
        )
    note = (
        f"ε spent: at the run's δ = {params.delta:.3g} (tight accounting), inferred from the "
        "smallest noise std σ_r the hospital's reports declare and the mechanism's "
        "sensitivity (each record reports in one round). A hospital whose own budget is "
        "stricter than the run's adds more noise, which spends the run's ε at a smaller δ: "
        "its agent's ledger records that (ε, δ), shown first (an agent stricter in ε "
        "records the ε at the run's δ, in brackets). The coordinator cannot check σ_r: this "
        "is what the reports claim; the agent's own ledger is the authority on its spend."
    )
    return (
        '<table id="hospitals"><tr><th>hospital</th><th>records</th><th>rounds reported</th>'
        "<th>last report</th><th>this round</th><th>declared σ_r</th><th>ε spent</th></tr>"
        f'{"".join(rows)}</table><p class="note">{_e(note)}</p>'
    )
