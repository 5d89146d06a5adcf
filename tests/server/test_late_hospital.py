"""Acceptance (issue 23, "health that tells the truth"): a real coordinator and real agents,
the third hospital started after its round-0 deadline. The status page and /metrics say
the run is degraded while it is late and once it missed round 0, and the finished run says
it finished with missing rounds, naming the hospital and its count."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from ldpem.processes import Processes
from tests.server.opkit import health_banner, late_hospital_run, run_gauges, scrape

pytestmark = pytest.mark.slow

ROUNDS = 4


def test_a_hospital_started_after_its_round_0_deadline(procs: Processes, tmp_path: Path) -> None:
    run = late_hospital_run(procs, tmp_path, rounds=ROUNDS)

    # Round 0, h0 and h1 reported, h2 not even started: late, in round 0.
    assert run.late.banner.startswith("Degraded: running, round t = 0 open, 0 of 4 closed")
    assert "late in round t = 0: h2" in run.late.banner
    assert run.late.gauges["ldpem_run_hospitals_late"] == 1
    assert run.late.gauges["ldpem_run_hospitals_missing"] == 0
    assert run.late.gauges["ldpem_run_degraded"] == 1
    assert run.late.gauges["ldpem_run_rounds_closed"] == 0
    assert run.late.gauges["ldpem_run_open_round_age_seconds"] > 0

    # Round 0 closed at its deadline without h2: missing, and it stays so.
    assert run.missing.banner.startswith("Degraded: running, round t = 1 open, 1 of 4 closed")
    assert "missed rounds: h2 (t = 0)" in run.missing.banner
    assert run.missing.gauges["ldpem_run_hospitals_missing"] == 1
    assert run.missing.gauges["ldpem_run_degraded"] == 1
    assert run.missing.gauges["ldpem_run_rounds_closed"] == 1

    with httpx.Client(base_url=run.url, timeout=30) as http:
        rounds = http.get(f"/v1/runs/{run.run_id}/rounds").json()
        banner = health_banner(http.get(f"/runs/{run.run_id}").text)
        gauges = run_gauges(scrape(http), run.run_id)
    # h2 joined after round 0 closed; the JSON of the rounds says which it reported in.
    reported = sum("h2" in r["reporters"] for r in rounds)
    assert "h2" not in rounds[0]["reporters"] and 1 <= reported < ROUNDS
    assert banner == f"Degraded: finished with missing rounds: h2 reported {reported} of 4"
    assert gauges == {
        "ldpem_run_rounds": ROUNDS,
        "ldpem_run_rounds_closed": ROUNDS,
        "ldpem_run_hospitals_late": 0,
        "ldpem_run_hospitals_missing": 1,
        "ldpem_run_degraded": 1,
    }
