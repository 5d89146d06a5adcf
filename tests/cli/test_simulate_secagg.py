"""``ldpem simulate --mechanism secagg``: t_min, dropouts, the shares' public values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ldpem.cli import main
from ldpem.common.core.secagg_quantize import grid_step
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.secagg.runvalues import run_expander

SMALL = ["--n", "6000", "--d", "3", "--rounds", "4", "--hospitals", "12"]


def test_json_reports_the_shares_public_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--mechanism", "secagg", *SMALL, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["mechanism"] == "secagg" and outcome["t_min"] == 11  # 12 − ⌊12/10⌋
    assert outcome["colluders"] == 4  # ⌊12/3⌋ < 2·11 − 12 = 10
    bound = outcome["scale"] * truncation_bound(outcome["smoothing"])
    assert outcome["grid"] == grid_step(bound)
    assert outcome["share_mean"] > 0 and 20 <= outcome["modulus_bits"] <= 54
    assert outcome["sum_epsilon"] <= 1.0 < outcome["fallback_epsilon"]
    assert outcome["reporters"] == [12] * 4 and outcome["skipped_rounds"] == []
    assert outcome["error"] < outcome["initial_error"]


def test_t_min_and_dropout_reach_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--mechanism", "secagg", *SMALL, "--t-min", "11", "--dropout", "0.2"]
    assert main([*argv, "--seed", "1", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["t_min"] == 11 and outcome["dropout"] == 0.2
    assert outcome["skipped_rounds"] == [t for t, r in enumerate(outcome["reporters"]) if r < 11]
    assert outcome["skipped_rounds"]  # 20% of 12 holders dropping: short rounds happen
    assert main([*argv, "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert "a sum holds at least 11 hospitals, of whom 7 honest ones make its noise" in text
    assert "rounds not released (too few reports)" in text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--mechanism", "local", "--t-min", "2"], "t-min is only meaningful"),
        (["--mechanism", "secagg", "--t-min", "13"], "t_min must be at most the 12 holders"),
        (["--mechanism", "secagg", "--dropout", "1"], "dropout must be in [0, 1), got 1.0"),
        (["--mechanism", "secagg", "--colluders", "10"], "colluders must be below 2·t_min − K"),
        (["--mechanism", "local", "--colluders", "1"], "colluders is only meaningful"),
        (
            ["--mechanism", "secagg", "--secagg-topology", "expander"],
            "secagg-topology expander: the expander is not sparser than the full mesh at K = 12",
        ),
    ],
)
def test_bad_values_are_one_line_errors(arguments: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ldpem", "simulate", *SMALL, *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


EXPANDER = ["--n", "6000", "--d", "3", "--rounds", "4", "--draws", "0", "--seed", "0"]


@pytest.mark.parametrize(
    ("holders", "topology", "expected"),
    [("200", "expander", "expander"), ("200", "auto", "mesh"), ("400", "auto", "expander")],
)
def test_the_expander_sizes_the_noise_for_its_h_among_t_survivors(
    capsys: pytest.CaptureFixture[str], holders: str, topology: str, expected: str
) -> None:
    """On the expander (asked for, or "auto" where its k <= K/2) the simulation's sums hold
    at least T reports, h of them honest (``run_expander`` at c = ⌊K/3⌋): the JSON says
    so; at K = 200 "auto" keeps the mesh (k = 150 > K/2), whose t_min and c are the
    mesh's."""
    argv = ["simulate", "--mechanism", "secagg", *EXPANDER, "--hospitals", holders]
    assert main([*argv, "--secagg-topology", topology, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    k = int(holders)
    assert outcome["secagg_topology"] == expected
    if expected == "mesh":
        assert (outcome["t_min"], outcome["colluders"]) == (k - k // 10, k // 3)
        return
    expander = run_expander(k, k // 3, 0.1, 2)
    assert outcome["t_min"] == expander.survivors == k - k // 10
    assert outcome["honest_shares"] == expander.honest_shares
    assert outcome["colluders"] == expander.survivors - expander.honest_shares
    assert outcome["sum_epsilon"] <= 1.0 < outcome["fallback_epsilon"]
    assert outcome["error"] < outcome["initial_error"]
