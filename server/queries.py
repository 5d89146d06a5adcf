"""Queries: what the coordinator answers about its runs, read from the Store only."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpem.common.core.naming import natural_sorted
from ldpem.common.mechanisms import get_mechanism
from ldpem.common.models import get_model
from ldpem.common.protocol import (
    FinalEstimate,
    central_noise,
    final_estimate,
    final_iterates,
    round_noise_variance,
)
from ldpem.common.secagg import Roster
from ldpem.common.secagg.steps import Step
from ldpem.common.wire import (
    HospitalParticipation,
    Identity,
    PublicParameters,
    RoundInfo,
    RoundSummary,
    RunCreate,
    RunSummary,
    Trajectory,
)
from ldpem.common.wire.reads import LostStep, SecAggLostRound, SecAggRoundSteps, SecAggStepClosing
from ldpem.server.confidence import stored_region
from ldpem.server.health import RoundView, RunHealth, assess, round_views
from ldpem.server.policy import NOISE_FLOOR_RTOL, implied_epsilon, noise_floor
from ldpem.server.runrows import forecast_of, get_run, params_of, request_of
from ldpem.server.secagg.view import LIGHT_KINDS, SecAggRound, read_rounds
from ldpem.server.store import HospitalRow, ReportRow, RunRow, Store

__all__ = [
    "RunHealth",
    "RunView",
    "averaged_reports",
    "estimate_of",
    "health",
    "identity",
    "participation",
    "round_info",
    "rounds",
    "run_view",
    "summary",
    "trajectory",
]


def summary(
    store: Store, run: RunRow, health: RunHealth, pending: list[str] | None = None
) -> RunSummary:
    """The run's summary with its ``health`` (``health`` below: required, so no summary
    leaves it out); ``pending``: its derived results being computed
    (``ldpem.server.background``)."""
    params = params_of(run)
    return RunSummary(
        run_id=run.id,
        status=run.status,
        round=run.current_round,
        rounds=params.rounds,
        model=params.model,
        model_options=params.model_options,
        d=params.d,
        mechanism=params.mechanism,
        hospitals=len(store.hospitals(run.id)),
        quorum=run.quorum,
        created_at=run.created_at,
        expected_error=run.expected_error,
        trivial_error=run.trivial_error,
        warning=run.warning,
        reason=run.reason,
        beta=run.beta,
        allow_weaker_reports=request_of(run).allow_weaker_reports,
        secagg_topology=None
        if params.t_min is None
        else ("mesh" if params.graph is None else params.graph.topology),
        survivors=params.survivors,
        forecast=forecast_of(run),
        health=health.state,
        health_line=health.headline(),
        pending=list(pending or []),
        confidence=stored_region(store, run.id) if run.status == "finished" else None,
    )


def identity(store: Store, hospital: HospitalRow) -> Identity:
    run = get_run(store, hospital.run_id)
    return Identity(
        run_id=run.id,
        hospital=hospital.name,
        records=hospital.records,
        params=params_of(run),
    )


def round_info(store: Store, run_id: str) -> RoundInfo:
    run = get_run(store, run_id)
    deadline: float | None = None
    if run.status == "running":
        current = store.get_round(run_id, run.current_round)
        deadline = None if current is None else current.deadline
    return RoundInfo(
        run_id=run.id,
        status=run.status,
        round=run.current_round,
        beta=run.beta,
        deadline=deadline,
        params=params_of(run),
        reason=run.reason,
    )


def rounds(store: Store, run_id: str) -> list[RoundSummary]:
    run = get_run(store, run_id)
    params = params_of(run)
    return [
        RoundSummary(
            round=r.t,
            status=r.status,
            opened_at=r.opened_at,
            deadline=r.deadline,
            closed_at=r.closed_at,
            reporters=natural_sorted(r.reporters),
            count=sum(p.count for p in r.reports),
            beta=r.beta,
            beta_next=r.beta_next,
            secagg=None if r.secagg is None else _steps(r.secagg, params),
        )
        for r in _views(store, run)
    ]


def _steps(view: SecAggRound, params: PublicParameters) -> SecAggRoundSteps:
    """A secagg round's steps as the read API answers them."""
    answered = view.answered
    return SecAggRoundSteps(
        t_min=params.t_min or 0,
        colluders=params.colluders or 0,
        step=view.step,
        advertised=list(answered.get(Step.ADVERTISE, ())),
        shared=list(answered.get(Step.SHARES, ())),
        masked=list(answered.get(Step.MASKED, ())),
        signed=list(answered.get(Step.SIGNATURE, ())),
        unmasked=list(answered.get(Step.UNMASK, ())),
        survivors=None if view.survivors is None else list(view.survivors),
        lost=dict(view.lost),
        excluded=natural_sorted(view.excluded),
        disputed=dict(view.disputed),
        lost_round=None if view.lost_round is None else SecAggLostRound(**view.lost_round),
        not_waited_for=list(view.not_waited),
        returned=list(view.returned),
        closings=[
            SecAggStepClosing(
                step=c.step,
                by="deadline" if c.by == "deadline" else "everyone",
                waited_for=list(c.waited_for),
                missing=list(c.missing),
                at=c.at,
            )
            for c in view.closings
        ],
    )


