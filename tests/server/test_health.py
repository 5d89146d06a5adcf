"""A run's health (server/health.py): degraded while a hospital is late in the open round
or missed a closed one, round 0 included, and a headline that names them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from ldpem.server.health import (
    LATE_FLOOR,
    RoundView,
    RunHealth,
    assess,
    late_after,
    round_views,
)
from ldpem.server.store import ReportRow, RoundRow, RunState

NAMES = ["h0", "h1", "h2"]
DEADLINE = 60.0


def report(t: int, hospital: str, at: float) -> ReportRow:
    return ReportRow("r", t, hospital, 10, [0.0], 1.0, f"{t}{hospital}", at)


def views(*rounds: tuple[float, float | None, dict[str, float]]) -> list[RoundView]:
    """Rounds 0, 1, … from (opened at, closed at or None, {hospital: report time})."""
    rows = [
        RoundRow(
            "r",
            t,
            "open" if closed is None else "closed",
            [0.0],
            opened,
            opened + DEADLINE,
            closed,
            None if closed is None else [0.0],
            None,
        )
        for t, (opened, closed, _) in enumerate(rounds)
    ]
    reports = [report(t, h, at) for t, (_, _, got) in enumerate(rounds) for h, at in got.items()]
    return round_views(rows, reports)


def health(
    rounds: Sequence[RoundView],
    now: float,
    *,
    status: RunState = "running",
    names: Sequence[str] = NAMES,
    planned: int = 4,
) -> RunHealth:
    return assess(
        run_status=status,
        rounds=planned,
        round_deadline=DEADLINE,
        views=rounds,
        hospitals=names,
        reason="round 0 had 0 reports at its deadline" if status == "failed" else None,
        warning=None,
        now=now,
    )


def test_round_views_group_reports_by_round_in_arrival_order() -> None:
    found = views((0.0, 5.0, {"h1": 2.0, "h0": 3.0}), (5.0, None, {"h2": 6.0}))
    assert [[p.hospital for p in r.reports] for r in found] == [["h1", "h0"], ["h2"]]
    assert found[0].reporters == {"h0", "h1"}


def test_nobody_is_late_in_round_0_before_anyone_reported() -> None:
    opened = views((0.0, None, {}))
    assert late_after(opened) == math.inf
    found = health(opened, now=30.0)
    assert found.state == "healthy"
    assert found.headline() == "running, round t = 0 open, 0 of 4 closed; waiting for h0, h1, h2"


def test_in_round_0_a_hospital_is_late_against_the_pace_of_those_that_reported() -> None:
    """Issue 23: after minutes the page still said "waiting for c" in round 0."""
    rounds = views((0.0, None, {"h0": 2.0, "h1": 4.0}))
    assert late_after(rounds) == 6.0  # 1.5 × the latest report so far
    early = health(rounds, now=5.5)
    assert early.state == "healthy" and early.waiting == ["h2"]
    late = health(rounds, now=6.5)
    assert late.state == "degraded" and late.late == ["h2"]
    assert late.headline() == "running, round t = 0 open, 0 of 4 closed; late in round t = 0: h2"


def test_the_pace_of_round_0_is_never_under_the_floor() -> None:
    rounds = views((0.0, None, {"h0": 0.1}))
    assert late_after(rounds) == LATE_FLOOR
    assert health(rounds, now=LATE_FLOOR - 0.1).late == []
    assert health(rounds, now=LATE_FLOOR + 0.1).late == ["h1", "h2"]


def test_after_round_0_the_median_closed_round_sets_the_pace() -> None:
    rounds = views((0.0, 10.0, dict.fromkeys(NAMES, 9.0)), (10.0, None, {"h0": 10.5}))
    assert late_after(rounds) == 15.0  # not 1.5 × 0.5 s, the pace of this round so far
    assert health(rounds, now=24.0).late == []
    assert health(rounds, now=26.0).late == ["h1", "h2"]


def test_a_passed_deadline_makes_the_absent_late() -> None:
    rounds = views((0.0, None, {}))
    assert health(rounds, now=DEADLINE + 0.1).late == NAMES


def test_a_missed_closed_round_keeps_the_run_degraded() -> None:
    rounds = views(
        (0.0, 60.0, {"h0": 1.0, "h1": 2.0}),
        (60.0, 61.0, dict.fromkeys(NAMES, 61.0)),
        (61.0, None, {"h0": 61.5}),
    )
    found = health(rounds, now=62.0)
    assert found.late == [] and [h.name for h in found.missing] == ["h2"]
    assert found.state == "degraded"
    assert found.headline() == (
        "running, round t = 2 open, 2 of 4 closed; missed rounds: h2 (t = 0); waiting for h1, h2"
    )


def test_a_finished_run_with_missing_rounds_says_who_reported_how_many() -> None:
    rounds = views(
        (0.0, 60.0, {"h0": 1.0, "h1": 2.0}),
        (60.0, 120.0, {"h0": 61.0, "h1": 62.0}),
        (120.0, 121.0, dict.fromkeys(NAMES, 121.0)),
        (121.0, 122.0, {"h0": 122.0, "h2": 122.0}),
    )
    found = health(rounds, now=200.0, status="finished")
    assert found.state == "degraded" and found.late == []
    assert (
        found.headline() == "finished with missing rounds: h1 reported 3 of 4, h2 reported 2 of 4"
    )
    assert [h.missed for h in found.missing] == [(3,), (0, 1)]


def test_a_finished_run_without_missing_rounds_is_healthy() -> None:
    rounds = views((0.0, 1.0, dict.fromkeys(NAMES, 1.0)))
    found = health(rounds, now=5.0, status="finished", planned=1)
    assert (found.state, found.headline()) == ("healthy", "finished all 1 rounds")


def test_a_failed_run_says_why() -> None:
    found = health(views((0.0, None, {})), now=100.0, status="failed", planned=3)
    assert found.state == "failed"
    assert found.headline() == "stopped after 0 of 3 rounds"
    assert found.details() == ["the run failed: round 0 had 0 reports at its deadline"]
    assert found.late == []  # no open round once the run ended


def test_missed_rounds_are_written_as_ranges_and_long_lists_are_cut() -> None:
    names = [f"h{i:02d}" for i in range(14)]
    rounds = views(
        *[(float(t), t + 1.0, {"h00": t + 0.5}) for t in range(4)],
        (4.0, 5.0, dict.fromkeys(names, 4.5)),
        (5.0, 6.0, {"h00": 5.5}),
        (6.0, None, {}),
    )
    found = health(rounds, now=6.1, names=names, planned=10)
    assert "h01 (t = 0–3, 5)" in found.headline()
    waiting = ", ".join(names[:10])
    assert found.headline().endswith(
        f"h10 (t = 0–3, 5) and 3 more; waiting for {waiting} and 4 more"
    )


@pytest.mark.parametrize("status", ["finished", "failed"])
def test_an_ended_run_has_no_one_late_or_waiting(status: RunState) -> None:
    rounds = views((0.0, None, {"h0": 1.0}))
    found = health(rounds, now=1000.0, status=status)
    assert found.open_round is None and found.late == [] and found.waiting == []
