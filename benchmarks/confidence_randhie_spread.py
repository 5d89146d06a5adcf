"""Why the bootstrap's region misses on the RAND HIE: real covariates against Gaussian ones.

benchmarks/confidence_randhie.py finds the hospital and central regions too narrow on the
HIE (docs/RESULTS.md). This script separates the causes on three data sets with the HIE's
n, d, σ and B (as benchmarks/confidence_randhie.py prepares them):

* ``real``: the HIE itself;
* ``xreal``: its whitened covariates (same missing entries; a missing entry of the
  response's x drawn from its column's observed values), response x·β_OLS + σ·N(0, 1):
  real covariates, the model's response;
* ``gauss``: x ~ N(0, I_d), 10% missing, response x·β_OLS + σ·N(0, 1): what the bootstrap
  draws.

For each data set and mechanism, ``--runs`` seeds of the private study and of mechanism
``none`` at the same seed: the private estimate's offset from the non-private one, its
mean over seeds (the bias, with the largest |mean|/standard error over coordinates), its
spread √(Σ_j var_j) and per-coordinate standard deviations. Then the covariates' fourth
moments (3 for a Gaussian), the share of gradient coordinates the truncation cuts at
β_OLS, and per coordinate E[1{|g_j| < s}·x_j²] at β_OLS: the share
of x_j's second moment carried by records whose gradient coordinate the mechanism does
not truncate (s its scale). The full gradient step's pull back to the estimate along j is
E[x_j²] = 1 for whitened covariates; truncation keeps only this share of it.

Usage: python benchmarks/confidence_randhie_spread.py --csv randhie.csv [--runs 20] [--json]
(the csv as for benchmarks/confidence_randhie.py; the hospital mechanism's s is its first
hospital's, 10% of the records)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine
from confidence_randhie import SHARES, load

from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.models import get_model
from ldpem.common.models.base import Records
from ldpem.common.planning.study import Dataset, Study, run_study


def data_sets(data: Dataset, sigma: float, rng: np.random.Generator) -> dict[str, Dataset]:
    """The three data sets of the module docstring."""
    x = data.records.x
    assert data.beta_star is not None
    beta = data.beta_star
    n, d = x.shape
    filled = x.copy()
    for j in range(d):
        column = filled[:, j]
        observed = column[~np.isnan(column)]
        column[np.isnan(column)] = rng.choice(observed, size=int(np.isnan(column).sum()))
    real_response = filled @ beta + sigma * rng.standard_normal(n)
    gaussian = rng.standard_normal((n, d))
    response = gaussian @ beta + sigma * rng.standard_normal(n)
    gaussian[rng.random((n, d)) < 0.1] = np.nan
    return {
        "real": data,
        "xreal": Dataset(Records(x, real_response), beta),
        "gauss": Dataset(Records(gaussian, response), beta),
    }


def study(mechanism: str, n: int, d: int, sigma: float, bound: float) -> Study:
    sizes = None
    if mechanism == "hospital":
        sizes = tuple(int(s * n) for s in SHARES)
        sizes = (*sizes[:-1], n - sum(sizes[:-1]))
    return Study(
        model="rmc", mechanism=mechanism, n=n, d=d, sigma=sigma, beta_bound=bound,
        epsilon=1.0, missing=0.1, sizes=sizes,
    )  # fmt: skip


def offsets(base: Study, data: Dataset, runs: int) -> dict[str, object]:
    """The private estimate's offsets from the non-private one over ``runs`` seeds."""
    found = []
    for seed in range(runs):
        private = run_study(replace(base, seed=seed), data=data).estimate
        plain = run_study(replace(base, mechanism="none", seed=seed), data=data).estimate
        found.append(private - plain)
    gaps = np.array(found)
    bias = gaps.mean(axis=0)
    std = gaps.std(axis=0, ddof=1)
    return {
        "bias_norm": float(np.linalg.norm(bias)),
        "bias_over_se_max": float(np.max(np.abs(bias) / (std / math.sqrt(runs)))),
        "spread": float(math.sqrt(np.sum(std**2))),
        "mean_distance": float(np.mean(np.linalg.norm(gaps, axis=1))),
        "std_per_coordinate": std.round(4).tolist(),
    }


def truncated(data: Dataset, sigma: float, scale: float) -> dict[str, object]:
    """At β_OLS: the share of gradient coordinates beyond s, and E[1{|g_j| < s}·x_j²] per
    coordinate (module docstring), x_j = 0 where missing."""
    assert data.beta_star is not None
    gradients = get_model("rmc").gradients(data.beta_star, data.records, sigma)
    x = np.nan_to_num(data.records.x)
    kept = np.abs(gradients) < scale
    return {
        "share_cut": float(np.mean(~kept)),
        "kept_second_moment": np.mean(kept * x * x, axis=0).round(3).tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data, sigma = load(args.csv)
    assert data.beta_star is not None
    n, d = data.records.n, data.records.d
    bound = float(np.linalg.norm(data.beta_star))
    sets = data_sets(data, sigma, np.random.default_rng(7))
    fourth = np.nanmean(data.records.x**4, axis=0).round(1).tolist()
    rows = []
    for mechanism in ("hospital", "central"):
        base = study(mechanism, n, d, sigma, bound)
        truncation = run_study(replace(base, seed=0), data=data).mechanism
        assert isinstance(truncation, LocalTruncation)  # hospital and central truncate
        scale = truncation.scale
        for name, chosen in sets.items():
            row: dict[str, object] = {"mechanism": mechanism, "data": name, "scale": scale}
            row |= offsets(base, chosen, args.runs)
            row |= truncated(chosen, sigma, scale)
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    result = {"machine": machine(), "n": n, "d": d, "sigma": sigma, "beta_bound": bound}
    result |= {"runs": args.runs, "fourth_moment": fourth, "rows": rows}
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
