"""Strict parsing of JSON request bodies: ``StrictJSONRoute`` for the API's routers.

Python's ``json`` module, which FastAPI uses, is lenient where a protocol must not be: a
duplicate key silently keeps the last value (so a proxy and the coordinator may read two
different reports from the same bytes), invalid UTF-8 and deep nesting escape as generic
exceptions. Here each is a 422 with a one-line ``detail``. Non-finite literals (``NaN``,
``Infinity``, ``1e999``) are parsed and then refused by the strict schemas of
``ldpem.common.wire``, which name the field they are in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

__all__ = ["StrictJSONRequest", "StrictJSONRoute", "parse_json_body"]


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def parse_json_body(body: bytes) -> Any:
    """The JSON value of ``body``; HTTPException 422 (one line) when it is not UTF-8, has a
    duplicate key, nests too deeply or holds an integer too long to parse.
    ``json.JSONDecodeError`` passes through (FastAPI reports it as invalid JSON)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise HTTPException(
            422, f"body: not valid UTF-8 (byte {error.start} cannot be decoded)"
        ) from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError:
        raise
    except _DuplicateKeyError as error:
        shown = ascii(error.key[:24]) + ("…" if len(error.key) > 24 else "")
        raise HTTPException(422, f"body: duplicate key {shown}") from None
    except RecursionError:
        raise HTTPException(422, "body: JSON nested too deeply") from None
    except ValueError:  # an integer literal beyond int's digit limit
        raise HTTPException(422, "body: a number has too many digits") from None


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json_body(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """An APIRoute whose JSON body is parsed by ``parse_json_body``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
