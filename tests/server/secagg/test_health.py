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

import logging
import re
from collections.abc import Collection, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ldpem.common.secagg.steps import HOLDER_STEPS, Step
from ldpem.server.app import create_app
from tests.fedkit import settings
from tests.secaggdriver import NAMES, T_MIN, DrivenRun, create_run, play_round
from tests.server.opkit import health_banner, run_gauges, scrape

#: Short, as every wait for a missing holder costs one; the assertions read the recorded
#: closing reasons, not the clock.
DEADLINE = 2.0


def create(client: TestClient, tag: str, rounds: int) -> DrivenRun:
    """A secagg run of holders h0 … h3 on ``client``'s coordinator (t_min = 3)."""
    return create_run(client, tag, round_deadline=DEADLINE, on_short="extend", rounds=rounds)


def play(run: DrivenRun, t: int, names: Collection[str], *, late: str | None = None) -> None:
    """Round t with the holders ``names`` only, in that order, every step; the others
    stay silent, but ``late`` advertises once the advertise step closed (refused)."""
    everyone = run.holders(t)

    def advertise_late(point: str, posted: list[tuple[str, str, Any]]) -> None:
        if late is not None and point == Step.SHARES:
            body = everyone[late].advertise().to_dict()
            assert run.post(t, late, Step.ADVERTISE, body).status_code == 409

    taking_part = {n: everyone[n] for n in names}
    played = play_round(run, t, run.inputs(t), holders=taking_part, at=advertise_late)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(names))


@pytest.fixture
def client(tmp_path: Any) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path))) as c:
        yield c


def test_a_healthy_secagg_run_reads_healthy_on_the_page_the_api_and_metrics(
    client: TestClient,
) -> None:
    run = create(client, "ok", rounds=2)
    for t in range(2):
        play(run, t, NAMES)
    summary = run.read()
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
    for p in run.read("/participation"):
        assert (p["rounds_reported"], p["lost"]) == ([0, 1], []), p
    for r in run.read("/rounds"):
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
    run = create(client, "gone", rounds=5)
    others = NAMES[:3]
    play(run, 0, NAMES)
    play(run, 1, NAMES)
    play(run, 2, others)  # h3 stopped after round 1
    # While round 3 is open (h3 not waited for): the page and the API name it already.
    page = run.page()
    assert 'class="lost"><td>h3</td>' in page, page
    assert "h3 (did not advertise keys in round 2)" in health_banner(page)
    play(run, 3, others)
    closings = {r["round"]: r["secagg"]["closings"] for r in run.read("/rounds")}
    # Round 2 waited its deadline for h3 at the advertise step; round 3 did not wait for it.
    assert next((c["step"], c["by"], c["missing"]) for c in closings[2]) == (
        "advertise",
        "deadline",
        ["h3"],
    )
    assert all(c["by"] == "everyone" for c in closings[3]), closings[3]
    assert closings[3][0]["waited_for"] == others
    rounds = run.read("/rounds")
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
    play(run, 4, ["h3", *others])
    last = run.read("/rounds")[4]["secagg"]
    assert last["survivors"] == NAMES and all(c["by"] == "everyone" for c in last["closings"])

    summary = run.read()
    assert (summary["status"], summary["health"]) == ("finished", "degraded"), summary
    assert "lost: h3 (did not advertise keys in round 2)" in summary["health_line"]
    banner = health_banner(run.page())
    assert banner.startswith("Degraded: finished with missing rounds: h3 reported 3 of 5")
    assert "lost: h3 (did not advertise keys in round 2)" in banner
    h3 = next(p for p in run.read("/participation") if p["hospital"] == "h3")
    assert h3["rounds_reported"] == [0, 1, 4]
    assert h3["lost"] == [{"round": 2, "step": "advertise"}]
    gauges = run_gauges(scrape(client), run.run_id)
    assert gauges["ldpem_run_hospitals_missing"] == 1
    assert gauges["ldpem_run_holders_lost"] == 1
    assert gauges["ldpem_run_degraded"] == 1


def test_a_late_advertisement_brings_a_lost_holder_back_next_round(client: TestClient) -> None:
    run = create(client, "back", rounds=4)
    others = NAMES[:3]
    play(run, 0, NAMES)
    play(run, 1, others)  # h3 lost at the advertise step of round 1
    # Not waited for in round 2: its advertisement comes after the step closed, refused
    # but recorded, so that round 3 waits for it (it advertises last there).
    play(run, 2, others, late="h3")
    play(run, 3, NAMES)
    rounds = run.read("/rounds")
    assert rounds[2]["secagg"]["returned"] == ["h3"]
    assert rounds[3]["secagg"]["closings"][0]["waited_for"] == NAMES
    assert [c["by"] for c in rounds[3]["secagg"]["closings"]] == ["everyone"] * 5
