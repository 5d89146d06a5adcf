"""Federated overhead and round latency: real processes on 127.0.0.1 against in-process.

    python benchmarks/bench_federated.py [--repeats 3] [--quick] [--json]

Issue 8, items 2 and 3. Each repeat runs, interleaved:

  inprocess   ``ldpem simulate --data all.npy --hospitals K`` as a process, launch to exit
              (the same records, local model, T rounds)
  start-up    1 + K interpreters importing what the coordinator and an agent import, started
              together: the floor of any run of K + 1 Python processes on this machine
  federated   ``ldpem coordinator`` + K ``ldpem client`` processes on the same records split
              into K files: wall time from launching the coordinator to the last agent's
              exit, the run's time (created → finished) and, from ``GET /v1/runs/{id}/rounds``
              (opened_at, closed_at), round 0 (includes the agents' start-up) and the later
              rounds' latency
  latency     the Flower comparison job (GMM, d = 10, 2·10⁵ records over 3 hospitals,
              10 rounds) as real processes: per-round latency after start-up
  demo        ``ldpem demo --hospitals 3 --records 200000``: launch to exit
  floor       in this process, on one round's records: the bare numpy work (per-record
              gradients, clipping, Gaussian noise) and ldpem's ``holder_round``

Absolute seconds are this run's only (the machine is shared); compare ratios.
Targets: federated ≤ 1.3× in-process; ≤ 0.15 s per round after start-up; demo ≤ 10 s.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import (
    Processes,
    create_run,
    machine,
    memory_kib,
    rounds,
    start_agents,
    start_coordinator,
    summary,
    wait_finished,
    write_hospital_files,
)

from ldpem.common.models import Records, get_model
from ldpem.common.protocol import make_mechanism
from ldpem.common.protocol.rounds import holder_round


def equal_sizes(n: int, k: int) -> list[int]:
    return [len(part) for part in np.array_split(np.arange(n), k)]


def generate(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    records, beta_star = get_model("gmm").generate(n, d, rng=np.random.default_rng(seed))
    return np.ascontiguousarray(records.x), beta_star


def run_inprocess(
    workdir: Path, data: Path, hospitals: int, rounds_: int, seed: int
) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "ldpem",
        "simulate",
        "--data",
        str(data),
        "--model",
        "gmm",
        "--mechanism",
        "local",
        "--hospitals",
        str(hospitals),
        "--rounds",
        str(rounds_),
        "--seed",
        str(seed),
        # The run alone, as the federated side: no confidence region.
        "--draws",
        "0",
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=True, cwd=workdir)
    wall = time.perf_counter() - started
    outcome = json.loads(done.stdout)
    return {"wall": wall, "seconds": outcome["seconds"]}


def run_federated(
    workdir: Path,
    x: np.ndarray,
    sizes: list[int],
    rounds_: int,
    seed: int,
    *,
    forecast: bool,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Coordinator + agents as processes on the records ``x`` split by ``sizes``."""
    workdir.mkdir(parents=True)
    hospitals = write_hospital_files(workdir, x, sizes)
    n, d = x.shape
    delta = float(n) ** -1.1
    tokens = {name: f"bench-{name}-token-{seed:08d}-{id(workdir):x}" for name, _, _ in hospitals}
    processes = Processes(workdir / "logs")
    try:
        launched = time.perf_counter()
        coordinator, url = start_coordinator(processes, workdir / "coordinator.sqlite")
        healthy = time.perf_counter()
        request = {
            "model": "gmm",
            "d": d,
            "sigma": 1.0,
            "rounds": rounds_,
            "mechanism": "local",
            "epsilon": 1.0,
            "delta": delta,
            "seed": seed,
            "forecast": forecast,
            "hospitals": [
                {"name": name, "records": count, "token": tokens[name]}
                for name, _, count in hospitals
            ],
        }
        run_id = create_run(url, request)["run_id"]
        created = time.perf_counter()
        start_agents(processes, url, hospitals, tokens, epsilon=1.0, delta=delta, seed=seed)
        info = wait_finished(url, run_id, processes, timeout)
        finished = time.perf_counter()
        if not processes.wait([name for name, _, _ in hospitals], timeout=60):
            raise RuntimeError(f"run {run_id}: agents still running 60 s after the end")
        exited = time.perf_counter()
        if info["status"] != "finished" or processes.failed():
            raise RuntimeError(f"run {run_id}: {info['status']} {processes.failed()}")
        table = rounds(url, run_id)
        memory = memory_kib(coordinator.pid)
    finally:
        processes.stop()
    durations = [r["closed_at"] - r["opened_at"] for r in table]
    return {
        "wall": exited - launched,
        "coordinator_start": healthy - launched,
        "create": created - healthy,
        "run": finished - created,
        "round0": durations[0],
        "later_rounds": durations[1:],
        "coordinator_kib": memory,
    }


