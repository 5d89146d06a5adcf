"""Helpers shared by the federated-run tests: app fixtures, run requests, a live server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from ldpem.server.settings import Settings

ADMIN = "admin-token-for-tests-0123456789"
TOKENS = [f"hospital-token-{i}-abcdefghijklmnop" for i in range(4)]


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def hospital_headers(i: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[i]}"}


def run_request(
    *, hospitals: int = 3, records: int = 100, d: int = 4, rounds: int = 5, **extra: Any
) -> dict[str, Any]:
    """A run request with known tokens; no forecast unless asked (it takes ~1 s)."""
    request: dict[str, Any] = {
        "model": "gmm",
        "d": d,
        "sigma": 1.0,
        "rounds": rounds,
        "seed": 11,
        "forecast": False,
        "hospitals": [
            {"name": f"h{i}", "records": records, "token": TOKENS[i]} for i in range(hospitals)
        ],
    }
    request.update(extra)
    return request


def settings(tmp_path: Path, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "admin_token": ADMIN,
        "state": tmp_path / "coordinator.sqlite",
        "tick": 0.05,
        "forecast_seeds": 2,
    }
    values.update(extra)
    return Settings(**values)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
