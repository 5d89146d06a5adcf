"""Hostile clients against a real coordinator process, then an honest run on the same state.

Wrong, missing or malformed tokens, a valid token reporting for another hospital or another
run, reports for future and closed rounds (replays), oversized bodies (declared and
streamed), huge and non-finite values, reports outside the honest range, and floods of
them: each is refused with its 4xx and leaves the run unchanged — proved at the end by the
honest agents' run matching, bit for bit, the offline recomputation from their seeds.
No token (hospital or admin) appears in any response, nor in the coordinator's or the
agents' logs (at debug level).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.client.ledger import Ledger
from ldpem.common.wire import expected_round_count
from ldpem.processes import Processes
from tests.fedkit import (
    ADMIN,
    AGENT_BUDGET,
    TOKENS,
    run_request,
    settled,
    token_file,
    write_gmm_data,
)
from tests.reliability.kit import Cluster, check_exact_run

COUNTS = [100, 101, 102]
ROUNDS = 3
D = 4
OTHER = TOKENS[3]  # enrolled in a second run


def body(i: int = 0, t: int = 0, **change: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "hospital": f"h{i}",
        "round": t,
        "mechanism": "local",
        "count": expected_round_count(COUNTS[i], ROUNDS, t) if 0 <= t < ROUNDS else 1,
        "total": [0.5, -1.0, 2.0, 0.0],
        "noise_std": 3.5,  # above the run's σ_r (3.07): a lower one is refused as weaker
    }
    report.update(change)
    return report


class Probe:
    """Sends hostile requests; records every response text to check for token leaks."""

    def __init__(self, url: str, run_id: str) -> None:
        self.url = url
        self.run_id = run_id
        self.texts: list[str] = []
        self.statuses: Counter[int] = Counter()

    def snapshot(self) -> list[Any]:
        return [
            httpx.get(f"{self.url}/v1/runs/{self.run_id}{s}", timeout=30).json()
            for s in ("", "/rounds", "/participation", "/trajectory")
        ]

    def record(self, response: httpx.Response) -> httpx.Response:
        self.texts.append(response.text + json.dumps(dict(response.headers)))
        self.statuses[response.status_code] += 1
        return response

    def post(
        self, t: int, payload: Any, token: str | None, *, raw: bytes | None = None
    ) -> httpx.Response:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        content = raw if raw is not None else json.dumps(payload).encode()
        return self.record(
            httpx.post(
                f"{self.url}/v1/runs/{self.run_id}/rounds/{t}/reports",
                content=content,
                headers=headers,
                timeout=60,
            )
        )

    def refused(self, status: int, response: httpx.Response, *words: str) -> None:
        assert response.status_code == status, (response.status_code, response.text)
        detail = response.json()["detail"]
        if isinstance(detail, str):
            assert "\n" not in detail
            for word in words:
                assert word in detail, detail


def test_hostile_clients_change_nothing_and_tokens_never_leak(
    procs: Processes, tmp_path: Path
) -> None:
    paths, _ = write_gmm_data(tmp_path, COUNTS, D)
    cluster = Cluster(procs, tmp_path, log_level="debug")
    cluster.start_coordinator()
    request = run_request(d=D, rounds=ROUNDS, round_deadline=3600)
    request["hospitals"] = [
        {"name": f"h{i}", "records": c, "token": TOKENS[i]} for i, c in enumerate(COUNTS)
    ]
    created = cluster.create(request)
    other = run_request(hospitals=1, d=D, rounds=ROUNDS)
    other["hospitals"] = [{"name": "x0", "records": 100, "token": OTHER}]
    cluster.create(other)
    probe = Probe(cluster.url, created["run_id"])
    before = probe.snapshot()
    run_id = created["run_id"]

    # --- authentication ---------------------------------------------------------------
    probe.refused(401, probe.post(0, body(), None), "missing bearer token")
    probe.refused(401, probe.post(0, body(), "wrong-token-0123456789abcdef"), "unknown token")
    for header in ("Basic aDA6cGFzcw==", "Bearer", f"Token {TOKENS[0]}", f"Bearer{TOKENS[0]}"):
        response = probe.record(
            httpx.post(
                f"{cluster.url}/v1/runs/{run_id}/rounds/0/reports",
                json=body(),
                headers={"Authorization": header},
                timeout=60,
            )
        )
        probe.refused(401, response)
    probe.refused(401, probe.post(0, body(), ADMIN), "unknown token")  # admin cannot report
    # A valid token reporting for another hospital, or in another run.
    probe.refused(403, probe.post(0, body(1), TOKENS[0]), "belongs to hospital h0")
    probe.refused(403, probe.post(0, body(0, hospital="x0"), OTHER), "not enrolled")
    for path in ("/v1/me", f"/v1/runs/{run_id}/round"):
        probe.refused(401, probe.record(httpx.get(f"{cluster.url}{path}", timeout=30)))
        bad = {"Authorization": "Bearer wrong-token-0123456789abcdef"}
        probe.refused(401, probe.record(httpx.get(f"{cluster.url}{path}", headers=bad)))
    probe.refused(
        401,
        probe.record(
            httpx.get(
                f"{cluster.url}/v1/runs/{run_id}/round",
                headers={"Authorization": f"Bearer {OTHER}"},
            )
        ),
    )
    probe.refused(
        403,
        probe.record(
            httpx.post(
                f"{cluster.url}/v1/runs",
                json=request,
                headers={"Authorization": f"Bearer {TOKENS[0]}"},
            )
        ),
    )

    # --- rounds: future (not open), negative ----------------------------------------------
    probe.refused(409, probe.post(1, body(0, 1), TOKENS[0]), "not open")
    probe.refused(409, probe.post(ROUNDS + 5, body(0, ROUNDS + 5), TOKENS[0]), "not open")
    probe.refused(422, probe.post(-1, body(0, -1), TOKENS[0]))

    # --- bodies -----------------------------------------------------------------------
    big = b'{"hospital":"h0","round":0,"total":[' + b"1.0," * 400_000 + b"1.0]}"
    probe.refused(413, probe.post(0, None, TOKENS[0], raw=big), "larger than the limit")

    def chunks() -> Any:
        yield b'{"hospital":"h0","total":['
        for _ in range(300):
            yield b"1.0," * 2000
        yield b"1.0]}"

    streamed = probe.record(
        httpx.post(
            f"{cluster.url}/v1/runs/{run_id}/rounds/0/reports",
            content=chunks(),
            headers={"Authorization": f"Bearer {TOKENS[0]}", "Content-Type": "application/json"},
            timeout=60,
        )
    )
    probe.refused(413, streamed)
    probe.refused(422, probe.post(0, None, TOKENS[0], raw=b"{not json"))
    probe.refused(422, probe.post(0, None, TOKENS[0], raw=b"[]"))
    probe.refused(
        422, probe.post(0, body(total=[1.0] * (D + 1)), TOKENS[0]), "entries (the size of beta)"
    )
    probe.refused(422, probe.post(0, body(total=[]), TOKENS[0]))
    for literal in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
        raw = json.dumps(body()).replace("0.5", literal.decode()).encode()
        probe.refused(422, probe.post(0, None, TOKENS[0], raw=raw))
    probe.refused(422, probe.post(0, body(total=[1e300, 0.0, 0.0, 0.0]), TOKENS[0]), "honest")
    probe.refused(422, probe.post(0, body(total=[-1e6, 0.0, 0.0, 0.0]), TOKENS[0]), "honest")
    probe.refused(422, probe.post(0, body(count=10**12), TOKENS[0]), "enrolment")
    probe.refused(422, probe.post(0, body(count=-1), TOKENS[0]))
    probe.refused(422, probe.post(0, body(noise_std=0.0), TOKENS[0]))
    probe.refused(422, probe.post(0, body(noise_std=-1.0), TOKENS[0]))
    probe.refused(422, probe.post(0, body(mechanism="none", noise_std=0.0), TOKENS[0]))
    probe.refused(422, probe.post(0, body(round=1), TOKENS[0]))
    probe.refused(422, probe.post(0, body(hospital="h0" * 10_000), TOKENS[0]))
    assert probe.snapshot() == before

    # --- floods -------------------------------------------------------------------------
    flood = asyncio.run(_flood(cluster.url, run_id))
    assert all(400 <= s < 500 for s in flood), flood
    assert sum(flood.values()) >= 600
    assert httpx.get(f"{cluster.url}/healthz").status_code == 200
    assert probe.snapshot() == before

    # --- the honest run on the same state: unchanged by all of the above -----------------
    agents = [cluster.agent(i, p, wait=2, log_level="debug") for i, p in enumerate(paths)]
    for process in agents:
        assert process.wait(600) == 0, procs.log(process)[-3000:]
    check_exact_run(cluster, created, paths, COUNTS)
    # The run's confidence region is computed in the background once it finishes: the
    # state the replays below must leave unchanged is the settled one.
    with httpx.Client(base_url=cluster.url, timeout=30) as client:
        settled(client, run_id)
    final = probe.snapshot()

    # --- replays of old rounds ------------------------------------------------------------
    ledger = Ledger(tmp_path / "agent0")
    sent = ledger.entry(run_id, 0)
    ledger.close()
    assert sent is not None
    same = probe.post(0, None, TOKENS[0], raw=sent.body)
    assert same.status_code == 200 and same.json()["duplicate"] is True
    probe.refused(409, probe.post(0, body(0, 0), TOKENS[0]), "different contents")
    probe.refused(409, probe.post(1, body(0, 1), TOKENS[0]), "different contents")
    probe.refused(409, probe.post(ROUNDS, body(0, ROUNDS), TOKENS[0]), "not open")
    assert probe.snapshot() == final

    # --- no token anywhere ---------------------------------------------------------------
    logs = "".join(path.read_text(errors="replace") for path in tmp_path.glob("*.log"))
    assert "report from h0 accepted" in logs or "accepted" in logs  # the logs are real
    secrets = [ADMIN, *TOKENS]
    for secret in secrets:
        assert secret not in logs, "a token appears in a log"
        for text in probe.texts:
            assert secret not in text, "a token appears in a response"
    print(
        f"hostile requests: {sum(probe.statuses.values())} single "
        f"{dict(sorted(probe.statuses.items()))}, flood {dict(sorted(flood.items()))}"
    )


async def _flood(url: str, run_id: str) -> Counter[int]:
    """~800 concurrent hostile requests: bad tokens, reports for other hospitals, invalid
    bodies, future rounds, oversized bodies."""
    statuses: Counter[int] = Counter()
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        semaphore = asyncio.Semaphore(50)

        async def one(k: int) -> None:
            kind = k % 5
            path = f"/v1/runs/{run_id}/rounds/{0 if kind != 3 else 2}/reports"
            token = [f"bogus-{k}-0123456789", TOKENS[0], TOKENS[0], TOKENS[1], TOKENS[2]][kind]
            payload: Any = body(0 if kind != 1 else 2)
            if kind == 2:
                payload = body(0, total=[1e300] * D)
            content = json.dumps(payload).encode()
            if kind == 4:
                content = b"[" + b"0," * 600_000 + b"0]"
            async with semaphore:
                response = await client.post(
                    path,
                    content=content,
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                    },
                )
            statuses[response.status_code] += 1

        await asyncio.gather(*(one(k) for k in range(800)))
    return statuses


@pytest.mark.parametrize("token", ["wrong-token-for-the-agent-0123456789", TOKENS[2]])
def test_agent_errors_do_not_show_its_token(procs: Processes, tmp_path: Path, token: str) -> None:
    """An agent refused by the coordinator (unknown token), or that cannot reach it at all,
    exits with one line that does not contain its token."""
    paths, _ = write_gmm_data(tmp_path, [100], D)
    url = "http://127.0.0.1:9"  # nothing listens there: connection refused
    if token != TOKENS[2]:
        cluster = Cluster(procs, tmp_path)
        cluster.start_coordinator()
        url = cluster.url
    process = procs.start(
        "agent",
        "client",
        "--coordinator",
        url,
        "--token-file",
        str(token_file(tmp_path, token)),
        "--data",
        str(paths[0]),
        "--model",
        "gmm",
        "--state",
        str(tmp_path / "agent"),
        *AGENT_BUDGET,
        "--give-up",
        "3",
        "--log-level",
        "debug",
    )
    assert process.wait(300) == 2
    log = procs.log(process)
    assert "Traceback" not in log
    assert token not in log
    assert "refused the token" in log or "unreachable" in log
