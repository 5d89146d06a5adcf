"""Accuracy of the hospital-level mechanism against local and central (docs/RESULTS.md).

Prints, and writes as CSV and PNG under docs/results/:

* acceptance: mean final error over seeds 0..9 of `ldpem simulate --json` (run as a
  subprocess, exactly the command) for GMM, d = 10, ε = 1, δ = n^-1.1, T = 10;
* error against n (K = 4 equal hospitals) for local, hospital and central;
* error against K (equal hospitals, n fixed) for hospital, with local and central (which
  do not depend on K) as references.

Usage: python benchmarks/hospital_accuracy.py [--seeds 5] [--models gmm,mrm,rmc] [--skip-acceptance]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ldpem.common.planning.study import Study, run_study

#: One line of the CSV files: model, mechanism, n, hospitals, mean error, its sd, seeds.
Row = tuple[str, str, int, int, float, float, int]

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
N_GRID = (20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
K_GRID = (1, 2, 4, 10, 30, 100)


def cli_error(argv: list[str], seed: int) -> float:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ldpem",
            "simulate",
            *argv,
            "--seed",
            str(seed),
            "--draws",
            "0",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout)["error"])


def acceptance() -> list[dict[str, object]]:
    rows = []
    cases = [
        ("hospital", 200_000, 4, 0.05),
        ("hospital", 20_000, 3, 0.16),
        ("local", 200_000, 1, 0.42),
    ]
    for mechanism, n, k, target in cases:
        argv = ["--model", "gmm", "--d", "10", "--epsilon", "1", "--rounds", "10"]
        argv += ["--mechanism", mechanism, "--n", str(n), "--hospitals", str(k)]
        errors = [cli_error(argv, seed) for seed in range(10)]
        row = {
            "mechanism": mechanism,
            "n": n,
            "hospitals": k,
            "mean": float(np.mean(errors)),
            "sd": float(np.std(errors, ddof=1)),
            "target": target,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def equal_sizes(n: int, k: int) -> tuple[int, ...]:
    base, extra = divmod(n, k)
    return tuple(base + (1 if i < extra else 0) for i in range(k))


def mean_error(study: Study, seeds: int) -> tuple[float, float]:
    finals = [run_study(replace(study, seed=s)).final_error for s in range(seeds)]
    errors = np.array(finals, dtype=float)
    return float(np.mean(errors)), float(np.std(errors, ddof=1)) if seeds > 1 else 0.0


def sweep(model: str, seeds: int) -> tuple[list[Row], list[Row]]:
    base = Study(model=model, d=10, epsilon=1.0, rounds=10)
    by_n: list[Row] = []
    for n in N_GRID:
        for mechanism in ("local", "hospital", "central"):
            config = replace(base, mechanism=mechanism, n=n, sizes=equal_sizes(n, 4))
            mean, sd = mean_error(config, seeds)
            by_n.append((model, mechanism, n, 4, mean, sd, seeds))
            print(by_n[-1], flush=True)
    by_k: list[Row] = []
    for n in (20_000, 200_000):
        for mechanism in ("local", "central"):
            mean, sd = mean_error(replace(base, mechanism=mechanism, n=n), seeds)
            by_k.append((model, mechanism, n, 1, mean, sd, seeds))
            print(by_k[-1], flush=True)
        for k in K_GRID:
            config = replace(base, mechanism="hospital", n=n, sizes=equal_sizes(n, k))
            mean, sd = mean_error(config, seeds)
            by_k.append((model, "hospital", n, k, mean, sd, seeds))
            print(by_k[-1], flush=True)
    return by_n, by_k


def write_csv(path: Path, rows: list[Row]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "mechanism", "n", "hospitals", "mean_error", "sd", "seeds"])
        writer.writerows(rows)


def plot(model: str, by_n: list[Row], by_k: list[Row]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    for mechanism, style in (("local", "o-"), ("hospital", "s-"), ("central", "^--")):
        rows = [r for r in by_n if r[1] == mechanism]
        left.plot([r[2] for r in rows], [r[4] for r in rows], style, label=mechanism)
    left.set(xscale="log", yscale="log", xlabel="n (4 equal hospitals)", ylabel="‖β − β*‖")
    left.set_title(f"{model}: error against n (d = 10, ε = 1)")
    left.legend()
    colours = {20_000: "C0", 200_000: "C1"}
    for n, colour in colours.items():
        rows = [r for r in by_k if r[1] == "hospital" and r[2] == n]
        right.plot(
            [r[3] for r in rows],
            [r[4] for r in rows],
            "s-",
            color=colour,
            label=f"hospital, n = {n:,}",
        )
        for mechanism, line in (("local", ":"), ("central", "--")):
            ref = next(r for r in by_k if r[1] == mechanism and r[2] == n)
            right.axhline(
                ref[4],
                color=colour,
                linestyle=line,
                linewidth=0.9,
                label=f"{mechanism}, n = {n:,}",
            )
    right.set(xscale="log", yscale="log", xlabel="hospitals K (equal sizes)", ylabel="‖β − β*‖")
    right.set_title(f"{model}: error against K")
    right.legend(fontsize=7)
    figure.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.9, wspace=0.25)
    figure.savefig(OUT / f"hospital-{model}.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--models", default="gmm,mrm,rmc")
    parser.add_argument("--skip-acceptance", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    if not args.skip_acceptance:
        rows = acceptance()
        (OUT / "hospital-acceptance.json").write_text(json.dumps(rows, indent=2))
    for model in args.models.split(","):
        by_n, by_k = sweep(model, args.seeds)
        write_csv(OUT / f"hospital-{model}-by-n.csv", by_n)
        write_csv(OUT / f"hospital-{model}-by-k.csv", by_k)
        plot(model, by_n, by_k)
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