def _views(
    store: Store, run: RunRow, reports: Sequence[ReportRow] | None = None
) -> list[RoundView]:
    """The run's rounds with their reports (``reports``: the run's, when read already) and,
    in a secagg run, their steps (``ldpem.server.secagg.view``)."""
    if reports is None:
        reports = store.reports(run.id)
    rows = store.rounds(run.id)
    secagg = None
    if params_of(run).holders is not None:
        enrolled = [h.name for h in store.hospitals(run.id)]
        outline = store.secagg_outline(run.id, LIGHT_KINDS)
        roster = request_of(run).roster
        order = Roster.from_json(json.dumps(roster)).names if roster is not None else ()
        secagg = read_rounds(outline, enrolled, [r.t for r in rows], order)
    return round_views(rows, reports, secagg)


def averaged_reports(store: Store, run_id: str, params: PublicParameters) -> list[ReportRow]:
    """The reports of the rounds whose iterates the run's ``final`` averages (none for
    ``last``): all ``estimate_of`` reads."""
    k = final_iterates(params.final, params.rounds)
    if k == 1:
        return []
    return [p for t in range(params.rounds - k, params.rounds) for p in store.reports(run_id, t)]


def estimate_of(
    params: PublicParameters, betas: Sequence[Sequence[float]], reports: Sequence[ReportRow]
) -> FinalEstimate:
    """The reported estimate of a finished run (``protocol.final_estimate``): of its
    trajectory ``betas`` β⁰ … β^T and the noise of the rounds it averages, from their
    ``reports`` (the counts and noise stds they declare, and the central noise of each
    round's count): what the simulator computes, so anyone with the trajectory and the
    rounds' reports can check it."""
    kind = get_mechanism(params.mechanism)
    k = final_iterates(params.final, params.rounds)
    variances = [math.nan] * params.rounds  # only the averaged rounds' are read
    for t in range(params.rounds - k, params.rounds) if k > 1 else ():
        mine = [p for p in reports if p.t == t]
        variances[t] = round_noise_variance(
            kind, [p.count for p in mine], [p.noise_std for p in mine], central_noise(params, t)
        )
    sign_invariant = get_model(params.model).sign_invariant
    return final_estimate(betas, variances, final=params.final, sign_invariant=sign_invariant)


def trajectory(store: Store, run_id: str) -> Trajectory:
    run = get_run(store, run_id)
    views = _views(store, run, reports=())  # β only: the reports are read below if needed
    averaged = averaged_reports(store, run_id, params_of(run)) if run.status == "finished" else []
    return _trajectory(run, views, averaged)


def _trajectory(
    run: RunRow, views: Sequence[RoundView], reports: Sequence[ReportRow]
) -> Trajectory:
    """The run's trajectory; once it finished, its reported estimate and the weights of
    the iterates averaged (from ``reports``: at least those of the averaged rounds)."""
    params = params_of(run)
    betas = [r.beta for r in views]
    last = views[-1].beta_next if views else None
    finished = run.status == "finished" and last is not None
    if finished and last is not None:
        betas.append(last)
    steps = [
        float(np.linalg.norm(np.subtract(r.beta_next, r.beta)))
        for r in views
        if r.beta_next is not None
    ]
    weights = list(estimate_of(params, betas, reports).weights) if finished else None
    return Trajectory(
        run_id=run.id,
        betas=betas,
        steps=steps,
        final=params.final,
        estimate=run.beta if finished else None,
        weights=weights,
    )


