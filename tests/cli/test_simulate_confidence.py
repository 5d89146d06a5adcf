"""``ldpem simulate``'s confidence region (issue 31): the ``"confidence"`` object of
``--json``, ``--level``, ``--draws`` and ``--bootstrap-seed``, the summary's lines, and
one-line errors before anything runs."""

from __future__ import annotations

import json

import pytest

from ldpem.cli import main
from ldpem.common.planning.confidence import DEFAULT_DRAWS, METHOD, confidence_region
from ldpem.common.planning.study import Study, run_study

SMALL = ["simulate", "--n", "2000", "--d", "3", "--rounds", "4", "--mechanism", "central"]


def _outcome(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    assert main([*SMALL, "--workers", "1", *extra, "--json"]) == 0
    outcome: dict[str, object] = json.loads(capsys.readouterr().out)
    return outcome


def test_json_carries_the_region_at_the_default_level_and_draws(
    capsys: pytest.CaptureFixture[str],
) -> None:
    region = _outcome(capsys)["confidence"]
    assert isinstance(region, dict)
    assert set(region) == {"level", "low", "high", "radius", "draws", "method"}
    assert (region["level"], region["draws"], region["method"]) == (0.9, DEFAULT_DRAWS, METHOD)
    assert len(region["low"]) == len(region["high"]) == 3
    assert all(lo < hi for lo, hi in zip(region["low"], region["high"], strict=True))
    assert region["radius"] > 0


def test_a_seeded_region_is_the_librarys(capsys: pytest.CaptureFixture[str]) -> None:
    extra = ("--level", "0.8", "--draws", "9", "--bootstrap-seed", "7", "--seed", "2")
    region = _outcome(capsys, *extra)["confidence"]
    assert region == _outcome(capsys, *extra)["confidence"]
    result = run_study(Study(mechanism="central", n=2000, d=3, rounds=4, seed=2))
    assert region == confidence_region(result, level=0.8, draws=9, seed=7).summary()
    assert _outcome(capsys, "--draws", "0")["confidence"] is None


def test_the_summary_shows_the_estimate_with_its_intervals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*SMALL, "--workers", "1", "--draws", "19"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if "confidence region" in line)
    assert lines[head].startswith(f"90% confidence region ({METHOD}, 19 draws): ‖β − β̂‖ ≤ ")
    assert [line.split(" = ")[0] for line in lines[head + 1 : head + 4]] == [
        "  β[0]",
        "  β[1]",
        "  β[2]",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--draws", "5"], "draws must be >= 19 at level 0.9, got 5"),
        (["--draws", "-1"], "draws must be >= 19 at level 0.9, got -1"),
        (["--level", "1"], "level must be in (0, 1), got 1.0"),
        (["--level", "nan"], "level must be in (0, 1), got nan"),
        (["--level", "0.95", "--draws", "20"], "draws must be >= 39 at level 0.95, got 20"),
    ],
)
def test_bad_level_or_draws_is_one_line_before_anything_runs(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main([*SMALL, *extra]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"ldpem simulate: error: {message}"
    assert "round" not in captured.err and captured.out == ""
