"""Shared pieces of the benchmarks: real coordinator/agent processes and machine facts.

Not a benchmark itself. The processes are ``ldpem.processes``' (the demo's and the tests'
process manager): started exactly as an operator would start them (``python -m ldpem
coordinator …``, ``python -m ldpem client …``) and always stopped, by their process id,
when the benchmark ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import secrets
import statistics
import subprocess
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from ldpem.processes import Processes, start_agent
from ldpem.processes import start_coordinator as processes_start_coordinator

__all__ = [
    "ADMIN",
    "Processes",
    "cpu_seconds",
    "create_run",
    "machine",
    "memory_kib",
    "rounds",
    "start_agents",
    "start_coordinator",
    "summary",
    "wait_finished",
    "write_hospital_files",
]

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


def start_coordinator(
    processes: Processes, state: Path, *, tick: float = 0.05, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``ldpem coordinator`` on a free port; returns (process, base URL) once healthy."""
    return processes_start_coordinator(
        processes,
        state=state,
        env={
            "LDPEM_ADMIN_TOKEN": ADMIN,
            "LDPEM_TICK": str(tick),
            "LDPEM_PUBLIC_STATUS": "1",  # the benchmarks read rounds without a token
            **(env or {}),
        },
        timeout=120.0,
    )


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


def wait_finished(
    url: str, run_id: str, processes: Processes, timeout: float, *, until: int | None = None
) -> dict[str, Any]:
    """Long-poll (admin token) until the run ends (or round ``until`` opens); fails fast if
    a process dies."""
    deadline = time.monotonic() + timeout
    after = -1
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60.0) as client:
        while True:
            info: dict[str, Any] = client.get(
                f"/v1/runs/{run_id}/round", params={"after": after, "wait": 1.0}
            ).json()
            if info["status"] != "running" or (until is not None and info["round"] >= until):
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
    model: str = "gmm",
) -> None:
    for i, (name, path, _) in enumerate(hospitals):
        start_agent(
            processes,
            name,
            url=url,
            token=tokens[name],
            model=model,
            data=path,
            state=path.parent / "state",
            args=["--epsilon", str(epsilon), "--delta", repr(delta), "--seed", str(seed + i + 1)],
        )
