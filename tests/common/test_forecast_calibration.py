"""The forecast's band holds: it covers 70–90% of runs it did not simulate, for every
built-in model and the hospital mechanism.

Cases (issue 31): GMM, MRM and RMC (10% missing covariates) with the local mechanism, and
GMM with the hospital mechanism; each with n = 2·10⁴ records over four unequal hospitals,
d = 10, T = 10, ε = 1, ‖β*‖/σ = 3. The forecast is what a coordinator states
(``ldpem.server.forecast``): the prediction of ``FORECAST_SEEDS`` fast-path simulations
at the problem's own seeds (≥ 10⁹), its band their 10–90% quantiles at ranks p·(S+1). The
unseen runs are ``run_study`` itself — the exact ``ldpem simulate`` pipeline, not the fast
path — at seeds 0 … RUNS − 1, which the forecast never uses.

Why these bounds hold and can fail: a band from S = 200 seeds covers a share of new runs
distributed as Beta, 80% on average with standard deviation √(0.16/202) = 2.8%; its
coverage of RUNS = 300 runs adds a binomial √(0.16/300) = 2.3%. Together 3.6%, so [70%,
90%] is ±2.8 standard deviations: a calibrated forecast fails one case in ~200, while a
band from a mis-specified simulation (the wrong split, model or scale) or one without the
(S+1) allowance shifts the coverage by more than that. The forecast's mean is held to the
unseen runs' within 3 standard errors of the difference.

About 15 s of CPU on the development machine (1,200 ``run_study`` and 800 fast runs of
2·10⁴ records), hence slow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from ldpem.common.planning.executor import SerialExecutor
from ldpem.common.planning.prediction import Problem, predict, prediction_seeds
from ldpem.common.planning.study import run_study
from ldpem.server.forecast import FORECAST_SEEDS

pytestmark = pytest.mark.slow

RUNS = 300
SIZES = (8000, 6000, 4000, 2000)


@dataclass(frozen=True)
class Case:
    model: str
    mechanism: str

    @property
    def problem(self) -> Problem:
        return Problem(model=self.model, d=10, sizes=SIZES, rounds=10, epsilon=1.0, snr=3.0)


CASES = [Case("gmm", "local"), Case("mrm", "local"), Case("rmc", "local"), Case("gmm", "hospital")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.model}-{c.mechanism}")
def test_the_forecast_band_covers_80_percent_of_runs_it_did_not_simulate(case: Case) -> None:
    problem = case.problem
    forecast = predict(problem, case.mechanism, seeds=FORECAST_SEEDS, executor=SerialExecutor())
    assert forecast.seeds == FORECAST_SEEDS and min(prediction_seeds(problem, 1)) >= RUNS
    unseen = []
    for seed in range(RUNS):
        error = run_study(problem.study(case.mechanism, seed)).final_error
        assert error is not None
        unseen.append(error)
    errors = np.array(unseen)
    covered = float(np.mean((errors >= forecast.low) & (errors <= forecast.high)))
    se = math.hypot(
        float(np.std(errors, ddof=1)) / math.sqrt(RUNS),
        float(np.std(forecast.errors, ddof=1)) / math.sqrt(forecast.seeds),
    )
    gap = forecast.mean - float(np.mean(errors))
    report = (
        f"{case}: band [{forecast.low:.4f}, {forecast.high:.4f}] of {forecast.seeds} seeds "
        f"covers {covered:.1%} of {RUNS} unseen runs; forecast mean {forecast.mean:.4f}, "
        f"unseen {np.mean(errors):.4f} ({gap / se:+.2f} se)"
    )
    print(report)
    assert 0.70 <= covered <= 0.90, report
    assert abs(gap) <= 3 * se, report
