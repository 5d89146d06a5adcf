"""Waiting for a run's accuracy forecast in its status (``GET /v1/runs/{id}``), whether the
coordinator answers ``run create`` with it or adds it once simulated."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.fedkit import admin_headers

__all__ = ["wait_for_forecast"]


def wait_for_forecast(url: str, run_id: str, *, timeout: float = 180.0) -> dict[str, Any]:
    """The run's status once it holds a forecast. AssertionError, with the status, as soon
    as its warning says ``no accuracy forecast: …``, or when none arrives within
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = httpx.get(
            f"{url}/v1/runs/{run_id}", headers=admin_headers(), timeout=30
        ).json()
        if status.get("forecast") is not None:
            return status
        if "no accuracy forecast" in (status.get("warning") or "") or time.monotonic() > deadline:
            raise AssertionError(f"no forecast (waited up to {timeout:.0f} s): {status}")
        time.sleep(0.2)
