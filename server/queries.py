"""Queries: what the coordinator answers about its runs, read from the Store only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ldpem.common.wire import (
    Forecast,
    HospitalParticipation,
    Identity,
    PublicParameters,
    RoundInfo,
    RoundSummary,
    RunCreate,
    RunSummary,
    Trajectory,
)
from ldpem.server.health import RoundView, RunHealth, assess, round_views
from ldpem.server.policy import NOISE_FLOOR_RTOL, implied_epsilon, noise_floor
from ldpem.server.refusals import NotFound, shown_run
from ldpem.server.store import HospitalRow, ReportRow, RunRow, Store

__all__ = [
    "RunView",
    "get_run",
    "health",
    "identity",
    "params_of",
    "participation",
    "request_of",
    "round_info",
    "rounds",
    "run_view",
    "summary",
    "trajectory",
]


def get_run(store: Store, run_id: str) -> RunRow:
    """The run ``run_id``; NotFound when there is none."""
    run = store.get_run(run_id)
    if run is None:
        raise NotFound(f"no run {shown_run(run_id)}")
    return run


def params_of(run: RunRow) -> PublicParameters:
    return _parsed_params(run.params)


def request_of(run: RunRow) -> RunCreate:
    return _parsed_request(run.request)


# A run's stored parameters and request never change, and their models are frozen, so one
# parse serves every report: parsing a request that enrols 1,000 hospitals on each report
# made a round O(hospitals²) (docs/PERFORMANCE.md, section 10).
@lru_cache(maxsize=256)
def _parsed_params(text: str) -> PublicParameters:
    return PublicParameters.model_validate_json(text)


@lru_cache(maxsize=256)
def _parsed_request(text: str) -> RunCreate:
    return RunCreate.model_validate_json(text)


@lru_cache(maxsize=256)
def _parsed_forecast(text: str) -> Forecast:
    return Forecast.model_validate_json(text)


def summary(store: Store, run: RunRow) -> RunSummary:
    params = params_of(run)
    return RunSummary(
        run_id=run.id,
        status=run.status,
        round=run.current_round,
        rounds=params.rounds,
        model=params.model,
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
        forecast=None if run.forecast is None else _parsed_forecast(run.forecast),
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
    get_run(store, run_id)
    return [
        RoundSummary(
            round=r.t,
            status=r.status,
            opened_at=r.opened_at,
            deadline=r.deadline,
            closed_at=r.closed_at,
            reporters=sorted(r.reporters),
            count=sum(p.count for p in r.reports),
            beta=r.beta,
            beta_next=r.beta_next,
        )
        for r in _views(store, run_id)
    ]


def _views(
    store: Store, run_id: str, reports: Sequence[ReportRow] | None = None
) -> list[RoundView]:
    """The run's rounds with their reports (``reports``: the run's, when read already)."""
    if reports is None:
        reports = store.reports(run_id)
    return round_views(store.rounds(run_id), reports)


def trajectory(store: Store, run_id: str) -> Trajectory:
    run = get_run(store, run_id)
    return _trajectory(run, _views(store, run_id, reports=()))  # β only: no reports read


def _trajectory(run: RunRow, views: Sequence[RoundView]) -> Trajectory:
    betas = [r.beta for r in views]
    if run.status == "finished" and views and views[-1].beta_next is not None:
        betas.append(views[-1].beta_next)
    steps = [
        float(np.linalg.norm(np.subtract(r.beta_next, r.beta)))
        for r in views
        if r.beta_next is not None
    ]
    return Trajectory(run_id=run.id, betas=betas, steps=steps)


def participation(store: Store, run_id: str) -> list[HospitalParticipation]:
    """Per hospital: the rounds it reported and the weakest noise it declared, with the
    ε per record that noise implies (``weaker`` when below the run's budget)."""
    run = get_run(store, run_id)
    return _participation(run, store.hospitals(run_id), store.reports(run_id))


def _participation(
    run: RunRow, hospitals: Sequence[HospitalRow], reports: Sequence[ReportRow]
) -> list[HospitalParticipation]:
    params = params_of(run)
    by_hospital: dict[str, list[ReportRow]] = {}
    for p in reports:
        by_hospital.setdefault(p.hospital, []).append(p)
    out = []
    for h in hospitals:
        mine = by_hospital.get(h.name, [])
        noise_std: float | None = None
        epsilon: float | None = None
        weaker = False
        for p in mine:  # the report with the largest ε is the hospital's guarantee
            spent = implied_epsilon(params.mechanism, params, p.noise_std, h.records)
            if spent is not None and (epsilon is None or spent > epsilon):
                noise_std, epsilon = p.noise_std, spent
            floor = noise_floor(params.mechanism, params, h.records)
            weaker = weaker or p.noise_std < floor * (1.0 - NOISE_FLOOR_RTOL)
        out.append(
            HospitalParticipation(
                hospital=h.name,
                records=h.records,
                rounds_reported=[p.t for p in mine],
                last_report_at=max((p.received_at for p in mine), default=None),
                noise_std=noise_std,
                epsilon=epsilon,
                weaker=weaker,
            )
        )
    return out


def health(store: Store, run: RunRow, now: float) -> RunHealth:
    """The run's health at ``now`` (``ldpem.server.health``)."""
    return _health(run, _views(store, run.id), store.hospitals(run.id), now)


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


def run_view(store: Store, run_id: str, now: float) -> RunView:
    """The run ``run_id`` as its status page shows it; its reports, the largest table,
    are read once for all of it."""
    run = get_run(store, run_id)
    hospitals = store.hospitals(run_id)
    reports = store.reports(run_id)
    views = _views(store, run_id, reports)
    return RunView(
        summary=summary(store, run),
        params=params_of(run),
        request=request_of(run),
        trajectory=_trajectory(run, views),
        rounds=views,
        participation=_participation(run, hospitals, reports),
        health=_health(run, views, hospitals, now),
        now=now,
    )
