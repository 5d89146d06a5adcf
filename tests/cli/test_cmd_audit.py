"""`ldpem audit`: JSON contract, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ldpem.cli import main


def test_json_results_for_the_local_mechanism(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "audit",
            "--mechanism",
            "local",
            "--draws",
            "100000",
            "--holder-draws",
            "2000",
            "--delta",
            "1e-3",
            "--json",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    assert payload["passed"] is True
    rows = payload["results"]
    assert {(r["accounting"], r["path"]) for r in rows} == {
        ("exact", "mechanism"),
        ("exact", "holder_round"),
        ("paper", "mechanism"),
        ("paper", "holder_round"),
    }
    for row in rows:
        assert row["mechanism"] == "local"
        assert row["claimed_epsilon"] == 1.0
        assert 0.0 <= row["lower_bound"] <= 1.0
        assert row["passed"] is True
        # The holder path measures its noise against an independently computed σ.
        assert (row["reference_noise_std"] is not None) == (row["path"] == "holder_round")
        if row["path"] == "holder_round":
            assert row["noise_std_ratio"][1] >= 0.98


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["audit", "--mechanism", "central-clip", "--accounting", "paper", "--draws", "1000"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "central-clip" in out and "pass" in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--epsilon", "-1"], "--epsilon must be > 0, got -1.0"),
        (["--delta", "1.5"], "--delta must be in (0, 1), got 1.5"),
        (["--draws", "10"], "--draws must be at least 100, got 10"),
    ],
)
def test_bad_arguments_are_one_line_errors(arguments: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ldpem", "audit", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"ldpem audit: error: {message}"
    assert "Traceback" not in result.stderr
