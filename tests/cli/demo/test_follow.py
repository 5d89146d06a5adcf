"""``ldpem demo`` follows its run by the coordinator's long-poll: each round shown once as
it closes, the run's summary at its end, one line when it fails, and a request per round
rather than one every few milliseconds (a fake coordinator, ``httpx.MockTransport``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.common.core.errors import UserError
from ldpem.demo.follow import final_region, follow
from ldpem.processes import Processes

ADMIN = "admin-token"
RUN = "r1"


class FakeCoordinator:
    """A run of ``rounds`` rounds that closes one round per long-poll, then ends as
    ``end`` ("finished" or "failed"); counts the requests by path."""

    def __init__(self, rounds: int, end: str = "finished") -> None:
        self.rounds, self.end, self.open = rounds, end, 0
        self.requests: dict[str, int] = {}
        self.polls: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests[path] = self.requests.get(path, 0) + 1
        if path == f"/v1/runs/{RUN}/round":
            assert request.headers["Authorization"] == f"Bearer {ADMIN}"
            self.polls.append(dict(request.url.params))
            if int(request.url.params["after"]) >= self.open:  # a round closes meanwhile
                self.open += 1
            running = self.open < self.rounds
            status = "running" if running else self.end
            return httpx.Response(
                200, json={"round": self.open, "status": status, "reason": "a hospital left"}
            )
        if path == f"/v1/runs/{RUN}/rounds":
            closed = [
                {"round": t, "status": "closed", "reporters": ["h1", "h2"]}
                for t in range(min(self.open, self.rounds))
            ]
            return httpx.Response(200, json=closed)
        if path == f"/v1/runs/{RUN}":
            return httpx.Response(200, json={"status": self.end, "run_id": RUN})
        return httpx.Response(404)


def follow_fake(coordinator: FakeCoordinator, tmp_path: Path, **options: Any) -> dict[str, Any]:
    client = httpx.Client(base_url="http://coordinator", transport=httpx.MockTransport(coordinator))
    with client:
        return follow(
            client,
            RUN,
            admin=ADMIN,
            rounds=coordinator.rounds,
            names=["h1", "h2"],
            processes=Processes(tmp_path),
            quiet=False,
            timeout=60.0,
            **options,
        )


def test_each_round_is_shown_once_and_the_summary_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    coordinator = FakeCoordinator(rounds=4)
    summary = follow_fake(coordinator, tmp_path)
    assert summary == {"status": "finished", "run_id": RUN}
    lines = stderr.getvalue().splitlines()
    assert [line.split("[")[0].split() for line in lines] == [
        ["round", f"{t}/4"] for t in range(1, 5)
    ]
    # A long-poll after the last round seen, waiting; two requests a round at most.
    assert [int(p["after"]) for p in coordinator.polls] == [-1, 0, 1, 2, 3]
    assert all(float(p["wait"]) > 0 for p in coordinator.polls)
    assert sum(coordinator.requests.values()) <= 2 * len(coordinator.polls) + 1


def test_a_failed_run_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    with pytest.raises(UserError, match=r"^the run failed: a hospital left$"):
        follow_fake(FakeCoordinator(rounds=2, end="failed"), tmp_path)


def test_the_final_region_is_fetched_until_stored_or_none() -> None:
    region = {"level": 0.9, "low": [0.5], "high": [1.5], "radius": 0.5, "draws": 99}
    answers: list[dict[str, Any]] = [
        {"confidence": None, "pending": ["confidence"]},
        {"confidence": region, "pending": []},
    ]
    assert final_region(lambda: answers.pop(0), 0.0) == region
    assert final_region(lambda: {"confidence": None, "pending": []}, 0.0) is None
