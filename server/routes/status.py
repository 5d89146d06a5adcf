"""Health check and a small HTML status page with a convergence plot (inline SVG)."""

from __future__ import annotations

import html

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ldpem.common.wire import HospitalParticipation, RunSummary, Trajectory
from ldpem.server.deps import CoordinatorDep

router = APIRouter(tags=["status"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _plot(trajectory: Trajectory, width: int = 480, height: int = 200) -> str:
    """Inline SVG polyline of log10 ‖β^{t+1} − β^t‖ per round (the step shrinks as EM converges)."""
    import math

    steps = [max(s, 1e-12) for s in trajectory.steps]
    if not steps:
        return "<p>No round closed yet.</p>"
    logs = [math.log10(s) for s in steps]
    low, high = min(logs), max(logs)
    span = high - low or 1.0
    pad = 20
    n = max(len(logs) - 1, 1)
    points = " ".join(
        f"{pad + i * (width - 2 * pad) / n:.1f},{pad + (high - v) / span * (height - 2 * pad):.1f}"
        for i, v in enumerate(logs)
    )
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="convergence plot">'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fafafa" stroke="#ccc"/>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{points}"/>'
        f'<text x="{pad}" y="14" font-size="11">step norm ‖β<tspan baseline-shift="super">t+1'
        f'</tspan>−β<tspan baseline-shift="super">t</tspan>‖ (log scale): 10^{high:.2f} … '
        f"10^{low:.2f}</text>"
        f'<text x="{width - pad}" y="{height - 4}" font-size="11" text-anchor="end">round</text>'
        "</svg>"
    )


def _page(title: str, body: str, refresh: bool) -> HTMLResponse:
    meta = '<meta http-equiv="refresh" content="5">' if refresh else ""
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{html.escape(title)}"
        "</title><style>body{font-family:sans-serif;max-width:52em;margin:2em auto}"
        "td,th{padding:.2em .6em;text-align:left}.warn{color:#a40}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def _summary_rows(run: RunSummary) -> str:
    rows = [
        ("status", run.status + (f" ({run.reason})" if run.reason else "")),
        ("round", f"{run.round} / {run.rounds}"),
        ("model", f"{run.model}, d = {run.d}, mechanism {run.mechanism}"),
        ("hospitals", f"{run.hospitals} (quorum {run.quorum})"),
        (
            "expected error",
            "n/a" if run.expected_error is None else f"{run.expected_error:.4g}",
        ),
        ("trivial error (β = 0)", f"{run.trivial_error:.4g}"),
        ("β", ", ".join(f"{v:.4g}" for v in run.beta)),
    ]
    if run.allow_weaker_reports:
        rows.append(
            (
                "weaker reports",
                "accepted (allow_weaker_reports): each hospital's ε is under Participation",
            )
        )
    return "".join(f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)


def _guarantee(p: HospitalParticipation) -> str:
    """The σ_r a hospital declared and the ε it implies; flagged when weaker than the run."""
    if p.noise_std is None or p.epsilon is None:
        return "<td>–</td><td>–</td>"
    cell = f"{p.epsilon:.4g}"
    if p.weaker:
        cell = f'<span class="warn">{cell}: weaker than the run\'s budget</span>'
    return f"<td>{p.noise_std:.4g}</td><td>{cell}</td>"


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(coordinator: CoordinatorDep) -> HTMLResponse:
    runs = coordinator.list_runs()
    items = "".join(
        f'<li><a href="/runs/{html.escape(r.run_id)}">{html.escape(r.run_id)}</a>: '
        f"{r.status}, round {r.round}/{r.rounds}</li>"
        for r in runs
    )
    return _page("ldpem coordinator", f"<ul>{items or '<li>no runs</li>'}</ul>", refresh=True)


@router.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
async def run_page(run_id: str, coordinator: CoordinatorDep) -> HTMLResponse:
    run = coordinator.summary(run_id)
    warning = f'<p class="warn">Warning: {html.escape(run.warning)}</p>' if run.warning else ""
    participation = "".join(
        f"<tr><td>{html.escape(p.hospital)}</td><td>{p.records}</td>"
        f"<td>{len(p.rounds_reported)}</td>{_guarantee(p)}</tr>"
        for p in coordinator.participation(run_id)
    )
    body = (
        f"{warning}<table>{_summary_rows(run)}</table>"
        f"<h2>Convergence</h2>{_plot(coordinator.trajectory(run_id))}"
        "<h2>Participation</h2><table><tr><th>hospital</th><th>records</th>"
        "<th>rounds reported</th><th>declared σ_r</th><th>ε per record</th></tr>"
        f"{participation}</table>"
    )
    return _page(f"run {run_id}", body, refresh=run.status == "running")
