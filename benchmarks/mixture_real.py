"""gmmk and lca on the public data sets of tests/data/ under privacy (issue 44; docs/RESULTS.md,
"K-component models on public data").

    python benchmarks/mixture_real.py [--seeds 10] [--rounds 10] [--hospitals 3]
        [--mechanisms none,hospital,central,local] [--json]

For each data set: the non-private fit (full batch, every record in every round, run to
convergence as tests/common/models/test_mixtures_real.py runs it), then each private
mechanism at ε = 1, δ = n^-1.1, T rounds over partitioned records dealt at random to
``--hospitals`` hospitals, seeds 0..S-1; the error of each run's estimate is against the
non-private fit (up to a relabelling of the components). Beside them the errors of the
public start β⁰ and of β = 0 against the same fit.

* iris (gmmk, K = 3): records centred at their mean, σ = the pooled within-species
  standard deviation (0.390 cm), declared bound B = 3 cm on each mean's norm;
* Stouffer–Toby (lca, K = 2, 4 items): as they are.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from _fedkit import machine

from ldpem.common.models import Records, get_model
from ldpem.common.planning.study import Dataset, Study, run_study

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
MEASUREMENTS = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def iris() -> tuple[np.ndarray, float]:
    """The 150 × 4 measurements centred at their mean, and the pooled within-species σ."""
    with (DATA / "iris.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    y = np.array([[float(row[name]) for name in MEASUREMENTS] for row in rows])
    species = np.array([row["species"] for row in rows])
    groups = np.unique(species)
    squares = sum(((y[species == s] - y[species == s].mean(axis=0)) ** 2).sum() for s in groups)
    sigma = float(np.sqrt(squares / ((y.shape[0] - len(groups)) * y.shape[1])))
    return y - y.mean(axis=0), sigma


def cases() -> list[tuple[str, Records, Study, int]]:
    """(name, records, the non-private study, copies of each record its fit needs)."""
    y, sigma = iris()
    values = np.loadtxt(DATA / "stouffer_toby.csv", delimiter=",", skiprows=1)
    gmmk = Study(
        model="gmmk",
        mechanism="none",
        rounds=150,
        reuse=True,
        hospitals=1,
        sigma=sigma,
        beta_bound=3.0,
        seed=0,
        model_options=(("components", 3),),
    )
    lca = Study(
        model="lca",
        mechanism="none",
        rounds=2000,
        reuse=True,
        hospitals=1,
        seed=0,
        model_options=(("components", 2),),
    )
    # A study needs n >= rounds: ten copies of each record leave every iterate unchanged.
    return [("iris", Records(y), gmmk, 1), ("stouffer-toby", Records(values), lca, 10)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..S-1 per mechanism")
    parser.add_argument("--rounds", type=int, default=10, help="T of the private runs")
    parser.add_argument("--hospitals", type=int, default=3, help="hospitals of the private runs")
    parser.add_argument(
        "--mechanisms", default="none,hospital,central,local", help="comma-separated"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object at the end")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error(f"--seeds must be at least 2 (an sd), got {args.seeds}")
    rows: list[dict[str, Any]] = []
    for name, records, reference, copies in cases():
        copied = Records(np.repeat(records.x, copies, axis=0))
        fit = run_study(reference, data=Dataset(copied)).estimate
        options = dict(reference.model_options)
        model = get_model(reference.model, options)
        zero = model.error(np.zeros_like(fit), fit)
        for mechanism in args.mechanisms.split(","):
            study = replace(
                reference,
                mechanism=mechanism,
                rounds=args.rounds,
                reuse=False,
                hospitals=args.hospitals,
                epsilon=1.0,
            )
            runs = [
                run_study(replace(study, seed=seed), data=Dataset(records, beta_star=fit))
                for seed in range(args.seeds)
            ]
            errors = np.array([run.estimate_error for run in runs])
            starts = np.array([run.initial_error for run in runs], dtype=np.float64)
            row = {
                "data": name,
                "model": reference.model,
                "components": options["components"],
                "n": records.n,
                "mechanism": mechanism,
                "rounds": args.rounds,
                "hospitals": args.hospitals,
                "mean": float(errors.mean()),
                "sd": float(errors.std(ddof=1)),
                "start_mean": float(starts.mean()),
                "zero": zero,
                "fit": fit.round(4).tolist(),
            }
            rows.append(row)
            if not args.json:
                print(json.dumps(row), flush=True)
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}))
        return 0
    print(json.dumps({"machine": machine()}))
    print("| data (model, K) | mechanism | error vs non-private fit | β⁰ | β = 0 |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['data']} ({r['model']}, K = {r['components']}, n = {r['n']}) | "
            f"{r['mechanism']} | {r['mean']:.3g} ± {r['sd']:.2g} | {r['start_mean']:.3g} | "
            f"{r['zero']:.3g} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