def process_floor(hospitals: int) -> float:
    """Wall time for 1 + K interpreters importing what the coordinator and the agents import,
    started together: the start-up a run of real processes cannot avoid on this machine."""
    imports = {
        "coordinator": "import ldpem.cli, ldpem.server.app, uvicorn",
        "agent": "import ldpem.cli, ldpem.client.agent",
    }
    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, "-c", imports["coordinator"]])]
    children += [
        subprocess.Popen([sys.executable, "-c", imports["agent"]]) for _ in range(hospitals)
    ]
    for child in children:
        child.wait()
    return time.perf_counter() - started


def run_demo(workdir: Path, records: int, hospitals: int, rounds_: int) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "ldpem",
        "demo",
        "--hospitals",
        str(hospitals),
        "--records",
        str(records),
        "--d",
        "10",
        "--rounds",
        str(rounds_),
        "--workdir",
        str(workdir),
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=True)
    wall = time.perf_counter() - started
    result = json.loads(done.stdout)
    with sqlite3.connect(f"file:{workdir / 'coordinator.sqlite'}?mode=ro", uri=True) as db:
        table = db.execute("SELECT opened_at, closed_at FROM rounds ORDER BY t").fetchall()
    durations = [closed - opened for opened, closed in table]
    return {
        "wall": wall,
        "seconds": result["seconds"],
        "round0": durations[0],
        "later_rounds": durations[1:],
    }


