"""The confidence region on real data: RAND Health Insurance Experiment, RMC (issue 31).

The RAND HIE extract that statsmodels ships (``statsmodels.datasets.randhie``, public
domain; 20,190 people, Cameron and Trivedi 2005) as a regression with missing covariates:
the response log(1 + mdvis) (outpatient visits), the 9 covariates (lncoins, idp, lpi,
fmde, physlm, disea, hlthg, hlthf, hlthp), prepared as ``ldpem experiment``'s Figure 8
prepares a regression (``experiment_data.missing_covariates_dataset``: covariates
whitened, response standardised, 10% of covariates removed, σ the least-squares residual
std, B = ‖β_OLS‖ as Figure 8's oracle bound). For each mechanism, ``--runs`` private runs
(seeds 0, 1, …; 4 hospitals of 10/20/30/40% for ``hospital``), each with its region from
``--draws`` bootstrap draws, and the question of issue 31: does the region cover the
non-private estimate (the same study with mechanism ``none``, same seed) and the complete
data's least-squares fit? The bootstrap's synthetic covariates are the model's Gaussian
ones, not these: the figures say how much that assumption costs on real data.

Usage: python benchmarks/confidence_randhie.py [--csv randhie.csv] [--runs 50]
       [--draws 99] [--mechanisms hospital central local] [--json]
(without --csv, the file of an installed statsmodels: pip install statsmodels)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

from ldpem.common.planning.confidence import confidence_region
from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.study import Dataset, Study, run_study
from ldpem.experiment.data import missing_covariates_dataset

COVARIATES = ("lncoins", "idp", "lpi", "fmde", "physlm", "disea", "hlthg", "hlthf", "hlthp")
SHARES = (0.1, 0.2, 0.3, 0.4)


def load(csv: Path | None) -> tuple[Dataset, float]:
    """The prepared data set and its σ (module docstring)."""
    if csv is None:
        from importlib.resources import files

        csv = Path(str(files("statsmodels.datasets.randhie") / "randhie.csv"))
    table = np.genfromtxt(csv, delimiter=",", names=True)
    features = np.column_stack([table[name] for name in COVARIATES]).astype(np.float64)
    target = np.log1p(table["mdvis"].astype(np.float64))
    return missing_covariates_dataset(features, target, 0.1, np.random.default_rng([0, 31]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--draws", type=int, default=99)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--mechanisms", nargs="+", default=["hospital", "central", "local"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data, sigma = load(args.csv)
    assert data.beta_star is not None
    n, d = data.records.n, data.records.d
    bound = float(np.linalg.norm(data.beta_star))
    rows = []
    with make_executor(workers=args.workers) as executor:
        for mechanism in args.mechanisms:
            sizes = None
            if mechanism == "hospital":
                sizes = tuple(int(s * n) for s in SHARES)
                sizes = (*sizes[:-1], n - sum(sizes[:-1]))
            base = Study(
                model="rmc", mechanism=mechanism, n=n, d=d, sigma=sigma, beta_bound=bound,
                epsilon=args.epsilon, missing=0.1, sizes=sizes,
            )  # fmt: skip
            covers_plain, covers_ols, inside_plain, width, radius, gap = [], [], [], [], [], []
            for seed in range(args.runs):
                private = run_study(replace(base, seed=seed), data=data)
                plain = run_study(replace(base, mechanism="none", seed=seed), data=data).estimate
                region = confidence_region(
                    private, level=args.level, draws=args.draws, seed=seed, executor=executor
                )
                low, high = np.array(region.low), np.array(region.high)
                covers_plain.append(np.mean((low <= plain) & (plain <= high)))
                covers_ols.append(np.mean((low <= data.beta_star) & (data.beta_star <= high)))
                inside_plain.append(np.linalg.norm(plain - private.estimate) <= region.radius)
                width.append(np.mean(high - low))
                radius.append(region.radius)
                gap.append(np.linalg.norm(plain - private.estimate))
            rows.append(
                {
                    "mechanism": mechanism,
                    "runs": args.runs,
                    "draws": args.draws,
                    "coordinates_cover_nonprivate": float(np.mean(covers_plain)),
                    "radius_covers_nonprivate": float(np.mean(inside_plain)),
                    "coordinates_cover_ols": float(np.mean(covers_ols)),
                    "mean_width": float(np.mean(width)),
                    "mean_radius": float(np.mean(radius)),
                    "mean_distance_to_nonprivate": float(np.mean(gap)),
                }
            )
            print(rows[-1], file=sys.stderr, flush=True)
    result = {"machine": machine(), "n": n, "d": d, "sigma": sigma, "beta_bound": bound}
    result["level"], result["epsilon"], result["rows"] = args.level, args.epsilon, rows
    if args.json:
        print(json.dumps(result))
        return
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    print("| mechanism | runs | B | coordinates cover non-private | radius covers non-private "
          "| coordinates cover OLS | mean width | mean radius | mean ‖β̂ − β̂_np‖ |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mechanism']} | {r['runs']} | {r['draws']} | "
            f"{r['coordinates_cover_nonprivate']:.3f} | {r['radius_covers_nonprivate']:.3f} | "
            f"{r['coordinates_cover_ols']:.3f} | {r['mean_width']:.4f} | "
            f"{r['mean_radius']:.4f} | {r['mean_distance_to_nonprivate']:.4f} |"
        )


if __name__ == "__main__":
    main()
