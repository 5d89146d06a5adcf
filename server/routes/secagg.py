"""Secure aggregation of a round (docs/FEDERATED.md): a holder posts its message of each
step and long-polls the aggregator's answer to the step. The work is
``ldpem.server.secagg.rounds``'s; its refusals are mapped in ``ldpem.server.app``.

These two routes carry every message of every holder of a secagg run, five requests
per holder per round, so they are plain Starlette routes served ahead of the
API's others: FastAPI's per-request dependency solving and parameter validation cost more
than the step's own work at K = 1000 (docs/PERFORMANCE.md, "Where the coordinator's CPU
goes"). Their inputs are checked here instead, with the same one-line 4xx refusals, and
their OpenAPI description is written out below (``OPENAPI_PATHS``) so that the schema, its
documentation and the fuzz tests still cover them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from ldpem.common.secagg.steps import ANSWERS, HOLDER_STEPS, Step
from ldpem.common.wire import API_PREFIX, INT_LIMIT
from ldpem.common.wire.secagg import SECAGG_ANSWER_HEADER
from ldpem.server.bodies import parse_json_body
from ldpem.server.coordinator import Coordinator
from ldpem.server.deps import hospital_of
from ldpem.server.settings import Settings
from ldpem.server.store import HospitalRow

__all__ = ["OPENAPI_PATHS", "add_routes"]

#: The steps a holder posts a message in (the path segment ``{step}``).
STEPS = tuple(step.value for step in HOLDER_STEPS)
#: What a holder fetches after each step: the participant list, its share bundle, the
#: survivor set to sign (consistency check), the unmasking request.
_FETCHED: dict[str, Step] = {answer: step for step, answer in ANSWERS.items()}
_ROUND = API_PREFIX + "/runs/{run_id}/rounds/{t}/secagg"
_DIGITS = re.compile(r"[0-9]{1,19}")
_ACCEPTED = json.dumps({"status": "accepted"}).encode()


def _round(request: Request) -> int:
    """Path parameter ``t``: a round number, 0 ≤ t < INT_LIMIT (ASCII digits only)."""
    text: str = request.path_params["t"]
    if _DIGITS.fullmatch(text) is None or int(text) >= INT_LIMIT:
        raise HTTPException(422, f"path parameter t must be an integer in [0, {INT_LIMIT})")
    return int(text)


def _one_of(request: Request, name: str, choices: Any) -> str:
    value: str = request.path_params[name]
    if value not in choices:
        raise HTTPException(422, f"path parameter {name} must be one of {', '.join(choices)}")
    return value


def _wait(request: Request) -> float:
    """Query parameter ``wait``: seconds ≥ 0 (default 0), capped by the server's max_wait."""
    text = request.query_params.get("wait")
    try:
        wait = 0.0 if text is None else float(text)
    except ValueError:
        wait = math.nan
    if not (math.isfinite(wait) and wait >= 0):
        raise HTTPException(422, "query parameter wait must be a finite number of seconds ≥ 0")
    settings: Settings = request.app.state.settings
    return min(wait, settings.max_wait)


def _then(request: Request, step: Step) -> str | None:
    """Query parameter ``then``: the answer to ``step`` to wait for, or None."""
    then = request.query_params.get("then")
    if then is not None and _FETCHED.get(then) != step:
        answers = [name for name, answered in _FETCHED.items() if answered == step]
        raise HTTPException(
            422, f"query parameter then must be {' or '.join(answers) or 'absent'} after {step}"
        )
    return then


async def post_message(request: Request) -> Response:
    """A holder's message of ``step`` (KeyAdvertisement, EncryptedShares, MaskedInput,
    SurvivorSignature, UnmaskResponse as ``to_dict``); the same message again is accepted.

    With ``then`` (the step's answer: participants after advertise, and so on) the request
    goes on as that answer's long-poll: 200 with the answer and ``Ldpem-Answer: <then>``
    once the step closed, 202 (accepted, the step still open) after ``wait`` seconds. One
    request a step instead of two, the answer being what ``GET …/{then}`` gives."""
    coordinator, hospital = await hospital_of(request)
    t, step = _round(request), Step(_one_of(request, "step", STEPS))
    then, wait = _then(request, step), _wait(request)
    run_id: str = request.path_params["run_id"]
    message = (coordinator, hospital, run_id, t, step)
    # Parsed in a call of its own: the parsed body is gone before the long-poll below, in
    # which a thousand holders may wait at once.
    await _receive(request, *message)
    if then is None:
        return Response(content=_ACCEPTED, media_type="application/json")
    return await _answer(*message, wait=wait, headers={SECAGG_ANSWER_HEADER: then})


