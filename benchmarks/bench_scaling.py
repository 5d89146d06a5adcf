"""Scaling curves: time per round against n and against d, for the agent and the coordinator.

    python benchmarks/bench_scaling.py [--repeats 3] [--quick] [--json] [--plots docs/perf]

Issue 8, item 6. Interleaved repeats, medians, in this process:

  floor        rng.standard_normal((n, d)): drawing one Gaussian per coordinate
  agent        ``holder_round`` (GMM gradients at β, local mechanism, sum, noise) over
               n records of dimension d: one hospital's round
  coordinator  one round of the real ``Coordinator`` over a SQLite file (WAL, FULL): accept
               3 reports of n/3 records each (validation, durable commit, M-step, next round
               opened); no HTTP, see bench_coordinator.py for that

Writes scaling_n.png and scaling_d.png (matplotlib, Agg) into --plots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

from ldpem.common.models import get_model
from ldpem.common.protocol import make_mechanism
from ldpem.common.protocol.rounds import holder_round
from ldpem.common.wire import ReportIn, RunCreate, expected_round_count
from ldpem.server.coordinator import Coordinator, run_noise_std
from ldpem.server.store import Store

HOSPITALS = 3


def agent_job(n: int, d: int, rng: np.random.Generator) -> Callable[[], object]:
    model = get_model("gmm")
    records, beta_star = model.generate(n, d, rng=rng)
    mechanism = make_mechanism(
        "local",
        d=d,
        records_per_round=n,
        epsilon=1.0,
        delta=float(n) ** -1.1,
        tau=get_model("gmm").default_tau(beta_bound=3.0, sigma=1.0, d=d),
    )
    beta = beta_star + 0.1 * rng.standard_normal(d)
    return lambda: holder_round(
        model=model, beta=beta, records=records, sigma=1.0, mechanism=mechanism, rng=rng
    )


class CoordinatorRounds:
    """Rounds of one run on a real Coordinator; each call is one round of 3 reports."""

    def __init__(self, directory: Path, n: int, d: int, rounds: int) -> None:
        self.coordinator = Coordinator(
            Store(directory / f"n{n}-d{d}.sqlite"), admin_token="bench-admin-token-0000"
        )
        per = max(1, n // HOSPITALS)
        self.records, self.rounds, self.d = per * rounds, rounds, d
        request = RunCreate.model_validate(
            {
                "model": "gmm",
                "d": d,
                "sigma": 1.0,
                "rounds": rounds,
                "forecast": False,
                "round_deadline": 3600.0,
                "hospitals": [{"name": f"h{i}", "records": self.records} for i in range(HOSPITALS)],
            }
        )
        created = asyncio.run(self.coordinator.create_run(request))
        self.run_id = created.run_id
        # The run's own σ_r: the coordinator refuses less noise than its budget needs.
        self.noise_std = run_noise_std(created.params)
        self.hospitals = self.coordinator.store.hospitals(self.run_id)
        self.t = 0

    def __call__(self) -> None:
        t = self.t
        count = expected_round_count(self.records, self.rounds, t)
        reports = [
            ReportIn(
                hospital=h.name,
                round=t,
                mechanism="local",
                count=count,
                total=[0.01] * self.d,
                noise_std=self.noise_std,
            )
            for h in self.hospitals
        ]

        async def one_round() -> None:
            await asyncio.gather(
                *(
                    self.coordinator.submit_report(self.run_id, t, h, r)
                    for h, r in zip(self.hospitals, reports, strict=True)
                )
            )

        asyncio.run(one_round())
        self.t += 1

    def close(self) -> None:
        self.coordinator.store.close()


def measure(
    points: list[tuple[int, int]], repeats: int, directory: Path, seed: int
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for n, d in points:
        rounds_needed = repeats + 1
        coordinator = CoordinatorRounds(directory, n, d, rounds_needed)
        jobs: dict[str, Callable[[], object]] = {
            "floor": partial(rng.standard_normal, (n, d)),
            "agent": agent_job(n, d, rng),
            "coordinator": coordinator,
        }
        for job in jobs.values():  # warm-up: the mechanism's table for β_s, SQLite pages
            job()
        samples: dict[str, list[float]] = {name: [] for name in jobs}
        for _ in range(repeats):
            for name, job in jobs.items():
                started = time.perf_counter()
                job()
                samples[name].append(time.perf_counter() - started)
        coordinator.close()
        row: dict[str, Any] = {"n": n, "d": d}
        row.update({f"{k}_s": statistics.median(v) for k, v in samples.items()})
        row["agent_ratio"] = row["agent_s"] / row["floor_s"]
        rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], key: str, fixed: str, path: Path) -> str | None:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=(6, 4))
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    xs = [r[key] for r in rows]
    labels = {
        "agent_s": "agent: holder_round",
        "coordinator_s": f"coordinator: round of {HOSPITALS} reports",
        "floor_s": "floor: standard_normal((n, d))",
    }
    for name, label in labels.items():
        axes.plot(xs, [r[name] for r in rows], marker="o", label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(key)
    axes.set_ylabel("seconds per round (median)")
    axes.set_title(f"time per round vs {key} ({fixed})")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--ns", type=int, nargs="+", default=[10_000, 30_000, 100_000, 300_000, 1_000_000]
    )
    parser.add_argument("--ds", type=int, nargs="+", default=[2, 5, 10, 20, 50, 100])
    parser.add_argument("--n-for-d", type=int, default=100_000)
    parser.add_argument("--d-for-n", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plots", type=Path, default=None, help="directory for the PNGs")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.ns, args.ds, args.n_for_d, args.repeats = [1_000, 4_000], [2, 8], 2_000, 1
    before = machine()
    with tempfile.TemporaryDirectory(prefix="ldpem-bench-scaling-") as tmp:
        directory = Path(tmp)
        by_n = measure([(n, args.d_for_n) for n in args.ns], args.repeats, directory, args.seed)
        by_d = measure([(args.n_for_d, d) for d in args.ds], args.repeats, directory, args.seed)
    plots = {}
    if args.plots is not None:
        args.plots.mkdir(parents=True, exist_ok=True)
        plots["n"] = plot(by_n, "n", f"d = {args.d_for_n}", args.plots / "scaling_n.png")
        plots["d"] = plot(by_d, "d", f"n = {args.n_for_d}", args.plots / "scaling_d.png")
    result = {
        "machine": before,
        "load_after": machine()["loadavg"],
        "repeats": args.repeats,
        "by_n": by_n,
        "by_d": by_d,
        "plots": plots,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        for title, rows in (("vs n", by_n), ("vs d", by_d)):
            print(title)
            for r in rows:
                print(
                    f"  n={r['n']:>8} d={r['d']:>4}  floor {r['floor_s'] * 1e3:8.2f} ms  "
                    f"agent {r['agent_s'] * 1e3:8.2f} ms ({r['agent_ratio']:.1f}x)  "
                    f"coordinator {r['coordinator_s'] * 1e3:7.2f} ms"
                )
        print(f"load {before['loadavg']} -> {result['load_after']}; plots {plots or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
