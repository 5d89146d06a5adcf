"""The operator's HTML pages, rendered on the server (no JavaScript): the index of runs and
one page per run with its health, plots, round timeline, hospitals and privacy spent.

Everything here is rendered from what ``ldpem.server.queries`` answers (a ``RunView``, its
health from ``ldpem.server.health``); nothing is computed that an agent could not also
see, except the stated σ_r of each report, which the privacy column turns into the ε the
coordinator can infer (docs/FEDERATED.md, "Status page"). The charts and the round table
are in ``ldpem.server.pages.charts``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ldpem.common.mechanisms import get_mechanism
from ldpem.common.protocol import final_iterates, is_equal, parameter_size
from ldpem.common.wire import (
    HospitalParticipation,
    PublicParameters,
    RunCreate,
    RunSummary,
    Trajectory,
)
from ldpem.server.health import Presence, RunHealth
from ldpem.server.pages.charts import (
    accuracy,
    beta_plot,
    estimate_plot,
    round_table,
    step_plot,
    timeline,
)
from ldpem.server.pages.kit import clock, duration, escape, page, progress
from ldpem.server.pages.secagg import steps_table
from ldpem.server.policy import NOISE_FLOOR_RTOL, implied_delta
from ldpem.server.queries import RunView

__all__ = ["index_page", "run_page"]


# --- index -------------------------------------------------------------------------------
def index_page(runs: Sequence[RunSummary], *, now: float) -> str:
    """Runs newest first: status, health, progress and age; reloads while any run is
    open."""
    ordered = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
    rows = "".join(
        f'<tr><td><a href="/runs/{escape(r.run_id)}">{escape(r.run_id)}</a></td>'
        f'<td class="status-{escape(r.status)}">{escape(r.status)}</td>{_health_cell(r)}'
        f"<td>{progress(r)}</td>"
        f"<td>{escape(r.model)}, d = {r.d}, {escape(r.mechanism)}</td>"
        f'<td class="num">{r.hospitals}</td><td>{duration(now - r.created_at)} ago</td></tr>'
        for r in ordered
    )
    counts = {s: sum(r.status == s for r in runs) for s in ("running", "finished", "failed")}
    cancelled = sum(r.status == "cancelled" for r in runs)
    degraded = sum(r.health == "degraded" for r in runs)
    summary = ", ".join(f"{n} {s}" for s, n in counts.items()) + (
        f", {cancelled} cancelled" if cancelled else ""
    )
    body = (
        f"<p>{len(runs)} runs: {summary}{f'; {degraded} degraded' if degraded else ''}.</p>"
        '<table id="runs"><tr><th>run</th><th>status</th><th>health</th><th>progress</th>'
        "<th>model</th><th>hospitals</th><th>created</th></tr>"
        f"{rows or '<tr><td colspan=7>no runs yet</td></tr>'}</table>"
    )
    return page("ldpem coordinator", body, refresh=counts["running"] > 0)


# --- run page ----------------------------------------------------------------------------
def run_page(view: RunView) -> str:
    """The status page of one run."""
    run, health, params = view.summary, view.health, view.params
    names = [p.hospital for p in view.participation]
    secagg = ""
    if params.t_min is not None and health.secagg:
        secagg = "<h2>Secure aggregation</h2>" + steps_table(
            view.rounds, names, t_min=params.t_min, colluders=params.colluders or 0
        )
    body = "".join(
        [
            _health(health),
            _summary_table(run, view.params, view.request, view.now, view.trajectory),
            "<h2>Estimate</h2>",
            accuracy(run, view.request),
            beta_plot(
                view.trajectory.betas,
                parameter_size(view.params),
                estimate=view.trajectory.estimate,
                averaged=final_iterates(view.params.final, view.params.rounds),
            ),
            estimate_plot(run) if run.status == "finished" else "",
            "<h2>Convergence</h2>",
            step_plot(view.trajectory.steps, run),
            "<h2>Rounds</h2>",
            timeline(view.rounds, names, run, view.now),
            round_table(view.rounds, names, run, health, params.t_min if health.secagg else None),
            secagg,
            "<h2>Hospitals</h2>",
            _hospital_table(view.participation, health, view.params, view.now),
        ]
    )
    # Reloaded while the run goes on, or while a result is computed in the background.
    return page(f"run {run.run_id}", body, refresh=run.status == "running" or bool(run.pending))


#: The banner's label of each health state.
_LABELS = {
    "healthy": "Healthy",
    "degraded": "Degraded",
    "paused": "Paused",
    "failed": "Failed",
    "cancelled": "Cancelled",
}


def _health_cell(run: RunSummary) -> str:
    """The run list's health of ``run``: its state and, unless healthy, the run page's
    headline naming who is late, missing or lost (a degraded run must not read as a plain
    "finished")."""
    state = run.health or "unknown"
    label = _LABELS.get(state, state)
    line = f": {escape(run.health_line)}" if state != "healthy" and run.health_line else ""
    return f'<td class="health-{escape(state)}"><strong>{escape(label)}</strong>{line}</td>'


def _health(health: RunHealth) -> str:
    items = "".join(f"<li>{escape(d)}</li>" for d in health.details())
    return (
        f'<div id="health" class="health {health.state}"><strong>{_LABELS[health.state]}'
        f"</strong>: {escape(health.headline())}{f'<ul>{items}</ul>' if items else ''}</div>"
    )


def _reported(trajectory: Trajectory) -> str:
    """How the reported estimate was made: the last iterate, or the average with weights."""
    last = len(trajectory.betas) - 1
    weights = trajectory.weights or [1.0]
    if len(weights) == 1:
        return f"the last iterate β^{last} ({trajectory.final})"
    first = last - len(weights) + 1
    shown = ", ".join(f"{w:.3g}" for w in weights)
    return (
        f"{trajectory.final}: Σ w_t·β^t over t = {first} … {last}, weights {shown} (inverse "
        "noise variance; sign-aligned for sign-invariant models; post-processing, no "
        "privacy cost)"
    )


def _summary_table(
    run: RunSummary,
    params: PublicParameters,
    request: RunCreate,
    now: float,
    trajectory: Trajectory,
) -> str:
    rows = [
        ("status", f'<span class="status-{escape(run.status)}">{escape(run.status)}</span>'),
        ("progress", progress(run)),
        (
            "model",
            escape(
                f"{run.model}{_options(params)}, d = {run.d}, σ = {params.sigma:g}, "
                f"η = {params.eta:g}"
            ),
        ),
        (
            "mechanism",
            escape(
                f"{run.mechanism}, ε = {params.epsilon:g}, δ = {params.delta:.3g} "
                f"({params.accounting} accounting)"
            ),
        ),
        (
            "hospitals",
            escape(
                f"{run.hospitals}, {_quorum(run, params)}, round deadline "
                f"{duration(request.round_deadline)} ({request.on_short} when short)"
            ),
        ),
        ("created", escape(f"{clock(run.created_at)} ({duration(now - run.created_at)} ago)")),
    ]
    if not is_equal(params.schedule):
        rows.append(("schedule", escape(f"{params.schedule} (records per round)")))
    if trajectory.estimate is not None:
        rows.append(("reported estimate β̂", escape(", ".join(f"{v:.4g}" for v in run.beta))))
        rows.append(("β̂ is", escape(_reported(trajectory))))
    else:
        rows.append(("β", escape(", ".join(f"{v:.4g}" for v in run.beta))))
    if run.allow_weaker_reports:
        rows.append(
            (
                "weaker reports",
                escape("accepted (allow_weaker_reports): each hospital's ε is in the table below"),
            )
        )
    return (
        '<table id="summary">'
        + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
        + "</table>"
    )


def _quorum(run: RunSummary, params: PublicParameters) -> str:
    """What a round needs: its quorum of reports, or (secure aggregation) t_min holders
    through every step, with the collusion bound c."""
    if params.t_min is None:
        return f"quorum {run.quorum}"
    if params.graph is not None and params.graph.survivors:
        g = params.graph
        return (
            f"secure aggregation on the SecAgg+ expander: k = {g.neighbours} neighbours, "
            f"t_k = {params.t_min}, survivor floor T = {g.survivors}, committee "
            f"{g.committee_threshold} of {g.committee}, collusion bound c = "
            f"{params.colluders or 0} (noise sized for h = {g.honest} honest holders)"
        )
    if params.graph is not None:
        g = params.graph
        return (
            f"secure aggregation on the SecAgg+ graph: k = {g.neighbours} neighbours, "
            f"t_k = {params.t_min}, committee {g.committee_threshold} of {g.committee}, "
            f"collusion bound c = {params.colluders or 0} (noise sized for h = {g.honest} "
            "honest holders)"
        )
    return (
        f"secure aggregation: t_min = {params.t_min} holders per step, collusion bound c = "
        f"{params.colluders or 0} (noise sized for t_min − c = "
        f"{params.t_min - (params.colluders or 0)} honest holders)"
    )


def _spent(h: HospitalParticipation, params: PublicParameters) -> str:
    """A hospital's ε per record as its agent's ledger records it. At or below the run's
    noise that is ε at the run's δ. With more noise (the agent's budget is stricter) the run's
    ε at the δ that noise reaches comes first: an agent with a stricter δ calibrates at its
    own δ and the run's ε and records that pair, and counts its budget as spent where
    ε at the run's δ alone would read as some of it left (issue 24)."""
    assert h.epsilon is not None
    stricter = h.epsilon < params.epsilon * (1.0 - NOISE_FLOOR_RTOL)
    delta = None
    if stricter and h.noise_std is not None:
        delta = implied_delta(
            params.mechanism, params, h.noise_std, h.records, params.epsilon, h.noise_round
        )
    if delta is None:
        return f"{h.epsilon:.4g} of {params.epsilon:g}"
    return (
        f"{params.epsilon:g} of {params.epsilon:g} at δ = {delta:.3g} "
        f"({h.epsilon:.4g} at the run's δ)"
    )


