"""What ``run status --wait`` ends with (``ldpem.run.estimate``): it waits for the region
only while the coordinator says one is coming, and prints β̂ with or without it."""

from __future__ import annotations

from typing import Any

import pytest

from ldpem.run import estimate
from ldpem.run.estimate import await_confidence, estimate_lines

REGION = {
    "level": 0.9,
    "low": [0.5, None],
    "high": [1.5, 2.0],
    "radius": 0.7,
    "draws": 99,
    "method": "parametric bootstrap (basic intervals)",
}


def test_it_polls_until_the_region_is_there() -> None:
    answers: list[dict[str, Any]] = [
        {"confidence": None, "pending": ["confidence"]},
        {"confidence": REGION, "pending": []},
    ]
    fetched: list[dict[str, Any]] = []

    def fetch() -> dict[str, Any]:
        fetched.append(answers.pop(0))
        return fetched[-1]

    waiting = {"confidence": None, "pending": ["confidence"]}
    assert await_confidence(waiting, fetch, 0.0) == {"confidence": REGION, "pending": []}
    assert len(fetched) == 2


def test_a_region_not_pending_is_not_waited_for() -> None:
    def fetch() -> dict[str, Any]:
        raise AssertionError("polled")

    for run in ({"status": "finished"}, {"confidence": None, "pending": ["forecast"]}):
        assert await_confidence(run, fetch, 0.0) == run


def test_it_gives_up_after_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimate, "CONFIDENCE_WAIT", 0.0)
    waiting = {"confidence": None, "pending": ["confidence"]}
    assert await_confidence(waiting, lambda: {}, 0.0) == waiting


def test_the_lines_show_the_estimate_with_or_without_its_intervals() -> None:
    lines = estimate_lines({"beta": [1.0, 1.25], "confidence": REGION})
    assert lines == [
        "estimate β̂ and its confidence intervals:",
        "90% confidence region (parametric bootstrap (basic intervals), 99 draws): ‖β − β̂‖ ≤ 0.700",
        "  β[0] = 1.000  [0.500, 1.500]",
        "  β[1] = 1.250  [-inf, 2.000]",
    ]
    assert estimate_lines({"beta": [1.0, 1.25]}) == [
        "estimate β̂ = [1.000, 1.250] (no confidence region from the coordinator)"
    ]
