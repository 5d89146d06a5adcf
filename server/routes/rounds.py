"""The round protocol: who am I, long-poll for the open round, post a report."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request

from ldpem.common.wire import INT_LIMIT, Identity, ReportAck, ReportIn, RoundInfo
from ldpem.server.bodies import StrictJSONRoute
from ldpem.server.deps import CoordinatorDep, HospitalDep, OptionalTokenDep

router = APIRouter(tags=["rounds"], route_class=StrictJSONRoute)


@router.get("/me", response_model=Identity)
async def me(coordinator: CoordinatorDep, hospital: HospitalDep) -> Identity:
    """The run and enrolment a hospital token belongs to."""
    return coordinator.identity(hospital)


@router.get("/runs/{run_id}/round", response_model=RoundInfo)
async def open_round(
    run_id: str,
    request: Request,
    coordinator: CoordinatorDep,
    token: OptionalTokenDep,
    after: Annotated[int, Query(ge=-1, lt=INT_LIMIT)] = -1,
    wait: Annotated[float, Query(ge=0, allow_inf_nan=False)] = 0.0,
) -> RoundInfo:
    """β^t and the public parameters of the open round. Long-poll: with ``after`` = t and
    ``wait`` > 0, answers as soon as a round later than t opens or the run ends, or after
    ``wait`` seconds (capped by the server) with the current state."""
    hospital = coordinator.hospital_for(token)
    if not coordinator.is_admin(token) and (hospital is None or hospital.run_id != run_id):
        raise HTTPException(
            401,
            "a hospital token of this run (or the admin token) is needed",
            {"WWW-Authenticate": "Bearer"},
        )
    wait = min(wait, request.app.state.settings.max_wait)
    return await coordinator.wait_round(run_id, after, wait)


@router.post("/runs/{run_id}/rounds/{t}/reports", response_model=ReportAck)
async def post_report(
    run_id: str,
    t: Annotated[int, Path(ge=0, lt=INT_LIMIT)],
    report: ReportIn,
    coordinator: CoordinatorDep,
    hospital: HospitalDep,
) -> ReportAck:
    """Accept one hospital's report for round t; 200 only once it is committed to disk.
    The same report again is an idempotent success (``duplicate: true``)."""
    return await coordinator.submit_report(run_id, t, hospital, report)