def participation(store: Store, run_id: str) -> list[HospitalParticipation]:
    """Per hospital: the rounds it reported and the weakest noise it declared, with the
    ε per record that noise implies (``weaker`` when below the run's budget)."""
    run = get_run(store, run_id)
    reports = store.reports(run_id)
    return _participation(run, store.hospitals(run_id), reports, _views(store, run, reports))


def _participation(
    run: RunRow,
    hospitals: Sequence[HospitalRow],
    reports: Sequence[ReportRow],
    views: Sequence[RoundView],
) -> list[HospitalParticipation]:
    params = params_of(run)
    # Secure aggregation: one report (the sum) per round; a holder took part in the rounds
    # whose sum holds its input, and missed the steps it was lost at.
    steps = [r.secagg for r in views if r.secagg is not None and r.status == "closed"]
    lost = [(r.secagg.t, r.secagg.lost) for r in views if r.secagg is not None]
    by_hospital: dict[str, list[ReportRow]] = {}
    for p in reports:
        by_hospital.setdefault(p.hospital, []).append(p)
    out = []
    for h in hospitals:
        mine = by_hospital.get(h.name, [])
        noise_std: float | None = None
        epsilon: float | None = None
        weaker = False
        noise_round: int | None = None
        for p in mine:  # the report with the largest ε is the hospital's guarantee
            spent = implied_epsilon(params.mechanism, params, p.noise_std, h.records, p.t)
            if spent is not None and (epsilon is None or spent > epsilon):
                noise_std, epsilon, noise_round = p.noise_std, spent, p.t
            floor = noise_floor(params.mechanism, params, h.records, p.t)
            weaker = weaker or p.noise_std < floor * (1.0 - NOISE_FLOOR_RTOL)
        rounds_reported = [p.t for p in mine]
        if steps:
            rounds_reported = [v.t for v in steps if h.name in v.present]
        out.append(
            HospitalParticipation(
                hospital=h.name,
                records=h.records,
                rounds_reported=rounds_reported,
                last_report_at=max((p.received_at for p in mine), default=None),
                noise_std=noise_std,
                epsilon=epsilon,
                weaker=weaker,
                noise_round=noise_round,
                lost=[LostStep(round=t, step=at[h.name]) for t, at in lost if h.name in at],
            )
        )
    return out


def health(store: Store, run: RunRow, now: float) -> RunHealth:
    """The run's health at ``now`` (``ldpem.server.health``)."""
    return _health(run, _views(store, run), store.hospitals(run.id), now)


def _health(
    run: RunRow, views: Sequence[RoundView], hospitals: Sequence[HospitalRow], now: float
) -> RunHealth:
    return assess(
        run_status=run.status,
        rounds=params_of(run).rounds,
        round_deadline=request_of(run).round_deadline,
        views=views,
        hospitals=[h.name for h in hospitals],
        reason=run.reason,
        warning=run.warning,
        now=now,
    )


@dataclass(frozen=True)
class RunView:
    """Everything the status page of a run shows, read in one go at ``now``."""

    summary: RunSummary
    params: PublicParameters
    request: RunCreate
    trajectory: Trajectory
    rounds: list[RoundView]
    participation: list[HospitalParticipation]
    health: RunHealth
    now: float


def run_view(store: Store, run_id: str, now: float, pending: list[str] | None = None) -> RunView:
    """The run ``run_id`` as its status page shows it; its reports, the largest table,
    are read once for all of it. ``pending`` as for ``summary``."""
    run = get_run(store, run_id)
    hospitals = store.hospitals(run_id)
    reports = store.reports(run_id)
    views = _views(store, run, reports)
    health = _health(run, views, hospitals, now)
    return RunView(
        summary=summary(store, run, health, pending),
        params=params_of(run),
        request=request_of(run),
        trajectory=_trajectory(run, views, reports),
        rounds=views,
        participation=_participation(run, hospitals, reports, views),
        health=health,
        now=now,
    )
