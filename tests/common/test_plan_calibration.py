"""`ldpem plan`'s bands hold at its default: they cover 70–90% of runs the plan did not
simulate (issue 43, finding 18: at the old default of 20 seeds, one 10–90% band held 30 of
30 fresh runs).

Two parts:

* **The default is enough, by the maths.** The k-th smallest of S simulated errors cuts
  off a share of the error distribution distributed as Beta(k, S + 1 − k), whatever that
  distribution is; so a band between the ranks p·(S+1) covers a Beta share of new runs
  (bracketed by the order statistics around it when those ranks are not whole). The
  issue asks for four cases at once (GMM, RMC and MRM with the local mechanism, GMM with
  the hospital one), so the default must put one band's coverage inside [70%, 90%] with
  probability at least 0.95^(1/4): then all four are inside with probability ≥ 0.95.
  20 seeds gave at most 0.45 by this bound (78% by simulation); 99 gives 0.988.
* **It holds against runs the plan did not use.** For each case, the plan's band at the
  default seeds (``predict``: the numbers the plan prints) against ``RUNS`` runs of
  ``ldpem simulate``'s own pipeline (``run_study``, seeds 9000 on; a prediction's seeds are
  ≥ 10⁹). A band covering c of new runs holds Binomial(RUNS, c) of them; a c in [0.7,
  0.9] explains a count from the 0.5% quantile of Binomial(RUNS, 0.7) to the 99.5% one of
  Binomial(RUNS, 0.9), and a count outside that range is refused. Hospitals of 8,000,
  6,000, 4,000 and 2,000 records (n = 2·10⁴: ``run_study`` takes ~0.03 s a run), d = 10,
  T = 10, ε = 1, ‖β*‖/σ = 3; 800 ``run_study`` runs: 207 s on the two cores of the
  development machine at load 6–8 (2026-12-07), hence slow (``make test`` and CI run it).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import beta, binom

from ldpem.cli import main
from ldpem.common.planning.executor import SerialExecutor
from ldpem.common.planning.prediction import (
    BAND,
    DEFAULT_SEEDS,
    SENSITIVITY_SEEDS,
    Problem,
    predict,
    prediction_seeds,
)
from ldpem.common.planning.study import run_study

#: The issue's four cases, each to hold at once.
CASES = [("gmm", "local"), ("gmm", "hospital"), ("rmc", "local"), ("mrm", "local")]
#: What each band's coverage must lie in.
TARGET = (0.7, 0.9)
#: Fresh runs per case, and the first one's seed (disjoint from every prediction's).
RUNS = 200
FIRST_FRESH = 9000
SIZES = (8000, 6000, 4000, 2000)


def band_inside_target(seeds: int) -> float:
    """A lower bound on the probability that a band from ``seeds`` simulations covers a
    share of new runs inside TARGET (exact when its ranks are whole): its ends lie between
    the order statistics around the ranks p·(S+1), so its coverage lies between the inner
    pair's Beta share and the outer pair's."""
    low, high = BAND[0] * (seeds + 1), BAND[1] * (seeds + 1)
    inner = round(math.floor(high + 1e-9) - math.ceil(low - 1e-9))
    outer = round(math.ceil(high - 1e-9) - math.floor(low + 1e-9))
    too_narrow = beta(inner, seeds + 1 - inner).cdf(TARGET[0])
    too_wide = beta(outer, seeds + 1 - outer).sf(TARGET[1])
    return float(1.0 - too_narrow - too_wide)


def test_the_default_seeds_put_all_four_cases_inside_70_to_90_percent() -> None:
    required = 0.95 ** (1 / len(CASES))
    assert band_inside_target(DEFAULT_SEEDS) >= required, (
        f"a band from {DEFAULT_SEEDS} seeds lies inside {TARGET} with probability "
        f"{band_inside_target(DEFAULT_SEEDS):.4f} < {required:.4f}"
    )
    # The bound itself: the old default fails it, the forecast's 200 passes.
    assert band_inside_target(20) < 0.5 < required < band_inside_target(200)


def test_plan_states_its_band_and_seeds_at_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--n", "2000", "--hospitals", "2", "--d", "2", "--crossover-limit", "1000"]
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["seeds"] == DEFAULT_SEEDS
    for entry in plan["mechanisms"].values():
        assert entry["seeds"] == len(entry["errors"]) == DEFAULT_SEEDS
        ordered = sorted(entry["errors"])
        # S + 1 a multiple of 10: the band's ends are the sorted errors at ranks p·(S+1).
        ranks = [round(p * (DEFAULT_SEEDS + 1)) for p in BAND]
        assert [entry["p10"], entry["p90"]] == [ordered[r - 1] for r in ranks]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"mean [10–90% band] over {DEFAULT_SEEDS} simulations" in text
    assert f"a band from {DEFAULT_SEEDS} simulations holds 80% of new runs" in text
    assert f"each 'if' is a mean of {SENSITIVITY_SEEDS};" in text


@pytest.mark.slow
@pytest.mark.parametrize(("model", "mechanism"), CASES, ids=lambda v: str(v))
def test_the_plan_band_covers_70_to_90_percent_of_runs_it_did_not_simulate(
    model: str, mechanism: str
) -> None:
    problem = Problem(model=model, d=10, sizes=SIZES, rounds=10, epsilon=1.0, snr=3.0)
    band = predict(problem, mechanism, seeds=DEFAULT_SEEDS, executor=SerialExecutor())
    assert min(prediction_seeds(problem, 1)) > FIRST_FRESH + RUNS
    fresh = []
    for seed in range(FIRST_FRESH, FIRST_FRESH + RUNS):
        error = run_study(problem.study(mechanism, seed)).final_error
        assert error is not None
        fresh.append(error)
    errors = np.array(fresh)
    covered = int(np.sum((errors >= band.low) & (errors <= band.high)))
    lowest = int(binom.ppf(0.005, RUNS, TARGET[0]))
    highest = int(binom.ppf(0.995, RUNS, TARGET[1]))
    report = (
        f"{model} {mechanism}: band [{band.low:.4g}, {band.high:.4g}] of {band.seeds} seeds "
        f"holds {covered} of {RUNS} fresh runs; a coverage in {TARGET} explains "
        f"{lowest}–{highest}"
    )
    print(report)
    assert lowest <= covered <= highest, report
