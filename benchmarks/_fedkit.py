"""Shared pieces of the benchmarks: real coordinator/agent processes and machine facts.

Not a benchmark itself. The processes are started exactly as an operator would start them
(``python -m ldpem coordinator …``, ``python -m ldpem client …``) and always stopped, by
their process id, when the benchmark ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ADMIN = "bench-admin-" + secrets.token_urlsafe(16)


def machine() -> dict[str, Any]:
    """Where and when the figures were taken (load average included: the machine is shared)."""
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "machine": platform.machine(),
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "loadavg": list(os.getloadavg()),
    }


def summary(values: Sequence[float]) -> dict[str, float]:
    """median, p99, min, max and mean of ``values`` (p99 by nearest rank)."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}
    rank = min(len(ordered) - 1, max(0, math.ceil(0.99 * len(ordered)) - 1))
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p99": ordered[rank],
        "min": ordered[0],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak resident set) of a live process, in KiB, from /proc."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Processes:
    """Child ``python -m ldpem`` processes; ``stop`` ends those still running, by pid."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Any:
        with (self.logs / f"{name}.log").open("wb") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "ldpem", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.children.append((name, child))
        return child

    def failed(self) -> str | None:
        for name, child in self.children:
            if child.poll() not in (None, 0):
                text = (self.logs / f"{name}.log").read_text(errors="replace").strip()
                last = text.splitlines()[-1] if text else "(no output)"
                return f"{name} exited with status {child.returncode}: {last}"
        return None

    def wait(self, names: Sequence[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for name, child in self.children:
            if name in names:
                child.wait(max(0.1, deadline - time.monotonic()))

    def stop(self) -> None:
        for _, child in self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 5
        for _, child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(max(0.0, deadline - time.monotonic()))
            if child.poll() is None:
                child.kill()
                child.wait()


def start_coordinator(
    processes: Processes, state: Path, *, tick: float = 0.05, env: dict[str, str] | None = None
) -> tuple[Any, str]:
    """Start ``ldpem coordinator`` on a free port; returns (process, base URL) once healthy."""
    port = free_port()
    child = processes.start(
        "coordinator",
        ["coordinator", "--port", str(port), "--state", str(state), "--log-level", "warning"],
        {
            "LDPEM_ADMIN_TOKEN": ADMIN,
            "LDPEM_TICK": str(tick),
            "LDPEM_PUBLIC_STATUS": "1",  # the benchmarks read rounds without a token
            **(env or {}),
        },
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    with httpx.Client(base_url=url, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise RuntimeError(processes.failed() or "the coordinator exited")
            with contextlib.suppress(httpx.TransportError):
                if client.get("/healthz").status_code == 200:
                    return child, url
            time.sleep(0.02)
    raise RuntimeError("the coordinator did not become healthy within 120 s")


def create_run(url: str, request: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{url}/v1/runs",
        json=request,
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=300.0,
    )
    if response.status_code != 201:
        raise RuntimeError(f"run refused: {response.status_code} {response.text}")
    created: dict[str, Any] = response.json()
    return created


def wait_finished(url: str, run_id: str, processes: Processes, timeout: float) -> dict[str, Any]:
    """Long-poll (admin token) until the run ends; fails fast if a process dies."""
    deadline = time.monotonic() + timeout
    after = -1
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60.0) as client:
        while True:
            info: dict[str, Any] = client.get(
                f"/v1/runs/{run_id}/round", params={"after": after, "wait": 1.0}
            ).json()
            if info["status"] != "running":
                return info
            after = max(after, int(info["round"]))
            problem = processes.failed()
            if problem is not None:
                raise RuntimeError(problem)
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id} did not finish within {timeout:.0f} s")


def rounds(url: str, run_id: str) -> list[dict[str, Any]]:
    """``GET /v1/runs/{id}/rounds``: per round its opened_at and closed_at (server clock)."""
    answer: list[dict[str, Any]] = httpx.get(f"{url}/v1/runs/{run_id}/rounds", timeout=60.0).json()
    return answer


def write_hospital_files(
    workdir: Path, x: np.ndarray, sizes: Sequence[int]
) -> list[tuple[str, Path, int]]:
    """Split the (n, d) table into per-hospital .npy files: [(name, path, records)]."""
    out, start = [], 0
    for i, size in enumerate(sizes):
        path = workdir / f"h{i + 1}" / "records.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, x[start : start + size])
        out.append((f"h{i + 1}", path, int(size)))
        start += size
    return out


def start_agents(
    processes: Processes,
    url: str,
    hospitals: Sequence[tuple[str, Path, int]],
    tokens: dict[str, str],
    *,
    epsilon: float,
    delta: float,
    seed: int = 0,
) -> None:
    for i, (name, path, _) in enumerate(hospitals):
        token_file = path.parent / "token"
        token_file.write_text(tokens[name])
        token_file.chmod(0o600)
        processes.start(
            name,
            [
                "client",
                "--coordinator",
                url,
                "--token-file",
                str(token_file),
                "--data",
                str(path),
                "--state",
                str(path.parent / "state"),
                "--epsilon",
                str(epsilon),
                "--delta",
                repr(delta),
                "--seed",
                str(seed + i + 1),
                "--log-level",
                "warning",
            ],
        )
