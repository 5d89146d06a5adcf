"""Helpers shared by the federated-run tests: app fixtures, run requests, a live server."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI
from numpy.typing import NDArray

from ldpem.client.data import load_records
from ldpem.commands.coordinator import KEEP_ALIVE
from ldpem.common.core.accounting import Budget
from ldpem.common.models import get_model
from ldpem.common.planning.simulator import simulate_run
from ldpem.common.protocol import FederatedStreams
from ldpem.common.wire import PublicParameters, expected_round_count
from ldpem.processes import Processes, free_port, start_agent, start_coordinator
from ldpem.server.settings import Settings

ADMIN = "admin-token-for-tests-0123456789"
TOKENS = [f"hospital-token-{i}-abcdefghijklmnop" for i in range(4)]
#: An agent budget looser than any test run's: the agent calibrates to the run's own
#: (stricter) budget, so that ``replay`` with the run's (ε, δ) is exact.
AGENT_BUDGET = ("--epsilon", "100", "--delta", "0.5")


class CreatedRun:
    """A run a coordinator created: its id and public parameters, read from ``created``
    (the coordinator's answer to the creation); a base of the tests' run handles."""

    created: dict[str, Any]

    @property
    def run_id(self) -> str:
        return str(self.created["run_id"])

    @property
    def params(self) -> PublicParameters:
        return PublicParameters.model_validate(self.created["params"])


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def hospital_headers(i: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[i]}"}


def run_request(
    *, hospitals: int = 3, records: int = 100, d: int = 4, rounds: int = 5, **extra: Any
) -> dict[str, Any]:
    """A run request with known tokens; no forecast unless asked (it takes ~1 s)."""
    request: dict[str, Any] = {
        "model": "gmm",
        "d": d,
        "sigma": 1.0,
        "rounds": rounds,
        "seed": 11,
        "forecast": False,
        "hospitals": [
            {"name": f"h{i}", "records": records, "token": TOKENS[i]} for i in range(hospitals)
        ],
    }
    request.update(extra)
    return request


def settled(
    client: Any, run_id: str, *, headers: dict[str, str] | None = None, timeout: float = 120.0
) -> dict[str, Any]:
    """The run's summary (``GET /v1/runs/{run_id}``) once nothing is pending for it: its
    forecast, computed in the background after ``run create``, is stored (or given up)."""
    end = time.monotonic() + timeout
    while True:
        summary: dict[str, Any] = client.get(f"/v1/runs/{run_id}", headers=headers).json()
        if not summary["pending"]:
            return summary
        if time.monotonic() > end:
            raise AssertionError(f"run {run_id} still computes {summary['pending']}")
        time.sleep(0.05)


def token_file(directory: Path, token: str, name: str = "hospital.token") -> Path:
    """``directory/name`` holding ``token``, mode 600, as ``ldpem run create --tokens-dir``
    writes it: ``ldpem client`` takes its token from such a file (or LDPEM_TOKEN), never
    from its command line."""
    path = directory / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def settings(tmp_path: Path, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "admin_token": ADMIN,
        "state": tmp_path / "coordinator.sqlite",
        "tick": 0.05,
        "forecast_seeds": 2,
        # The fewest bootstrap draws at level 0.9: each finished run's confidence region
        # (tests/server/test_confidence_job.py covers it).
        "confidence_draws": 19,
        # Most tests read run state without a token; tests/server/test_read_auth.py covers
        # the private default.
        "public_status": True,
    }
    values.update(extra)
    return Settings(**values)


#: Laid over the environment of every process a test starts: the tests' admin token, run
#: state readable without a token (tests/server/test_read_auth.py covers the private
#: default), and no agent fault injection inherited from the shell.
PROCESS_ENV: dict[str, str | None] = {
    "LDPEM_ADMIN_TOKEN": ADMIN,
    "LDPEM_PUBLIC_STATUS": "1",
    # The fewest bootstrap draws at level 0.9 for each finished run's confidence region.
    "LDPEM_CONFIDENCE_DRAWS": "19",
    "LDPEM_AGENT_FAULT": None,
}


def report_body(
    i: int = 0, t: int = 0, *, records: int = 100, rounds: int = 5, **change: Any
) -> dict[str, Any]:
    """The JSON body of hospital h``i``'s report of round ``t`` under ``local``, for a run
    of ``records`` records per hospital over ``rounds`` rounds (``run_request``'s
    defaults: d = 4); ``change`` replaces fields."""
    body: dict[str, Any] = {
        "hospital": f"h{i}",
        "round": t,
        "mechanism": "local",
        "count": expected_round_count(records, rounds, t),
        "total": [0.5, -1.0, 2.0, 0.0],
        "noise_std": 3.0,
    }
    body.update(change)
    return body


def plugin_env(module: str) -> dict[str, str]:
    """The environment under which a process of ``ldpem`` loads the plugin module ``module``
    of this repository (``LDPEM_PLUGINS``, with the repository on ``PYTHONPATH``)."""
    return {"LDPEM_PLUGINS": module, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def process_manager(directory: Path) -> Processes:
    """A process manager for one test: logs and working directory ``directory``."""
    return Processes(directory, env=PROCESS_ENV, cwd=directory)


@contextlib.contextmanager
def live_server(
    app: FastAPI, *, start_timeout: float = 10.0, tls: Path | None = None
) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; yields its URL
    (RuntimeError if it has not started within ``start_timeout`` seconds). ``tls``: the
    folder ``coordinator init`` wrote, whose server.pem and server.key it serves HTTPS
    with."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        # As ``ldpem coordinator`` serves it, whose keep-alive the agents' link relies on.
        timeout_keep_alive=KEEP_ALIVE,
        ssl_certfile=None if tls is None else str(tls / "server.pem"),
        ssl_keyfile=None if tls is None else str(tls / "server.key"),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def write_gmm_data(
    directory: Path, counts: list[int], d: int, *, seed: int = 5
) -> tuple[list[Path], NDArray[np.float64]]:
    """Synthetic GMM records (snr 3, σ = 1) split into one .npy file per hospital."""
    return write_model_data(directory, counts, d, seed=seed)


def write_model_data(
    directory: Path,
    counts: list[int],
    d: int,
    *,
    model: str = "gmm",
    model_options: dict[str, int] | None = None,
    seed: int = 5,
) -> tuple[list[Path], NDArray[np.float64]]:
    """Synthetic records of ``model`` with ``model_options`` (snr 3, σ = 1) split into one
    .npy file per hospital (a response y, if the model has one, as the last column), and
    β* (of the model's parameter size)."""
    records, beta_star = get_model(model, model_options).generate(
        sum(counts), d, snr=3.0, sigma=1.0, rng=np.random.default_rng(seed)
    )
    table = records.x if records.y is None else np.column_stack([records.x, records.y])
    return split_into_files(directory, table, counts), beta_star


def split_into_files(directory: Path, table: NDArray[np.float64], counts: list[int]) -> list[Path]:
    """The rows of ``table`` (n, columns), in order, written as one .npy file per hospital,
    hospital i's ``counts[i]`` rows in ``directory``/hospital{i}.npy; the files' paths."""
    paths = []
    start = 0
    for i, count in enumerate(counts):
        path = directory / f"hospital{i}.npy"
        np.save(path, table[start : start + count])
        paths.append(path)
        start += count
    return paths


def replay(
    params: PublicParameters,
    run_id: str,
    beta0: list[float],
    data: list[Path],
    seeds: list[int],
    *,
    epsilon: float,
    delta: float,
    run_seed: int = 0,
) -> list[list[float]]:
    """β^0 … β^T of the run recomputed offline by the simulator (``simulate_run``, the same
    protocol code as the agents and the coordinator): a run whose coordinator lost or
    double-counted a report cannot match. Only agents started with a research ``--seed``
    (reproducible noise) can be replayed; ``run_seed``: the run's seed (central noise)."""
    holders = [load_records(path, params.model) for path in data]
    result = simulate_run(
        params,
        holders=holders,
        beta0=beta0,
        streams=FederatedStreams(run_id=run_id, seeds=seeds, run_seed=run_seed),
        budgets=[Budget(epsilon, delta, "exact")] * len(holders),
    )
    return [[float(v) for v in beta] for beta in result.betas]


def cli_create_run(tmp_path: Path, url: str, counts: list[int], **request: Any) -> dict[str, Any]:
    """Create a GMM run through ``ldpem run create`` (the operator's command): hospitals
    h0, h1, … with ``counts`` records and the fixed TOKENS; ``request`` adds or overrides
    fields of the run request. Returns the command's JSON answer."""
    config = {
        "model": "gmm",
        "sigma": 1.0,
        "seed": 3,
        "hospitals": [
            {"name": f"h{i}", "records": c, "token": TOKENS[i]} for i, c in enumerate(counts)
        ],
        **request,
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    command = ["run", "create", "--coordinator", url, "--config", str(path)]
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", *command],
        capture_output=True,
        env={**os.environ, "LDPEM_ADMIN_TOKEN": ADMIN},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    created: dict[str, Any] = json.loads(done.stdout)
    return created


def start_ticking_coordinator(
    processes: Processes, state: Path, *, forecast_workers: int | None = None
) -> str:
    """A coordinator process (state ``state``/coordinator.sqlite, deadlines checked every
    0.1 s); its URL. ``forecast_workers``: the forecast simulates in a pool of that many
    processes, which import the plugins of the processes' ``LDPEM_PLUGINS``."""
    env = {"LDPEM_ADMIN_TOKEN": ADMIN, "LDPEM_TICK": "0.1"}
    if forecast_workers is not None:
        env["LDPEM_FORECAST_WORKERS"] = str(forecast_workers)
    _, url = start_coordinator(processes, state=state / "coordinator.sqlite", env=env)
    return url


def post_run(url: str, counts: list[int], **request: Any) -> dict[str, Any]:
    """Create a run with ``POST /v1/runs``: ``request`` and hospitals h0, h1, … with
    ``counts`` records and the fixed TOKENS; the coordinator's 201 answer."""
    hospitals = [
        {"name": f"h{i}", "records": count, "token": TOKENS[i]} for i, count in enumerate(counts)
    ]
    body = {**request, "hospitals": hospitals}
    created = httpx.post(f"{url}/v1/runs", json=body, headers=admin_headers(), timeout=60)
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    return answer


def agents_to_the_end(
    processes: Processes,
    url: str,
    run_id: str,
    paths: list[Path],
    *,
    model: str,
    state: Path,
    seeds: list[int] | None = None,
    flags: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Start one ``ldpem client`` per data file (hospital i holds ``paths[i]`` and
    ``TOKENS[i]``, budget ``AGENT_BUDGET``; research ``--seed`` ``seeds[i]`` if given;
    ``flags`` added to each command line), wait for each to exit 0, then for the run to
    leave ``running`` (at most 30 s); the run's summary."""
    agents = [
        start_agent(
            processes,
            f"h{i}",
            url=url,
            token=TOKENS[i],
            model=model,
            data=path,
            state=state / f"state{i}",
            args=[
                *AGENT_BUDGET,
                "--wait",
                "2",
                *(["--seed", str(seeds[i])] if seeds is not None else []),
                *flags,
            ],
        )
        for i, path in enumerate(paths)
    ]
    for agent in agents:
        assert agent.wait(180) == 0, processes.log(agent)[-2000:]
    deadline = time.monotonic() + 30
    while True:
        run: dict[str, Any] = httpx.get(
            f"{url}/v1/runs/{run_id}", headers=admin_headers(), timeout=30
        ).json()
        if run["status"] != "running" or time.monotonic() > deadline:
            return run
        time.sleep(0.2)
