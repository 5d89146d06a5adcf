"""Load: one coordinator process, 1,000 hospitals reporting in the same round from async
clients in this process. Every report is acknowledged exactly once (200, not a duplicate;
the same report again is a duplicate), the round closes on the last one, β moves by the
M-step of the 1,000 reports, and the durable rate (acknowledged after commit) and the
coordinator's peak memory (VmHWM) are printed for docs/RELIABILITY.md."""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ldpem.common.wire import expected_round_count
from ldpem.processes import Processes
from tests.reliability.kit import Cluster

pytestmark = pytest.mark.slow

HOSPITALS = 1000
RECORDS = 4
ROUNDS = 2
D = 2
CONCURRENCY = 100


def token(i: int) -> str:
    return f"load-test-token-{i:04d}-abcdefghijklmnopqrstuvwxyz"


def report(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    return {
        "hospital": f"h{i:04d}",
        "round": 0,
        "mechanism": "local",
        "count": expected_round_count(RECORDS, ROUNDS, 0),
        "total": [float(v) for v in rng.uniform(-0.5, 0.5, D)],
        "noise_std": 10.0,  # above the run's σ_r (8.87): a lower one is refused as weaker
    }


async def send_all(url: str, run_id: str) -> tuple[Counter[str], float, list[float]]:
    outcome: Counter[str] = Counter()
    latencies: list[float] = []
    semaphore = asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=300) as client:

        async def one(i: int) -> None:
            # As an agent does: a connection error is retried with the same bytes, so a
            # report whose answer was lost comes back as a duplicate of the committed one.
            retried = False
            async with semaphore:
                started = time.monotonic()
                for attempt in range(8):
                    try:
                        response = await client.post(
                            f"/v1/runs/{run_id}/rounds/0/reports",
                            content=json.dumps(report(i)).encode(),
                            headers={
                                "Authorization": f"Bearer {token(i)}",
                                "Content-Type": "application/json",
                            },
                        )
                        break
                    except httpx.TransportError:
                        outcome["connection errors, retried"] += 1
                        retried = True
                        await asyncio.sleep(0.2 * 2**attempt)
                else:
                    outcome["gave up"] += 1
                    return
                latencies.append(time.monotonic() - started)
            if response.status_code != 200:
                outcome[f"HTTP {response.status_code}"] += 1
            elif not response.json()["duplicate"]:
                outcome["accepted"] += 1
            else:
                outcome["accepted, answer lost" if retried else "duplicate"] += 1

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(HOSPITALS)))
        elapsed = time.monotonic() - started
    return outcome, elapsed, latencies


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def test_one_thousand_hospitals_in_one_round(procs: Processes, tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * CONCURRENCY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    cluster = Cluster(procs, tmp_path)
    server = cluster.start_coordinator()
    created = cluster.create(
        {
            "model": "gmm",
            "d": D,
            "sigma": 1.0,
            "rounds": ROUNDS,
            "seed": 7,
            "forecast": False,
            "round_deadline": 3600,
            "hospitals": [
                {"name": f"h{i:04d}", "records": RECORDS, "token": token(i)}
                for i in range(HOSPITALS)
            ],
        }
    )
    run_id = created["run_id"]
    rss_before = peak_rss_mib(server.pid)

    outcome, elapsed, latencies = asyncio.run(send_all(cluster.url, run_id))
    once = outcome["accepted"] + outcome["accepted, answer lost"]
    assert once == HOSPITALS, outcome
    assert set(outcome) <= {"accepted", "accepted, answer lost", "connection errors, retried"}
    rounds = cluster.get(f"/v1/runs/{run_id}/rounds")
    assert rounds[0]["status"] == "closed"
    assert sorted(rounds[0]["reporters"]) == [f"h{i:04d}" for i in range(HOSPITALS)]
    assert rounds[0]["count"] == HOSPITALS * expected_round_count(RECORDS, ROUNDS, 0)
    run = cluster.get(f"/v1/runs/{run_id}")
    assert run["round"] == 1 and run["status"] == "running"
    # β^1 = β^0 + η·Σ totals / Σ counts over exactly these 1,000 reports.
    totals = np.array([report(i)["total"] for i in range(HOSPITALS)])
    count = HOSPITALS * expected_round_count(RECORDS, ROUNDS, 0)
    expected = np.array(rounds[0]["beta"]) + totals.sum(axis=0) / count
    np.testing.assert_allclose(rounds[0]["beta_next"], expected, rtol=1e-12, atol=1e-15)

    # Every report again (a retry storm): each a duplicate, nothing counted twice.
    again, _, _ = asyncio.run(send_all(cluster.url, run_id))
    assert again["duplicate"] + again["accepted, answer lost"] == HOSPITALS, again
    assert again["accepted"] == 0, again
    assert cluster.get(f"/v1/runs/{run_id}/rounds")[0] == rounds[0]

    rss_peak = peak_rss_mib(server.pid)
    latencies.sort()
    print(
        f"load: {HOSPITALS} reports in {elapsed:.2f} s = {HOSPITALS / elapsed:.0f} durable "
        f"reports/s (concurrency {CONCURRENCY}); latency p50 {latencies[len(latencies) // 2]:.3f}"
        f" s, p99 {latencies[int(len(latencies) * 0.99)]:.3f} s; coordinator VmHWM "
        f"{rss_before:.0f} MiB before, {rss_peak:.0f} MiB after; {dict(outcome)}"
    )
