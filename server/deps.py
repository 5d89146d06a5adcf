"""FastAPI dependencies: the coordinator of the app, and who is calling (bearer tokens).

They are ``async def`` so that FastAPI runs them on the event loop: a plain ``def``
dependency is sent to a worker thread, a hand-off that cost more than the work.

Reading run state (the read API, the status pages, ``/metrics``) needs the read token or
the admin token unless the coordinator was started with ``--public-status``; hospital
tokens reach only what an agent needs (``/v1/me``, the round long-poll, its reports).
The HTML pages also take the token from ``?token=`` or the ``ldpem_read`` cookie so that a
browser can open them (docs/FEDERATED.md, "Who may read").
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from ldpem.server.coordinator import Coordinator, hash_token
from ldpem.server.store import HospitalRow

__all__ = [
    "READ_COOKIE",
    "AdminDep",
    "CoordinatorDep",
    "HospitalDep",
    "OptionalTokenDep",
    "ReaderDep",
    "can_read",
    "get_coordinator",
    "hospital_of",
    "page_token",
]

#: Cookie holding the read (or admin) token of a browser that opened a page with ?token=.
READ_COOKIE = "ldpem_read"


async def get_coordinator(request: Request) -> Coordinator:
    coordinator: Coordinator = request.app.state.coordinator
    return coordinator


CoordinatorDep = Annotated[Coordinator, Depends(get_coordinator)]


def _bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def bearer_token(authorization: Annotated[str | None, Header()] = None) -> str | None:
    return _bearer(authorization)


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


async def hospital_of(request: Request) -> tuple[Coordinator, HospitalRow]:
    """The coordinator and the hospital whose token ``request`` bears, as ``HospitalDep``
    (the same 401s), for the routes served without dependency injection."""
    coordinator = await get_coordinator(request)
    token = _bearer(request.headers.get("authorization"))
    return coordinator, await require_hospital(coordinator, token)


def can_read(request: Request, token: str | None) -> bool:
    """Whether ``token`` may read run state: anyone under ``public_status``, otherwise the
    holder of the read token or of the admin token (compared in constant time)."""
    if request.app.state.settings.public_status:
        return True
    if not token:
        return False
    read_hash: str | None = request.app.state.read_token_hash
    if read_hash is not None and hmac.compare_digest(hash_token(token), read_hash):
        return True
    coordinator: Coordinator = request.app.state.coordinator
    return coordinator.is_admin(token)


async def require_reader(request: Request, token: OptionalTokenDep) -> None:
    if can_read(request, token):
        return
    if token is None:
        raise HTTPException(
            401,
            "missing bearer token (Authorization: Bearer <read token or admin token>)",
            _CHALLENGE,
        )
    raise HTTPException(403, "this token may not read run state", _CHALLENGE)


ReaderDep = Depends(require_reader)


def page_token(request: Request, bearer: str | None) -> tuple[str | None, bool]:
    """The token of a page request, from the Authorization header, ``?token=`` or the
    cookie (in that order), and whether it came from the query string."""
    if bearer is not None:
        return bearer, False
    query = request.query_params.get("token")
    if query:
        return query, True
    return request.cookies.get(READ_COOKIE) or None, False
