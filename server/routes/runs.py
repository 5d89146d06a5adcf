"""Runs: create and cancel (admin), list and inspect (read token, admin token or
--public-status)."""

from __future__ import annotations

from fastapi import APIRouter

from ldpem.common.wire import (
    HospitalParticipation,
    RoundSummary,
    RunCancel,
    RunCreate,
    RunCreated,
    RunSummary,
    Trajectory,
)
from ldpem.server.bodies import StrictJSONRoute
from ldpem.server.deps import AdminDep, CoordinatorDep, ReaderDep

router = APIRouter(prefix="/runs", tags=["runs"], route_class=StrictJSONRoute)


@router.post("", status_code=201, response_model=RunCreated)
async def create_run(request: RunCreate, coordinator: CoordinatorDep, _: AdminDep) -> RunCreated:
    """Create a run (admin token). The response states the accuracy to expect and carries
    the hospital tokens the coordinator generated; they are not shown again."""
    return await coordinator.create_run(request)


@router.post("/{run_id}/cancel", response_model=RunSummary)
async def cancel_run(
    run_id: str, cancel: RunCancel, coordinator: CoordinatorDep, _: AdminDep
) -> RunSummary:
    """End a running run as ``cancelled`` with the operator's reason (admin token); its
    agents stop. 409 when the run ended already."""
    return coordinator.cancel_run(run_id, cancel.reason)


@router.post("/{run_id}/resume", response_model=RunSummary)
async def resume_run(run_id: str, coordinator: CoordinatorDep, _: AdminDep) -> RunSummary:
    """Set a paused run running again (admin token): a secure-aggregation run pauses after
    repeated rounds lost to faults nobody can be named for (docs/SECAGG.md). 409 unless
    it is paused."""
    return coordinator.resume_run(run_id)


@router.get("", dependencies=[ReaderDep], response_model=list[RunSummary])
async def list_runs(coordinator: CoordinatorDep) -> list[RunSummary]:
    return coordinator.list_runs()


@router.get("/{run_id}", dependencies=[ReaderDep], response_model=RunSummary)
async def get_run(run_id: str, coordinator: CoordinatorDep) -> RunSummary:
    return coordinator.summary(run_id)


@router.get("/{run_id}/rounds", dependencies=[ReaderDep], response_model=list[RoundSummary])
async def get_rounds(run_id: str, coordinator: CoordinatorDep) -> list[RoundSummary]:
    return coordinator.rounds(run_id)


@router.get("/{run_id}/trajectory", dependencies=[ReaderDep], response_model=Trajectory)
async def get_trajectory(run_id: str, coordinator: CoordinatorDep) -> Trajectory:
    return coordinator.trajectory(run_id)


@router.get(
    "/{run_id}/participation", dependencies=[ReaderDep], response_model=list[HospitalParticipation]
)
async def get_participation(
    run_id: str, coordinator: CoordinatorDep
) -> list[HospitalParticipation]:
    """Which rounds each hospital reported in (never the reports themselves)."""
    return coordinator.participation(run_id)
