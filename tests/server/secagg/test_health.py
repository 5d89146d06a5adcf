"""Secure-aggregation runs as they are, on a real coordinator (in-process, ``TestClient``)
driven by the library's ``Holder`` over HTTP (issue 32, points 1 and 2).

A healthy run reads healthy everywhere: the page's banner, ``GET /v1/runs/{run}``,
``/participation`` (each holder in every round's sum), ``/rounds`` (survivors, who took
part in each step, t_min and c) and ``/metrics`` (nothing missing, lost or degraded); on
8e54e94 every secagg run read "Degraded … reported 0 of N", with ``rounds_reported: []``.

A holder that stops after round 1 costs one deadline: round 2's advertise step closes at
its deadline without it, and the coordinator's own record of round 3's closings says
"everyone" (it waited only for the three others), where 8e54e94 waited the deadline again
in every round. The page, the run's health line, ``/participation``, ``/metrics`` and the
log name it and the step. When it advertises again it is waited for again.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    ParticipantList,
    ShareBundle,
    UnmaskRequest,
)
from ldpem.common.secagg.runvalues import round_parameters
from ldpem.common.wire import PublicParameters
from ldpem.server.app import create_app
from tests.fedkit import admin_headers, run_request, settings
from tests.secaggdriver import KEYS, NAMES, ROSTER, T_MIN, D
from tests.server.opkit import health_banner, run_gauges, scrape

K = len(NAMES)
#: Short, as every wait for a missing holder costs one; the assertions read the recorded
#: closing reasons, not the clock.
DEADLINE = 2.0


class Run:
    """A secagg run of holders h0 … h3 on ``client``'s coordinator (t_min = 3)."""

    def __init__(self, client: TestClient, tag: str, rounds: int) -> None:
        self.client = client
        self.tokens = {n: f"{tag}-token-{n}-abcdefghijklmnop" for n in NAMES}
        request = run_request(
            records=100,
            d=D,
            rounds=rounds,
            mechanism="secagg",
            t_min=T_MIN,
            roster=json.loads(ROSTER.to_json()),
            round_deadline=DEADLINE,
        )
        request["hospitals"] = [{"name": n, "records": 100, "token": self.tokens[n]} for n in NAMES]
        response = client.post("/v1/runs", json=request, headers=admin_headers())
        assert response.status_code == 201, response.text
        created = response.json()
        self.run_id: str = created["run_id"]
        self.params = PublicParameters.model_validate(created["params"])

    def _url(self, t: int, what: str) -> str:
        return f"/v1/runs/{self.run_id}/rounds/{t}/secagg/{what}"

    def post(self, t: int, name: str, step: str, message: Any) -> int:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"}
        response = self.client.post(self._url(t, step), json=message.to_dict(), headers=headers)
        return int(response.status_code)

    def fetch(self, t: int, name: str, what: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"}
        response = self.client.get(self._url(t, what), params={"wait": 10}, headers=headers)
        assert response.status_code == 200, (t, name, what, response.text)
        answer: dict[str, Any] = response.json()
        return answer

    def holder(self, t: int, name: str) -> Holder:
        assert self.params.modulus_bits is not None
        parameters = round_parameters(self.params, self.run_id, t)
        assert (parameters.k, parameters.t_min) == (K, T_MIN)
        return Holder(name, ROSTER, KEYS[name], parameters, min_honest=1)

    def play(self, t: int, names: Collection[str], *, late: str | None = None) -> None:
        """Round t with the holders ``names`` only, in that order, every step; the others
        stay silent, but ``late`` advertises once the advertise step closed (refused)."""
        holders = {n: self.holder(t, n) for n in names}
        inputs = {n: [(i + 1) % 2**20 for i in range(D)] for n in names}
        for n, h in holders.items():
            assert self.post(t, n, "advertise", h.advertise()) == 200
        for n, h in holders.items():
            listed = ParticipantList.from_dict(self.fetch(t, n, "participants"))
            assert self.post(t, n, "shares", h.share_keys(listed)) == 200
        if late is not None:
            assert self.post(t, late, "advertise", self.holder(t, late).advertise()) == 409
        for n, h in holders.items():
            bundle = ShareBundle.from_dict(self.fetch(t, n, "bundle"))
            assert self.post(t, n, "masked", h.masked_input(bundle, inputs[n])) == 200
        for n, h in holders.items():
            check = ConsistencyCheck.from_dict(
                self.fetch(t, n, "consistency-check"), h.roster.names
            )
            assert self.post(t, n, "signature", h.sign_survivors(check)) == 200
        for n, h in holders.items():
            request = UnmaskRequest.from_dict(self.fetch(t, n, "unmask-request"), h.roster.names)
            assert self.post(t, n, "unmask", h.unmask(request)) == 200

    def get(self, what: str = "") -> Any:
        response = self.client.get(f"/v1/runs/{self.run_id}{what}")
        assert response.status_code == 200, response.text
        return response.json()

    def page(self) -> str:
        response = self.client.get(f"/runs/{self.run_id}")
        assert response.status_code == 200
        return str(response.text)


@pytest.fixture
def client(tmp_path: Any) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path))) as c:
        yield c


