"""FastAPI dependencies: the coordinator of the app, and who is calling (bearer tokens).

They are ``async def`` so that FastAPI runs them on the event loop: a plain ``def``
dependency is sent to a worker thread, a hand-off that cost more than the work.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from ldpem.server.coordinator import Coordinator
from ldpem.server.store import HospitalRow

__all__ = ["AdminDep", "CoordinatorDep", "HospitalDep", "OptionalTokenDep", "get_coordinator"]


async def get_coordinator(request: Request) -> Coordinator:
    coordinator: Coordinator = request.app.state.coordinator
    return coordinator


CoordinatorDep = Annotated[Coordinator, Depends(get_coordinator)]


async def bearer_token(authorization: Annotated[str | None, Header()] = None) -> str | None:
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


OptionalTokenDep = Annotated[str | None, Depends(bearer_token)]

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def require_admin(coordinator: CoordinatorDep, token: OptionalTokenDep) -> None:
    if token is None:
        raise HTTPException(
            401, "missing bearer token (Authorization: Bearer <admin token>)", _CHALLENGE
        )
    if not coordinator.is_admin(token):
        raise HTTPException(403, "this token is not the admin token", _CHALLENGE)


AdminDep = Annotated[None, Depends(require_admin)]


async def require_hospital(coordinator: CoordinatorDep, token: OptionalTokenDep) -> HospitalRow:
    if token is None:
        raise HTTPException(
            401, "missing bearer token (Authorization: Bearer <hospital token>)", _CHALLENGE
        )
    hospital = coordinator.hospital_for(token)
    if hospital is None:
        raise HTTPException(401, "unknown token", _CHALLENGE)
    return hospital


HospitalDep = Annotated[HospitalRow, Depends(require_hospital)]
