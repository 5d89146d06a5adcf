"""Secure aggregation of a round (docs/FEDERATED.md): a holder posts its message of each
step and long-polls the aggregator's answer to the step. The work is
``ldpem.server.secagg``'s; refusals are mapped in ``ldpem.server.app``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from ldpem.common.wire import INT_LIMIT
from ldpem.server.deps import CoordinatorDep, HospitalDep

router = APIRouter(tags=["secagg"])

Step = Literal["advertise", "shares", "masked", "signature", "unmask"]
#: What a holder fetches after each step: the participant list, its share bundle, the
#: survivor set to sign (consistency check), the unmasking request.
_FETCHED: dict[str, str] = {
    "participants": "advertise",
    "bundle": "shares",
    "consistency-check": "masked",
    "unmask-request": "signature",
}
Fetched = Literal["participants", "bundle", "consistency-check", "unmask-request"]
Round = Annotated[int, Path(ge=0, lt=INT_LIMIT)]


@router.post("/runs/{run_id}/rounds/{t}/secagg/{step}")
async def post_message(
    run_id: str,
    t: Round,
    step: Step,
    body: Annotated[dict[str, Any], Body()],
    coordinator: CoordinatorDep,
    hospital: HospitalDep,
) -> dict[str, str]:
    """A holder's message of ``step`` (KeyAdvertisement, EncryptedShares, MaskedInput,
    SurvivorSignature, UnmaskResponse as ``to_dict``); the same message again is accepted."""
    coordinator.secagg.receive(run_id, t, hospital.name, hospital.run_id, step, body)
    return {"status": "accepted"}


@router.get("/runs/{run_id}/rounds/{t}/secagg/{fetched}", response_model=None)
async def get_message(
    run_id: str,
    t: Round,
    fetched: Fetched,
    request: Request,
    coordinator: CoordinatorDep,
    hospital: HospitalDep,
    wait: Annotated[float, Query(ge=0, allow_inf_nan=False)] = 0.0,
) -> Response:
    """The aggregator's answer once its step closed; 202 while it is open (long-poll up to
    ``wait`` seconds, capped by the server)."""
    wait = min(wait, request.app.state.settings.max_wait)
    answer = await coordinator.secagg.wait(
        run_id, t, hospital.name, hospital.run_id, _FETCHED[fetched], wait
    )
    if answer is None:
        return JSONResponse({"detail": "the step is still open"}, status_code=202)
    # Encoded once when the step closed, not re-encoded per request (docs/PERFORMANCE.md).
    return Response(content=answer, media_type="application/json")
