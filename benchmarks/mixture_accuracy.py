"""Accuracy of the K-component models `gmmk` and `lca` by mechanism (issue 44; docs/RESULTS.md,
"K-component models (gmmk, lca): accuracy by mechanism").

    python benchmarks/mixture_accuracy.py [--seeds 10] [--rounds 10 50]
        [--mechanisms none,hospital,central,local,secagg,local-clip,central-clip]
        [--models gmmk,lca] [--tau-factors 0.25 0.5 1 2 4] [--json]

Each cell is the mean ± sd over seeds 0..S-1 of the final error of one `ldpem simulate
--json` run as a subprocess (exactly the command the table prints), ε = 1, δ = n^-1.1,
n = 2·10⁵ records dealt at random to 4 hospitals, partitioned over T rounds:

* gmmk, K = 3, d = 5, σ = 1, separation 3σ (`--snr 3`: every pair of the three means is
  snr·σ apart, docs/MATH.md §7);
* lca, K = 3, d = 10 items, `--snr 3` (item probabilities 0.82 and 0.18), no missing item.

τ is each model's default (`default_tau`, docs/MATH.md (7.4), (7.7)); with
`--tau-factors` every cell is repeated with `--tau` at each factor times that default
(the sweep behind the rules, docs/RESULTS.md).

Two trivial estimates come with each row: the public start β⁰ (`initial_error`, what
every run starts from; it depends on the seed) and β = 0 (error ‖β*‖, the weight logits
centred, the same for every seed). The issue's targets: hospital ≤ 1.5 × central (a trusted
curator at the same ε), and local below the smaller trivial error; hospital against the
non-private (`none`) row is printed as well, for information.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import numpy as np
from _fedkit import machine

from ldpem.common.models import get_model

#: The two settings of the table: the model's own arguments.
CASES: dict[str, list[str]] = {
    "gmmk": ["--model", "gmmk", "--components", "3", "--d", "5", "--snr", "3"],
    "lca": ["--model", "lca", "--components", "3", "--d", "10", "--snr", "3"],
}
COMMON = ["--n", "200000", "--hospitals", "4", "--epsilon", "1", "--draws", "0"]
MECHANISMS = "none,hospital,central,local,secagg,local-clip,central-clip"
#: The issue's target: hospital-level DP within this factor of a trusted curator's error
#: (the `central` mechanism at the same ε).
HOSPITAL_FACTOR = 1.5


def simulate(argv: list[str]) -> dict[str, Any]:
    """One `ldpem simulate --json` run as a subprocess: its outcome object."""
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", "simulate", *argv, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


def command(model: str, mechanism: str, rounds: int) -> list[str]:
    """The arguments of one cell, the seed left out."""
    return [*CASES[model], *COMMON, "--rounds", str(rounds), "--mechanism", mechanism]


def zero_error(outcome: dict[str, Any]) -> float:
    """The error of β = 0 against the run's β*: ‖β*‖ with the weight logits centred."""
    model = get_model(outcome["model"], {"components": 3})
    beta_star = np.asarray(outcome["beta_star"], dtype=np.float64)
    return model.error(np.zeros_like(beta_star), beta_star)


def default_tau(model: str) -> float:
    """The model's default τ at its setting (B = snr·σ = 3, σ = 1, the case's d)."""
    arguments = CASES[model]
    d = int(arguments[arguments.index("--d") + 1])
    return get_model(model, {"components": 3}).default_tau(beta_bound=3.0, sigma=1.0, d=d)