def test_a_healthy_secagg_run_reads_healthy_on_the_page_the_api_and_metrics(
    client: TestClient,
) -> None:
    run = Run(client, "ok", rounds=2)
    for t in range(2):
        run.play(t, NAMES)
    summary = run.get()
    assert summary["status"] == "finished", summary
    assert (summary["health"], summary["health_line"]) == ("healthy", "finished all 2 rounds")
    assert health_banner(run.page()) == "Healthy: finished all 2 rounds"
    page = run.page()
    c = run.params.colluders
    assert c is not None
    assert (
        f"t_min = 3 holders per step, collusion bound c = {c} (noise sized for t_min − c = {3 - c}"
        in page
    )
    assert re.search(r'<table id="secagg">.*?all 4 survivors|all 4</td>', page, re.S)
    for p in run.get("/participation"):
        assert (p["rounds_reported"], p["lost"]) == ([0, 1], []), p
    for r in run.get("/rounds"):
        assert r["reporters"] == NAMES, r
        steps = r["secagg"]
        assert (steps["t_min"], steps["colluders"], steps["step"]) == (T_MIN, c, "done")
        for key in ("advertised", "shared", "masked", "signed", "unmasked", "survivors"):
            assert steps[key] == NAMES, (key, steps)
        assert steps["lost"] == {} and steps["not_waited_for"] == []
        assert [(c["step"], c["by"]) for c in steps["closings"]] == [
            (s, "everyone") for s in ("advertise", "shares", "masked", "signature", "unmask")
        ]
    gauges = run_gauges(scrape(client), run.run_id)
    assert gauges["ldpem_run_hospitals_missing"] == 0
    assert gauges["ldpem_run_holders_lost"] == 0
    assert gauges["ldpem_run_degraded"] == 0


def test_a_stopped_holder_costs_one_deadline_and_is_named(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ldpem.server")
    run = Run(client, "gone", rounds=5)
    others = NAMES[:3]
    run.play(0, NAMES)
    run.play(1, NAMES)
    run.play(2, others)  # h3 stopped after round 1
    # While round 3 is open (h3 not waited for): the page and the API name it already.
    page = run.page()
    assert 'class="lost"><td>h3</td>' in page, page
    assert "h3 (did not advertise keys in round 2)" in health_banner(page)
    run.play(3, others)
    closings = {r["round"]: r["secagg"]["closings"] for r in run.get("/rounds")}
    # Round 2 waited its deadline for h3 at the advertise step; round 3 did not wait for it.
    assert next((c["step"], c["by"], c["missing"]) for c in closings[2]) == (
        "advertise",
        "deadline",
        ["h3"],
    )
    assert all(c["by"] == "everyone" for c in closings[3]), closings[3]
    assert closings[3][0]["waited_for"] == others
    rounds = run.get("/rounds")
    assert rounds[3]["secagg"]["not_waited_for"] == ["h3"]
    assert rounds[2]["secagg"]["lost"] == {"h3": "advertise"}
    assert rounds[3]["reporters"] == others and rounds[3]["secagg"]["survivors"] == others
    # The log names the step and the holder.
    assert re.search(
        r"round 2: the advertise step closed \(its deadline passed\) with 3 of the 4 holders "
        r"it waited for; lost: h3 \(did not advertise keys\)",
        caplog.text,
    ), caplog.text
    assert "round 3 closed with the secure sum of 3 survivors (h0, h1, h2)" in caplog.text

    # h3 comes back: it advertises first in round 4, while the step is open, and is
    # waited for at every later step of the round.
    run.play(4, ["h3", *others])
    last = run.get("/rounds")[4]["secagg"]
    assert last["survivors"] == NAMES and all(c["by"] == "everyone" for c in last["closings"])

    summary = run.get()
    assert (summary["status"], summary["health"]) == ("finished", "degraded"), summary
    assert "lost: h3 (did not advertise keys in round 2)" in summary["health_line"]
    banner = health_banner(run.page())
    assert banner.startswith("Degraded: finished with missing rounds: h3 reported 3 of 5")
    assert "lost: h3 (did not advertise keys in round 2)" in banner
    h3 = next(p for p in run.get("/participation") if p["hospital"] == "h3")
    assert h3["rounds_reported"] == [0, 1, 4]
    assert h3["lost"] == [{"round": 2, "step": "advertise"}]
    gauges = run_gauges(scrape(client), run.run_id)
    assert gauges["ldpem_run_hospitals_missing"] == 1
    assert gauges["ldpem_run_holders_lost"] == 1
    assert gauges["ldpem_run_degraded"] == 1


def test_a_late_advertisement_brings_a_lost_holder_back_next_round(client: TestClient) -> None:
    run = Run(client, "back", rounds=4)
    others = NAMES[:3]
    run.play(0, NAMES)
    run.play(1, others)  # h3 lost at the advertise step of round 1
    # Not waited for in round 2: its advertisement comes after the step closed, refused
    # but recorded, so that round 3 waits for it (it advertises last there).
    run.play(2, others, late="h3")
    run.play(3, NAMES)
    rounds = run.get("/rounds")
    assert rounds[2]["secagg"]["returned"] == ["h3"]
    assert rounds[3]["secagg"]["closings"][0]["waited_for"] == NAMES
    assert [c["by"] for c in rounds[3]["secagg"]["closings"]] == ["everyone"] * 5
