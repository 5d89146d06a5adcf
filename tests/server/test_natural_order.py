"""Hospitals are listed in natural order, h1, h2, …, h10, h11 (issue 43, finding 12: the
status page and the read API listed h1, h10, h11, h2): participation, the rounds'
reporters, the health line and the status page."""

from __future__ import annotations

import random

from fastapi.testclient import TestClient

from ldpem.common.core.naming import natural_sorted
from tests.fedkit import admin_headers, run_request

NAMES = [f"h{i}" for i in range(1, 12)]


def test_natural_sorted_compares_numbers_as_numbers() -> None:
    assert natural_sorted(["h10", "h2", "h1", "h11", "a", "h01"]) == [
        "a",
        "h01",
        "h1",
        "h2",
        "h10",
        "h11",
    ]
    assert natural_sorted(["site-2b", "site-10a", "site-2a"]) == ["site-2a", "site-2b", "site-10a"]


def test_hospitals_are_listed_in_natural_order(client: TestClient) -> None:
    shuffled = random.Random(43).sample(NAMES, len(NAMES))
    request = run_request(hospitals=0, rounds=2, round_deadline=3600)
    request["hospitals"] = [
        {"name": name, "records": 100, "token": f"natural-order-token-{name}-abcdef"}
        for name in shuffled
    ]
    created = client.post("/v1/runs", json=request, headers=admin_headers())
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    participation = client.get(f"/v1/runs/{run_id}/participation").json()
    assert [p["hospital"] for p in participation] == NAMES
    page = client.get(f"/runs/{run_id}").text
    positions = [page.index(f">{name}<") for name in NAMES]
    assert positions == sorted(positions), positions