def cell(
    model: str, mechanism: str, rounds: int, seeds: int, tau_factor: float | None = None
) -> dict[str, Any]:
    """Mean and sd over seeds of the final error, of β⁰'s error and of β = 0's; τ the
    default, or ``tau_factor`` times it."""
    argv = command(model, mechanism, rounds)
    if tau_factor is not None:
        argv += ["--tau", repr(tau_factor * default_tau(model))]
    outcomes = [simulate([*argv, "--seed", str(seed)]) for seed in range(seeds)]
    errors = np.array([o["error"] for o in outcomes])
    starts = np.array([o["initial_error"] for o in outcomes])
    zeros = np.array([zero_error(o) for o in outcomes])
    return {
        "model": model,
        "mechanism": mechanism,
        "rounds": rounds,
        "seeds": seeds,
        "tau": outcomes[0]["tau"],
        "tau_factor": tau_factor,
        "command": "ldpem simulate " + " ".join(argv) + f" --seed S --json  # S = 0..{seeds - 1}",
        "mean": float(errors.mean()),
        "sd": float(errors.std(ddof=1)),
        "errors": errors.round(4).tolist(),
        "start_mean": float(starts.mean()),
        "start_sd": float(starts.std(ddof=1)),
        "zero": float(zeros.mean()),
        "parameters": len(outcomes[0]["beta"]),
    }


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's two targets for each model and T, against the rows just measured, and
    hospital against the non-private row (information, no target: ``met`` is None)."""
    found = []
    for model in CASES:
        for rounds in sorted({r["rounds"] for r in rows}):
            by = {
                r["mechanism"]: r
                for r in rows
                if r["model"] == model and r["rounds"] == rounds and r.get("tau_factor") is None
            }
            if "central" in by and "hospital" in by:
                ratio = by["hospital"]["mean"] / by["central"]["mean"]
                found.append(
                    {
                        "model": model,
                        "rounds": rounds,
                        "target": f"hospital <= {HOSPITAL_FACTOR} x central",
                        "value": round(ratio, 3),
                        "met": ratio <= HOSPITAL_FACTOR,
                    }
                )
            if "none" in by and "hospital" in by:
                found.append(
                    {
                        "model": model,
                        "rounds": rounds,
                        "target": "hospital / none (information)",
                        "value": round(by["hospital"]["mean"] / by["none"]["mean"], 3),
                        "met": None,
                    }
                )
            if "local" in by:
                local = by["local"]
                trivial = min(local["start_mean"], local["zero"])
                found.append(
                    {
                        "model": model,
                        "rounds": rounds,
                        "target": "local < trivial (the smaller of beta0 and beta = 0)",
                        "value": f"{local['mean']:.3g} vs {trivial:.3g}",
                        "met": local["mean"] < trivial,
                    }
                )
    return found


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table docs/RESULTS.md shows."""
    lines = [
        "| model | T | mechanism | τ | mean ± sd | median | β⁰ (start) | β = 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        # Rows recorded before 2026-12-08 carry no τ: the default of their day.
        tau = "default" if "tau" not in r else f"{r['tau']:.3g}"
        factor = "" if r.get("tau_factor") is None else f" ({r['tau_factor']:g}×)"
        lines.append(
            f"| {r['model']} | {r['rounds']} | {r['mechanism']} | {tau}{factor}"
            f" | {r['mean']:.3g} ± {r['sd']:.2g}"
            f" | {float(np.median(r['errors'])):.3g}"
            f" | {r['start_mean']:.3g} ± {r['start_sd']:.2g} | {r['zero']:.3g} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..S-1 per cell")
    parser.add_argument("--rounds", type=int, nargs="+", default=[10, 50], help="T values")
    parser.add_argument("--mechanisms", default=MECHANISMS, help="comma-separated")
    parser.add_argument("--models", default=",".join(CASES), help="comma-separated")
    parser.add_argument(
        "--tau-factors",
        type=float,
        nargs="+",
        default=None,
        help="run every cell with --tau at each factor times the model's default",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object at the end")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error(f"--seeds must be at least 2 (an sd), got {args.seeds}")
    for factor in args.tau_factors or []:
        if not factor > 0:
            parser.error(f"--tau-factors must be > 0, got {factor}")
    started = machine()
    rows = []
    for model in args.models.split(","):
        for rounds in args.rounds:
            for mechanism in args.mechanisms.split(","):
                for factor in args.tau_factors or [None]:
                    row = cell(model, mechanism, rounds, args.seeds, factor)
                    rows.append(row)
                    if not args.json:
                        print(json.dumps(row), flush=True)
    found = verdicts(rows)
    if args.json:
        print(json.dumps({"machine": started, "rows": rows, "verdicts": found}))
        return 0
    print(json.dumps({"machine": started}))
    print(table(rows))
    for verdict in found:
        print(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
