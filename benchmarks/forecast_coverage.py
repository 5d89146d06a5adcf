"""Do the forecast's bands hold? Issue 31's coverage table, before and after, in one run.

    python benchmarks/forecast_coverage.py [--fresh 50] [--workers 2] [--json]

For each case of the issue (GMM, RMC and MRM with the local mechanism, GMM with the
hospital mechanism; hospitals of 20,000, 40,000, 60,000 and 80,000 records, d = 10,
T = 10, ε = 1, ‖β*‖/σ = 3), three predictions of the final error, each a mean and a
10–90% band:

  before     what main (8e54e94) stated: ``run_study`` at the fixed seeds 10⁹ … 10⁹ + 19,
             shared by every problem
  plan       ``ldpem plan`` now: ``DEFAULT_SEEDS`` fast-path simulations (20 until issue
             43, 99 since) at the problem's own seeds; benchmarks/plan_coverage.py
             compares seed counts
  forecast   the coordinator's forecast now: 200 at the problem's own seeds

against ``--fresh`` runs of ``ldpem simulate``'s pipeline (``run_study``, seeds 0 …
fresh − 1, which no prediction uses): the share of them inside each band (nominal 80%),
and each mean against theirs in standard errors of the difference.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

import numpy as np

from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.prediction import DEFAULT_SEEDS, Problem, predict, quantile
from ldpem.common.planning.study import run_study
from ldpem.server.forecast import FORECAST_SEEDS

SIZES = (20_000, 40_000, 60_000, 80_000)
CASES = (("gmm", "local"), ("rmc", "local"), ("gmm", "hospital"), ("mrm", "local"))
#: main's prediction seeds (``PREDICTION_SEED_BASE`` and its ``DEFAULT_SEEDS``).
OLD_FIRST, OLD_SEEDS = 10**9, 20


def exact_error(task: tuple[Problem, str, int]) -> float:
    problem, mechanism, seed = task
    error = run_study(problem.study(mechanism, seed)).final_error
    assert error is not None
    return error


def figures(errors: list[float], fresh: np.ndarray) -> dict[str, float]:
    low, high = quantile(errors, 0.1), quantile(errors, 0.9)
    se = math.hypot(
        float(np.std(errors, ddof=1)) / math.sqrt(len(errors)),
        float(np.std(fresh, ddof=1)) / math.sqrt(fresh.size),
    )
    mean = float(np.mean(errors))
    return {
        "seeds": len(errors),
        "mean": mean,
        "low": low,
        "high": high,
        "covered": float(np.mean((fresh >= low) & (fresh <= high))),
        "gap_se": (mean - float(np.mean(fresh))) / se,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--fresh", type=int, default=50, help="unseen runs per case")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started, cpu = time.time(), time.process_time()
    load = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    with make_executor(workers=args.workers) as executor:
        for model, mechanism in CASES:
            problem = Problem(model=model, d=10, sizes=SIZES, epsilon=1.0, rounds=10)
            fresh = np.array(
                executor.map(exact_error, [(problem, mechanism, s) for s in range(args.fresh)])
            )
            old_seeds = range(OLD_FIRST, OLD_FIRST + OLD_SEEDS)
            before = executor.map(exact_error, [(problem, mechanism, s) for s in old_seeds])
            plan = predict(problem, mechanism, seeds=DEFAULT_SEEDS, executor=executor)
            forecast = predict(problem, mechanism, seeds=FORECAST_SEEDS, executor=executor)
            rows.append(
                {
                    "case": f"{model.upper()} {mechanism}",
                    "fresh_mean": float(np.mean(fresh)),
                    "fresh": int(fresh.size),
                    "before": figures(list(before), fresh),
                    "plan": figures(list(plan.errors), fresh),
                    "forecast": figures(list(forecast.errors), fresh),
                }
            )
    result: dict[str, Any] = {
        "rows": rows,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "wall_s": time.time() - started,
        "cpu_s_parent": time.process_time() - cpu,
    }
    if args.json:
        print(json.dumps(result))
        return
    plan_column = f"plan ({DEFAULT_SEEDS} own seeds)"
    print(f"| case | fresh mean | before (20 shared seeds) | {plan_column} | forecast (200) |")
    print("|---|---|---|---|---|")
    for row in rows:
        cells = [_cell(row[k]) for k in ("before", "plan", "forecast")]
        unseen = f"{row['fresh_mean']:.3f} ({row['fresh']} runs)"
        print(f"| {row['case']} | {unseen} | " + " | ".join(cells) + " |")
    loads = f"load {result['load_before']:.1f} → {result['load_after']:.1f}"
    print(f"{loads}, {result['wall_s']:.0f} s wall")


def _cell(figure: dict[str, float]) -> str:
    mean = f"mean {figure['mean']:.3f} ({figure['gap_se']:+.1f} se)"
    return f"{figure['covered']:.0%} covered, {mean}"


if __name__ == "__main__":
    main()