def _hospital_table(
    hospitals: Sequence[HospitalParticipation],
    health: RunHealth,
    params: PublicParameters,
    now: float,
) -> str:
    presence: dict[str, Presence] = {h.name: h.in_open_round for h in health.hospitals}
    state = {
        "reported": "✓ reported",
        "waiting": "waiting",
        "late": "late",
        "lost": "lost (not waited for)",
        "": "—",
    }
    site = get_mechanism(params.mechanism).noise_site
    rows = []
    for h in hospitals:
        if site == "aggregator":
            spent = escape(f"{params.mechanism}: the coordinator's noise")
        elif site == "shares":
            spent = escape(f"{params.mechanism}: the sum's, shared by ≥ {params.t_min} hospitals")
        elif site == "nowhere":
            spent = escape("∞ (no privacy)")
        elif h.epsilon is None:
            spent = escape(f"0 of {params.epsilon:g}")  # no report yet: nothing spent
        else:
            spent = escape(_spent(h, params))
            if h.weaker:
                spent = f'<span class="warn">{spent}: weaker than the run\'s budget</span>'
        noise_std = "—" if h.noise_std is None else f"{h.noise_std:.4g}"
        last = "—" if h.last_report_at is None else f"{duration(now - h.last_report_at)} ago"
        here = presence.get(h.hospital, "")
        rows.append(
            f'<tr class="{here}"><td>{escape(h.hospital)}</td>'
            f'<td class="num">{h.records}</td>'
            f'<td class="num">{len(h.rounds_reported)}/{params.rounds}</td><td>{last}</td>'
            f"<td>{state[here]}</td><td class='num'>{noise_std}</td>"
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
        f'{"".join(rows)}</table><p class="note">{escape(note)}</p>'
    )


def _options(params: PublicParameters) -> str:
    """`` (components = 3)``: the run's model options as published; empty without any."""
    shown = ", ".join(f"{name} = {value}" for name, value in params.model_options.items())
    return f" ({shown})" if shown else ""