async def _receive(
    request: Request,
    coordinator: Coordinator,
    hospital: HospitalRow,
    run_id: str,
    t: int,
    step: Step,
) -> None:
    """Hand the request's body, a holder's message of ``step``, to the round."""
    raw = await request.body()
    try:
        body = parse_json_body(raw)  # strict: UTF-8, no duplicate key
    except json.JSONDecodeError as error:
        raise HTTPException(422, f"body: not valid JSON ({error.msg})") from None
    if not isinstance(body, dict):
        raise HTTPException(422, "body must be a JSON object")
    text = raw.decode()  # stored as sent: no re-encoding of a parsed message
    committed = coordinator.secagg.receive(
        run_id, t, hospital.name, hospital.run_id, step, body, text
    )
    await committed  # answered only once stored: a restart replays it


async def get_message(request: Request) -> Response:
    """The aggregator's answer once its step closed; 202 while it is open (long-poll up to
    ``wait`` seconds, capped by the server)."""
    coordinator, hospital = await hospital_of(request)
    t, fetched, wait = _round(request), _one_of(request, "fetched", _FETCHED), _wait(request)
    run_id: str = request.path_params["run_id"]
    answered = (coordinator, hospital, run_id, t, _FETCHED[fetched])
    return await _answer(*answered, wait=wait, headers={})


async def _answer(
    coordinator: Coordinator,
    hospital: HospitalRow,
    run_id: str,
    t: int,
    step: Step,
    *,
    wait: float,
    headers: dict[str, str],
) -> Response:
    """The answer to ``step`` once it closed (waiting up to ``wait`` s); 202 until then."""
    answer = await coordinator.secagg.wait(run_id, t, hospital.name, hospital.run_id, step, wait)
    if answer is None:
        return JSONResponse({"detail": "the step is still open"}, status_code=202)
    # Encoded once when the step closed, not re-encoded per request (docs/PERFORMANCE.md).
    return Response(content=answer, media_type="application/json", headers=headers)


def add_routes(router: APIRouter) -> None:
    """Serve the two routes on ``router`` (the app's own, ahead of the others: they are
    matched first, being the most frequent)."""
    router.add_route(f"{_ROUND}/{{step}}", post_message, methods=["POST"], name="secagg_post")
    router.add_route(f"{_ROUND}/{{fetched}}", get_message, methods=["GET"], name="secagg_get")


def _parameter(name: str, where: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path", "schema": schema}


def _operation(summary: str, name: str, choices: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    detail = {"application/json": {"schema": {"type": "object"}}}
    refusals = {
        str(code): {"description": text, "content": detail}
        for code, text in (
            (401, "no or an unknown hospital token"),
            (403, "the token belongs to another hospital or run"),
            (404, "no such run"),
            (409, "the step or round is not open for this hospital"),
            (422, "a malformed parameter or message (one-line detail)"),
        )
    }
    parameters = [
        _parameter("run_id", "path", {"type": "string"}),
        _parameter("t", "path", {"type": "integer", "minimum": 0, "maximum": INT_LIMIT - 1}),
        _parameter(name, "path", {"type": "string", "enum": list(choices)}),
    ]
    return {
        "tags": ["secagg"],
        "summary": summary,
        "parameters": parameters + extra.pop("query", []),
        "responses": {"200": {"description": "OK", "content": detail}, **refusals},
        **extra,
    }


#: The two routes' OpenAPI path items (added to the app's schema by ``create_app``).
OPENAPI_PATHS: dict[str, Any] = {
    f"{_ROUND}/{{step}}": {
        "post": _operation(
            "A holder's message of one step",
            "step",
            STEPS,
            operationId="secagg_post_message",
            query=[
                _parameter("then", "query", {"type": "string", "enum": list(_FETCHED)}),
                _parameter("wait", "query", {"type": "number", "minimum": 0, "default": 0}),
            ],
            requestBody={
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
        ),
    },
    f"{_ROUND}/{{fetched}}": {
        "get": _operation(
            "The aggregator's answer to a step (202 while it is open)",
            "fetched",
            tuple(_FETCHED),
            operationId="secagg_get_message",
            query=[_parameter("wait", "query", {"type": "number", "minimum": 0, "default": 0})],
        ),
    },
}
