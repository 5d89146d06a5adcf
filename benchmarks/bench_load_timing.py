"""Load time against the values: does reading the records take longer when a cell is blank?

    python benchmarks/bench_load_timing.py [--rows 100000] [--d 10] [--repeats 9]
                                           [--agent-repeats 7] [--seed 2026] [--baseline TREE]
                                           [--quick] [--json]

Issue 22. The agent reads its records before its first request, with one CSV parser that
does the same work per cell whatever the cell holds (``ldpem.client.data._read_csv``).
Four rmc files of ``--rows`` rows and ``--d`` covariates x0..x{d-1} plus the response y
(rmc accepts a missing covariate), identical but for one cell:

  complete   every cell a number
  1%         covariate x3 blank in the row at 1% of the file
  50%        … at 50%
  99%        … at 99%

(a) in process  ``ldpem.client.data.load_records(path, "rmc")``, the four files interleaved
                in a seeded random order, ``--repeats`` loads each (after one warm-up load);
                wall and CPU time of each load.
(b) end to end  the real ``ldpem client`` process (its command line as
                ``ldpem.processes.start_agent`` makes it) against a fake coordinator in this
                process (FastAPI + uvicorn in a thread on 127.0.0.1) that answers
                ``GET /v1/me`` with an rmc run of the file's size and the first round poll
                with the run's end (the agent exits 0), and records when each request
                arrives. Per agent, each with a fresh state directory:
                  start → /me     from just before the process is started to its /v1/me
                                  (the load now happens in here, before any request)
                  /me → poll      from its /v1/me to its first round poll (binding,
                                  calibration, partition: no parsing any more)
                ``--agent-repeats`` agents per file, interleaved in a seeded random order,
                after one warm-up agent.
                ``--baseline TREE``: as many agents again per file from another version,
                interleaved with these: TREE holds that version's ``ldpem`` package and goes
                first on the agents' PYTHONPATH (an agent without ``--model`` is run without
                it). For the code before issue 22 (5992414), lay its folders out as the
                installed package, as ``make typecheck`` does:
                  git archive 5992414 | tar -x -C OLD
                  mkdir -p TREE/ldpem && ln -s OLD/cli/*.py TREE/ldpem/
                  ln -s OLD/common OLD/server OLD/client TREE/ldpem/

For each file and interval: median and interquartile range; for each interval the
Kruskal–Wallis p over the four files (a small p says the files' times differ) and each
median ÷ the complete file's. The machine is shared: compare the files of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Response
from scipy.stats import kruskal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fedkit
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedkit import machine

from ldpem.client.data import load_records
from ldpem.common.models import get_model
from ldpem.processes import Processes
from tests.fedkit import live_server
from tests.publickit import published_params

#: File name → where the blank cell is (fraction of the rows), None for the complete file.
FILES: dict[str, float | None] = {"complete": None, "1%": 0.01, "50%": 0.50, "99%": 0.99}
BLANK_COLUMN = 3
RUN = "bench-load-timing"
ROUNDS = 2


def write_files(directory: Path, rows: int, d: int, seed: int) -> dict[str, Path]:
    """The four rmc CSV files (repr floats), identical but for one blank covariate."""
    records, _ = get_model("rmc").generate(rows, d, missing=0.0, rng=np.random.default_rng(seed))
    assert records.y is not None
    table = np.column_stack([records.x, records.y])
    header = ",".join([*(f"x{j}" for j in range(d)), "y"])
    lines = [",".join(repr(float(v)) for v in row) for row in table]
    files = {}
    for name, position in FILES.items():
        body = list(lines)
        if position is not None:
            row = int(position * (rows - 1))
            cells = body[row].split(",")
            cells[BLANK_COLUMN] = ""
            body[row] = ",".join(cells)
        path = directory / f"{name.rstrip('%')}.csv"
        path.write_text("\n".join([header, *body]) + "\n")
        files[name] = path
    return files


def shuffled(repeats: int, seed: int) -> list[str]:
    order = [name for name in FILES for _ in range(repeats)]
    np.random.default_rng(seed).shuffle(order)
    return order


def statistics_of(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """Per file median, quartiles and ÷ complete; the Kruskal–Wallis p over the files."""
    base = float(np.median(seconds["complete"]))
    per_file = {}
    for name, values in seconds.items():
        q25, median, q75 = (float(q) for q in np.percentile(values, [25, 50, 75]))
        per_file[name] = {
            "n": len(values),
            "median": median,
            "q25": q25,
            "q75": q75,
            "iqr": q75 - q25,
            "ratio_to_complete": median / base,
            "values": values,
        }
    return {"files": per_file, "kruskal_p": float(kruskal(*seconds.values()).pvalue)}


# --- (a) in process --------------------------------------------------------------------------
def in_process(files: dict[str, Path], repeats: int, seed: int) -> dict[str, Any]:
    load_records(files["complete"], "rmc")  # warm the page cache and the imports
    wall: dict[str, list[float]] = {name: [] for name in files}
    cpu: dict[str, list[float]] = {name: [] for name in files}
    for name in shuffled(repeats, seed):
        started, started_cpu = time.perf_counter(), time.process_time()
        load_records(files[name], "rmc")
        cpu[name].append(time.process_time() - started_cpu)
        wall[name].append(time.perf_counter() - started)
    return {"wall": statistics_of(wall), "cpu": statistics_of(cpu)}


# --- (b) end to end --------------------------------------------------------------------------
class FakeCoordinator:
    """Answers ``/v1/me`` with an rmc run of ``records`` records and the first round poll
    with the run's end; keeps when each request arrived (this process's perf_counter)."""

    def __init__(self, records: int, d: int) -> None:
        self.params = published_params(
            model="rmc", d=d, rounds=ROUNDS, records_per_round=records // ROUNDS
        )
        self.records, self.d = records, d
        self.arrivals: dict[str, float] = {}

    def app(self) -> FastAPI:
        app = FastAPI()

        # async: the time is taken on the event loop as the request arrives, not in a worker.
        @app.get("/v1/me")
        async def me() -> Response:
            self.arrivals.setdefault("me", time.perf_counter())
            body = {"run_id": RUN, "hospital": "h0", "records": self.records, "params": self.params}
            return Response(json.dumps(body), media_type="application/json")

        @app.get("/v1/runs/{run}/round")
        async def round_(run: str, after: int = -1) -> Response:
            self.arrivals.setdefault("poll", time.perf_counter())
            info = {
                "run_id": RUN,
                "status": "finished",
                "round": ROUNDS,
                "beta": [0.0] * self.d,
                "deadline": None,
                "params": self.params,
                "reason": None,
            }
            return Response(json.dumps(info), media_type="application/json")

        return app


def agent_argv(url: str, token: Path, data: Path, state: Path, *, model: bool) -> list[str]:
    """``ldpem client`` as ``start_agent`` runs it; ``model``: whether to pass ``--model``
    (an agent from before issue 22 has none: it parsed for the coordinator's model)."""
    argv = ["client", "--coordinator", url, "--token-file", str(token), "--data", str(data)]
    argv += ["--state", str(state), "--epsilon", "1", "--delta", "1e-5", "--log-level", "warning"]
    return [*argv, "--model", "rmc"] if model else argv


def takes_model(env: dict[str, str | None]) -> bool:
    """Whether that version's ``ldpem client`` has a --model option."""
    environment = {**os.environ, **{k: v for k, v in env.items() if v is not None}}
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", "client", "--help"],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )
    return "--model" in done.stdout


def end_to_end(
    files: dict[str, Path],
    workdir: Path,
    rows: int,
    d: int,
    repeats: int,
    seed: int,
    baseline: Path | None,
) -> dict[str, Any]:
    """Per version (this checkout's ``current``, and ``baseline`` if given), per interval,
    the statistics over the four files; the agents of both versions interleaved."""
    versions: dict[str, dict[str, str | None]] = {"current": {}}
    if baseline is not None:
        versions["baseline"] = {"PYTHONPATH": str(baseline.resolve())}
    model_flag = {version: takes_model(env) for version, env in versions.items()}
    fake = FakeCoordinator(rows, d)
    token = workdir / "agent.token"
    descriptor = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write("bench-load-timing-" + secrets.token_urlsafe(16))
    seconds: dict[str, dict[str, dict[str, list[float]]]] = {
        version: {"start_to_me": {n: [] for n in files}, "me_to_poll": {n: [] for n in files}}
        for version in versions
    }
    with live_server(fake.app(), start_timeout=30) as url, Processes(workdir / "logs") as processes:

        def agent(k: int, version: str, name: str) -> tuple[float, float]:
            fake.arrivals.clear()
            argv = agent_argv(
                url, token, files[name], workdir / f"state{k}", model=model_flag[version]
            )
            started = time.perf_counter()
            child = processes.start(f"agent{k}", *argv, env=versions[version])
            code = child.wait(600)
            if code != 0 or set(fake.arrivals) != {"me", "poll"}:
                raise RuntimeError(
                    f"agent {k} ({version}) on {name}: exit {code}, requests "
                    f"{sorted(fake.arrivals)}: " + processes.log(child)[-2000:]
                )
            return fake.arrivals["me"] - started, fake.arrivals["poll"] - fake.arrivals["me"]

        k = 0
        for version in versions:  # warm-up: page cache, bytecode, the fake's first request
            agent(k := k + 1, version, "complete")
        pairs = [(v, n) for v in versions for n in FILES for _ in range(repeats)]
        for i in np.random.default_rng(seed + 1).permutation(len(pairs)):
            version, name = pairs[i]
            me, poll = agent(k := k + 1, version, name)
            seconds[version]["start_to_me"][name].append(me)
            seconds[version]["me_to_poll"][name].append(poll)
    token.unlink()
    return {
        version: {
            "model_flag": model_flag[version],
            **{interval: statistics_of(times) for interval, times in per.items()},
        }
        for version, per in seconds.items()
    }


# --- output ----------------------------------------------------------------------------------
def table(title: str, stats: dict[str, Any]) -> list[str]:
    out = [f"  {title}: Kruskal–Wallis p = {stats['kruskal_p']:.3g}"]
    out.append("    file       median (s)   IQR [q25–q75] (s)      ÷ complete   n")
    for name, row in stats["files"].items():
        out.append(
            f"    {name:<9} {row['median']:10.3f}   {row['iqr']:6.3f} "
            f"[{row['q25']:.3f}–{row['q75']:.3f}]   {row['ratio_to_complete']:8.3f}x   {row['n']}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10, help="covariates (besides the response y)")
    parser.add_argument("--repeats", type=int, default=9, help="in-process loads per file")
    parser.add_argument("--agent-repeats", type=int, default=7, help="agent processes per file")
    parser.add_argument("--seed", type=int, default=2026, help="records and interleaving order")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="TREE",
        help="also run (b) with the ldpem package in TREE (another version), interleaved",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.d <= BLANK_COLUMN:
        parser.error(f"--d must be more than {BLANK_COLUMN} (x{BLANK_COLUMN} is blanked)")
    if args.quick:
        args.rows, args.repeats, args.agent_repeats = 2_000, 3, 2
    before = machine()
    with tempfile.TemporaryDirectory(prefix="bench-load-timing-") as tmp:
        workdir = Path(tmp)
        files = write_files(workdir, args.rows, args.d, args.seed)
        loads = in_process(files, args.repeats, args.seed)
        load_between = machine()["loadavg"]
        agents = end_to_end(
            files, workdir, args.rows, args.d, args.agent_repeats, args.seed, args.baseline
        )
    payload = {
        "machine": before,
        "load_between": load_between,
        "load_after": machine()["loadavg"],
        "rows": args.rows,
        "d": args.d,
        "repeats": args.repeats,
        "agent_repeats": args.agent_repeats,
        "seed": args.seed,
        "baseline": None if args.baseline is None else str(args.baseline),
        "in_process": loads,
        "end_to_end": agents,
    }
    if args.json:
        print(json.dumps(payload))
        return 0
    load = (before["loadavg"][0], load_between[0], payload["load_after"][0])
    print(
        f"rmc CSV, {args.rows} rows, {args.d} covariates + y; {before['when']}, "
        f"load (1 min) {load[0]:.1f} at the start, {load[1]:.1f} between (a) and (b), "
        f"{load[2]:.1f} at the end"
    )
    print(f"(a) in process, load_records(path, 'rmc'), {args.repeats} interleaved loads per file")
    print("\n".join(table("wall", loads["wall"])))
    print("\n".join(table("CPU", loads["cpu"])))
    for version, result in agents.items():
        where = "this checkout" if version == "current" else f"{args.baseline}"
        print(
            f"(b) end to end, ldpem client from {where}, {args.agent_repeats} agents per file, "
            f"interleaved{' with the other version' if len(agents) > 1 else ''}"
        )
        print("\n".join(table("process start → GET /v1/me", result["start_to_me"])))
        print("\n".join(table("GET /v1/me → first round poll", result["me_to_poll"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