def floors(x: np.ndarray, rounds_: int, sizes: list[int], repeats: int) -> dict[str, float]:
    """Per round, on that round's records (n/T): bare numpy vs ldpem's holder_round."""
    n, d = x.shape
    model = get_model("gmm")
    rng = np.random.default_rng(1)
    beta = rng.standard_normal((d,))
    m = n // rounds_
    mechanism = make_mechanism(
        "local",
        d=d,
        records_per_round=m,
        epsilon=1.0,
        delta=float(n) ** -1.1,
        tau=get_model("gmm").default_tau(beta_bound=3.0, sigma=1.0, d=d),
    )
    round_x = x[:m]

    def bare() -> None:
        # What a per-record clip-and-noise job does in plain numpy: gradient, clip, noise, sum.
        inner = round_x @ beta
        weights = 2.0 / (1.0 + np.exp(-2.0 * inner)) - 1.0
        gradients = weights[:, None] * round_x - beta
        norms = np.maximum(np.linalg.norm(gradients, axis=1) / 1.0, 1.0)
        noisy = gradients / norms[:, None] + rng.standard_normal((m, d))
        noisy.sum(axis=0)

    groups = []
    start = 0
    for size in sizes:
        per = size // rounds_
        groups.append(Records(x[start : start + per]))
        start += size

    def ldpem_round() -> None:
        for group in groups:
            holder_round(
                model=model, beta=beta, records=group, sigma=1.0, mechanism=mechanism, rng=rng
            )

    jobs: dict[str, Callable[[], None]] = {"numpy_floor": bare, "holder_round": ldpem_round}
    samples: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            started = time.perf_counter()
            job()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--records", type=int, default=1_000_000, help="overhead job: n")
    parser.add_argument("--hospitals", type=int, default=10, help="overhead job: K")
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--latency-records", type=int, default=200_000)
    parser.add_argument("--latency-hospitals", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-demo", action="store_true", help="skip timing ldpem demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (smoke)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.hospitals, args.rounds = 6_000, 1, 3
        args.latency_records, args.latency_hospitals = 0, 0
        args.repeats, args.no_demo = 1, True
    say: Callable[[str], None] = (lambda s: None) if args.json else (lambda s: print(s, flush=True))
    before = machine()

    x, _ = generate(args.records, args.d, args.seed)
    sizes = equal_sizes(args.records, args.hospitals)
    latency_x: np.ndarray | None = None
    latency_sizes: list[int] = []
    if args.latency_records:
        latency_x, _ = generate(args.latency_records, 10, args.seed + 1)
        latency_sizes = equal_sizes(args.latency_records, args.latency_hospitals)
    samples: dict[str, list[dict[str, Any]]] = {
        "inprocess": [],
        "startup_floor": [],
        "federated": [],
        "latency": [],
        "demo": [],
    }
    with tempfile.TemporaryDirectory(prefix="ldpem-bench-fed-") as tmp:
        root = Path(tmp)
        data = root / "all.npy"
        np.save(data, x)
        for r in range(args.repeats):
            samples["inprocess"].append(
                run_inprocess(root, data, args.hospitals, args.rounds, args.seed)
            )
            say(f"[{r + 1}] in-process {samples['inprocess'][-1]['wall']:.2f}s")
            samples["startup_floor"].append({"wall": process_floor(args.hospitals)})
            say(f"[{r + 1}] start-up floor {samples['startup_floor'][-1]['wall']:.2f}s")
            samples["federated"].append(
                run_federated(root / f"fed-{r}", x, sizes, args.rounds, args.seed, forecast=False)
            )
            say(f"[{r + 1}] federated  {samples['federated'][-1]['wall']:.2f}s")
            if latency_x is not None:
                samples["latency"].append(
                    run_federated(
                        root / f"lat-{r}", latency_x, latency_sizes, 10, args.seed, forecast=True
                    )
                )
                later = samples["latency"][-1]["later_rounds"]
                say(f"[{r + 1}] latency    {statistics.median(later):.3f}s per round")
            if not args.no_demo:
                samples["demo"].append(
                    run_demo(root / f"demo-{r}", args.latency_records, args.latency_hospitals, 10)
                )
                say(f"[{r + 1}] demo       {samples['demo'][-1]['wall']:.2f}s")
        floor = floors(x, args.rounds, sizes, max(3, args.repeats))
        latency_floor = (
            floors(latency_x, 10, latency_sizes, max(3, args.repeats))
            if latency_x is not None
            else None
        )

    def med(name: str, key: str) -> float:
        return float(statistics.median(s[key] for s in samples[name]))

    inprocess = med("inprocess", "wall")
    federated = med("federated", "wall")
    result: dict[str, Any] = {
        "machine": before,
        "load_after": machine()["loadavg"],
        "repeats": args.repeats,
        "overhead": {
            "records": args.records,
            "hospitals": args.hospitals,
            "d": args.d,
            "rounds": args.rounds,
            "inprocess_wall": inprocess,
            "inprocess_seconds": med("inprocess", "seconds"),
            "federated_wall": federated,
            "ratio": federated / inprocess,
            "startup_floor": med("startup_floor", "wall"),
            "ratio_beyond_startup": (federated - med("startup_floor", "wall")) / inprocess,
            "later_rounds_over_inprocess_round": statistics.median(
                [v for s in samples["federated"] for v in s["later_rounds"]]
            )
            / floor["holder_round"],
            "federated_coordinator_start": med("federated", "coordinator_start"),
            "federated_run": med("federated", "run"),
            "federated_round0": med("federated", "round0"),
            "federated_later_rounds": summary(
                [v for s in samples["federated"] for v in s["later_rounds"]]
            ),
            "coordinator_kib": samples["federated"][-1]["coordinator_kib"],
            "floor_per_round": floor,
        },
    }
    if samples["latency"]:
        later = [v for s in samples["latency"] for v in s["later_rounds"]]
        assert latency_floor is not None
        result["latency"] = {
            "records": args.latency_records,
            "hospitals": args.latency_hospitals,
            "d": 10,
            "rounds": 10,
            "per_round": summary(later),
            "round0": med("latency", "round0"),
            "wall": med("latency", "wall"),
            "coordinator_start": med("latency", "coordinator_start"),
            "create_with_forecast": med("latency", "create"),
            "floor_per_round": latency_floor,
            "per_round_over_numpy_floor": statistics.median(later) / latency_floor["numpy_floor"],
        }
    if samples["demo"]:
        result["demo"] = {
            "records": args.latency_records,
            "hospitals": args.latency_hospitals,
            "wall": med("demo", "wall"),
            "walls": [s["wall"] for s in samples["demo"]],
            "per_round": summary([v for s in samples["demo"] for v in s["later_rounds"]]),
            "round0": med("demo", "round0"),
        }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        o = result["overhead"]
        print(
            f"\noverhead  n={o['records']} K={o['hospitals']} d={o['d']} T={o['rounds']}: "
            f"in-process {o['inprocess_wall']:.2f}s, federated {o['federated_wall']:.2f}s "
            f"= {o['ratio']:.2f}x; start-up floor of {o['hospitals'] + 1} interpreters "
            f"{o['startup_floor']:.2f}s; a later round = "
            f"{o['later_rounds_over_inprocess_round']:.2f}x the in-process round "
            f"(coordinator start {o['federated_coordinator_start']:.2f}s, "
            f"round 0 {o['federated_round0']:.2f}s, later rounds median "
            f"{o['federated_later_rounds'].get('median', float('nan')):.3f}s; floor per round: "
            f"numpy {floor['numpy_floor']:.4f}s, holder_round {floor['holder_round']:.4f}s)"
        )
        if "latency" in result:
            lat = result["latency"]
            print(
                f"latency   per round median {lat['per_round']['median']:.3f}s "
                f"p99 {lat['per_round']['p99']:.3f}s = "
                f"{lat['per_round_over_numpy_floor']:.1f}x the numpy floor "
                f"{lat['floor_per_round']['numpy_floor']:.4f}s; round 0 {lat['round0']:.2f}s"
            )
        if "demo" in result:
            print(f"demo      launch to exit {result['demo']['wall']:.2f}s (median)")
        print(f"load {before['loadavg']} -> {result['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
