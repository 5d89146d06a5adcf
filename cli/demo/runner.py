"""``ldpem demo``: a coordinator and K hospital agents as real processes on 127.0.0.1.

The demo runs the same commands an operator and the hospitals would run
(``ldpem coordinator``, ``POST /v1/runs``, ``ldpem client``), shows the rounds as they
close, then compares the federated local-DP estimate with non-private and clipped gradient
EM run in-process on the same records, and writes ``result.json`` and ``convergence.svg``.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import numpy as np

from ldpem.client.ledger import Ledger
from ldpem.client.link import link_tls
from ldpem.common.core.accounting import epsilon_for_ratio
from ldpem.common.core.errors import UserError
from ldpem.common.models import Model, get_model
from ldpem.common.planning.simulator import split_holders
from ldpem.common.planning.study import Dataset, Study, run_study
from ldpem.common.protocol import study_delta
from ldpem.common.protocol.run_fields import (
    DEFAULT_D,
    DEFAULT_MECHANISM,
    DEFAULT_MODEL,
    RUN_DEFAULTS,
)
from ldpem.demo.follow import await_forecast, final_region, follow
from ldpem.demo.forkstart import Main, fork_agent, fork_coordinator
from ldpem.demo.plot import plot_convergence
from ldpem.processes import Processes, ProcessFailed

__all__ = [
    "BASELINES",
    "DEMO_CONFIDENCE_DRAWS",
    "DEMO_FORECAST_SEEDS",
    "DEMO_FORECAST_WORKERS",
    "DEMO_SENSITIVITY_SEEDS",
    "DemoConfig",
    "demo_hospital_sizes",
    "demo_request",
    "run_demo",
]

#: Seconds the demo waits for the coordinator to create the run.
CREATE_TIMEOUT = 60.0
#: Seeds of the demo coordinator's forecast: a real one's 200 are ~8 s of CPU at 2·10⁵
#: records; 20 make a band that covers 80% ± 9% of runs instead of ± 2.8% (and says so).
DEMO_FORECAST_SEEDS = 20
#: Seeds of the demo coordinator's forecast at half and twice the assumed ‖β*‖/σ: none. A
#: real coordinator simulates 10 at each (``SENSITIVITY_SEEDS``) for its status page's note
#: and for ``run create``'s warning that half the SNR would do no better than β = 0; the
#: demo's summary shows neither (only its ``--json`` result carried the what-ifs), and those
#: 20 runs were a third of its coordinator's simulations (~0.6 s of the demo's wall and CPU
#: time, docs/PERFORMANCE.md, the demo's third pass). The band it prints is the same: the
#: same 20 seeds at the assumed SNR, the same numbers.
DEMO_SENSITIVITY_SEEDS = 0
#: Bootstrap draws of the demo coordinator's confidence region: a real one's 99 are ~5 s of
#: CPU at 2·10⁵ records, the largest part of the demo's. 19 is the fewest that are
#: calibrated at level 0.9 (``common.planning.confidence.least_draws``): the coverage holds
#: for any B ≥ 19, as tests/common/test_confidence_calibration.py checks at B = 19 on runs
#: the bootstrap did not use. Only the region's steadiness depends on B: at 19 the radius is
#: the largest but one of 19 distances and an interval's ends the extreme draws, so they vary
#: more from one set of draws to another than at 99 (and the demo says how many draws made
#: them).
DEMO_CONFIDENCE_DRAWS = 19
#: Processes of the demo coordinator's simulations: none besides its own. Its forecast and
#: bootstrap run in its worker threads instead of a pool started from a fork server (a fresh
#: interpreter importing numpy and the simulator, ~0.5 s of CPU, whose workers each build
#: the truncation table again); the results are the same for any number of workers
#: (``common.planning.executor``), and on a 2-core machine the demo's own baselines and plot
#: use the other core meanwhile.
DEMO_FORECAST_WORKERS = 1
#: The in-process baselines the federated run is compared with, in the order shown: each
#: mechanism's name and how the summary and the plot name it.
BASELINES = (
    ("hospital", "hospital-level DP, same trust boundary (in-process)"),
    ("secagg", "secure aggregation, default t_min and c (in-process)"),
    ("local-clip", "clipped DP gradient EM, C=1 (in-process)"),
    ("none", "non-private gradient EM (in-process)"),
)


@dataclass(frozen=True)
class DemoConfig:
    hospitals: int = 4
    records: int = 200_000
    model: str = DEFAULT_MODEL
    d: int = DEFAULT_D
    rounds: int = RUN_DEFAULTS.rounds
    epsilon: float = RUN_DEFAULTS.epsilon
    seed: int = 0
    workdir: Path | None = None
    #: The federated run's mechanism: one of ``commands.demo.demo_mechanisms`` (docs/HOSPITAL.md).
    mechanism: str = DEFAULT_MECHANISM
    timeout: float = 300.0
    #: The model's declared options (--components), as a study's (``RunFields``).
    model_options: tuple[tuple[str, int], ...] = RUN_DEFAULTS.model_options


def demo_hospital_sizes(
    total: int, hospitals: int, rounds: int, rng: np.random.Generator
) -> list[int]:
    """The demo's hospitals: unequal shares of ``total`` records, each ≥ 2·rounds, the rest
    split with Dirichlet(2) proportions (rounded down; the remainder goes to the first)."""
    floor = 2 * rounds
    if total < hospitals * floor:
        raise UserError(
            f"--records must be at least {hospitals * floor} for {hospitals} hospitals and "
            f"{rounds} rounds, got {total}"
        )
    shares = rng.dirichlet(np.full(hospitals, 2.0))
    sizes = floor + np.floor(shares * (total - hospitals * floor)).astype(int)
    sizes[0] += total - int(sizes.sum())
    return [int(s) for s in sizes]


@contextlib.contextmanager
def _terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt so the same cleanup path runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _local_client(url: str, timeout: float) -> httpx.Client:
    """A client of the demo's coordinator, on plain HTTP at 127.0.0.1, with the agent's TLS
    context for such a coordinator (``link_tls``: no certificate store loaded)."""
    return httpx.Client(base_url=url, timeout=timeout, verify=link_tls(url, None))


def _model(config: DemoConfig) -> Model:
    """The demo's model with its options; a UserError naming an option it does not declare
    or a value out of range."""
    try:
        return get_model(config.model, dict(config.model_options))
    except ValueError as error:
        raise UserError(str(error)) from None


def demo_request(
    config: DemoConfig, sizes: Sequence[int], names: Sequence[str], tokens: Sequence[str]
) -> dict[str, Any]:
    """The body of the demo's ``POST /v1/runs``: its hospitals ``names`` with their record
    counts ``sizes`` and ``tokens``, and the run's public parameters."""
    return {
        "model": config.model,
        "model_options": dict(config.model_options),
        "d": config.d,
        "sigma": RUN_DEFAULTS.sigma,
        "rounds": config.rounds,
        "mechanism": config.mechanism,
        "epsilon": config.epsilon,
        "delta": study_delta(None, config.records),
        "seed": config.seed,
        "missing": get_model(config.model).demo_missing,
        "hospitals": [
            {"name": n, "records": size, "token": t}
            for n, size, t in zip(names, sizes, tokens, strict=True)
        ],
    }


def _import_agent() -> None:
    """Import what ``ldpem client`` imports to run, so that each forked agent finds it
    loaded instead of importing it again."""
    import ldpem.client.agent
    import ldpem.client.sources  # noqa: F401


def _write_data(
    config: DemoConfig, workdir: Path, rng: np.random.Generator
) -> tuple[list[Path], Dataset]:
    """Each hospital's records file, and all the records as dealt out to them, with β*."""
    model = _model(config)
    sizes = demo_hospital_sizes(config.records, config.hospitals, config.rounds, rng)
    records, beta_star = model.generate(
        config.records, config.d, missing=model.demo_missing, rng=rng
    )
    paths = []
    for i, part in enumerate(split_holders(records, sizes)):
        table = part.x if part.y is None else np.column_stack([part.x, part.y])
        path = workdir / f"hospital-{i + 1}" / "records.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, table)
        paths.append(path)
    return paths, Dataset(records, beta_star, tuple(sizes))


def run_demo(config: DemoConfig, *, main: Main, quiet: bool = False) -> dict[str, Any]:
    """Run the demo, its coordinator and agents forked to run ``main`` (``ldpem.cli.main``)
    on their command lines; returns the JSON-able result (also written to
    workdir/result.json)."""
    _model(config)
    if config.hospitals < 1:
        raise UserError(f"--hospitals must be at least 1, got {config.hospitals}")
    if config.rounds < 1:
        raise UserError(f"--rounds must be at least 1, got {config.rounds}")
    if not (config.epsilon > 0 and math.isfinite(config.epsilon)):
        raise UserError(f"--epsilon must be > 0, got {config.epsilon}")
    demo_hospital_sizes(config.records, config.hospitals, config.rounds, np.random.default_rng(0))
    started = time.perf_counter()
    workdir = config.workdir or Path(tempfile.mkdtemp(prefix="ldpem-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()) and config.workdir is not None:
        raise UserError(f"--workdir {workdir} is not empty; give an empty or new directory")
    logs = workdir / "logs"
    logs.mkdir()
    rng = np.random.default_rng(config.seed)
    names = [f"h{i + 1}" for i in range(config.hospitals)]
    tokens = [secrets.token_urlsafe(24) for _ in names]
    admin = secrets.token_urlsafe(24)
    delta = study_delta(None, config.records)

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr)

    processes = Processes(logs)
    derived_env = {
        "LDPEM_FORECAST_SEEDS": str(DEMO_FORECAST_SEEDS),
        "LDPEM_FORECAST_SENSITIVITY_SEEDS": str(DEMO_SENSITIVITY_SEEDS),
        "LDPEM_CONFIDENCE_DRAWS": str(DEMO_CONFIDENCE_DRAWS),
        "LDPEM_FORECAST_WORKERS": str(DEMO_FORECAST_WORKERS),
    }
    try:
        with _terminate_on_sigterm():
            say(
                f"ldpem demo: {config.hospitals} hospitals, {config.records} {config.model} "
                f"records (d={config.d}), {config.mechanism} mechanism, ε={config.epsilon}, "
                f"workdir {workdir}"
            )
            # Forked from this interpreter, which imported numpy and the rest already.
            coordinator, url = fork_coordinator(
                processes,
                main=main,
                state=workdir / "coordinator.sqlite",
                # A demo on 127.0.0.1 with throw-away data: its status page opens as is.
                args=["--public-status"],
                # The coordinator's own forecast and confidence region, as a real run gets
                # them, from fewer simulated runs. Its deadline check keeps its default
                # period: the demo's rounds close on their last report, not at a deadline,
                # and a check every 50 ms cost ~8 ms of CPU a second of the run.
                env={"LDPEM_ADMIN_TOKEN": admin, **derived_env},
            )
            # While the coordinator imports its server: what the agents will need
            # imported, and the records.
            _import_agent()
            paths, data = _write_data(config, workdir, rng)
            assert data.sizes is not None and data.beta_star is not None
            try:
                processes.wait_healthy(coordinator, url, timeout=60.0, verify=link_tls(url, None))
            except ProcessFailed as error:
                raise UserError(str(error)) from None
            request = demo_request(config, data.sizes, names, tokens)
            # A client of its own, closed before the agents are forked (they would
            # inherit its connection).
            with _local_client(url, CREATE_TIMEOUT) as creator:
                response = creator.post(
                    "/v1/runs", json=request, headers={"Authorization": f"Bearer {admin}"}
                )
            if response.status_code != 201:
                raise UserError(f"the coordinator refused the run: {response.text}")
            created = response.json()
            run_id = created["run_id"]
            say(f"run {run_id} created; status page {url}/runs/{run_id}")
            if created.get("pending"):
                say(
                    "the coordinator forecasts the run's accuracy in the background "
                    f"({DEMO_FORECAST_SEEDS} seeds at the assumed ‖β*‖/σ)"
                )
            for i, (name, path, token) in enumerate(zip(names, paths, tokens, strict=True)):
                fork_agent(
                    processes,
                    name,
                    main=main,
                    url=url,
                    token=token,
                    model=config.model,
                    data=path,
                    state=path.parent / "state",
                    args=[
                        "--epsilon",
                        str(config.epsilon),
                        "--delta",
                        repr(delta),
                        # A research --seed: the run (whose id is random) can be replayed
                        # exactly offline; it fixes the agents' noise too, which voids the
                        # privacy guarantee (each agent logs a warning saying so).
                        "--seed",
                        str(config.seed + i + 1),
                        # Each agent pins the run's model options (a run of others is
                        # refused), as a hospital's command line does.
                        *(f"--{name}={value}" for name, value in config.model_options),
                    ],
                )
            with _local_client(url, 30.0) as client:
                summary = follow(
                    client,
                    run_id,
                    admin=admin,
                    rounds=config.rounds,
                    names=names,
                    processes=processes,
                    quiet=quiet,
                    timeout=config.timeout,
                )
                trajectory = client.get(f"/v1/runs/{run_id}/trajectory").json()["betas"]
                # The baselines and the plot while the coordinator forecasts and
                # bootstraps (neither is drawn in the plot).
                baselines = _baselines(config, data, np.array(trajectory[0]), delta)
                result = _result(config, data, trajectory, baselines, delta)
                plot = plot_convergence(result, workdir / "convergence.svg", BASELINES)
                summary = await_forecast(client, run_id, summary)
                forecast = summary.get("forecast")
                if forecast is not None:
                    say(
                        f"coordinator forecast: error ≈ {forecast['mean']:.3f}, 10–90% of "
                        f"{forecast['seeds']} simulated runs in [{forecast['low']:.3f}, "
                        f"{forecast['high']:.3f}] (β = 0 would give "
                        f"{forecast['trivial_error']:.3f})"
                    )
                if summary.get("warning"):
                    say(f"warning: {summary['warning']}")
                # Agents exit 0 once they have seen the end of the run.
                processes.wait(names, timeout=30)
                problem = processes.failed()
                if problem is not None:
                    raise UserError(problem)
                region = final_region(lambda: client.get(f"/v1/runs/{run_id}").json(), 0.05)
            # Nothing more to ask: it shuts down while the results are written (the
            # agents have exited; ``stop`` below reaps it).
            coordinator.terminate()
            result = {
                "run_id": run_id,
                **result,
                "status": summary["status"],
                "expected_error": summary.get("expected_error"),
                "forecast": summary.get("forecast"),
                "confidence": region,
                "hospitals": _hospital_spend(names, data.sizes, paths, delta),
                "workdir": str(workdir),
                "plot": plot,
                "seconds": time.perf_counter() - started,
            }
            (workdir / "result.json").write_text(json.dumps(result, indent=2))
            if config.workdir is None:
                # Keep the results, drop the bulky records and process state.
                for path in paths:
                    shutil.rmtree(path.parent, ignore_errors=True)
    finally:
        processes.stop()
    return result


def _result(
    config: DemoConfig,
    data: Dataset,
    trajectory: list[list[float]],
    baselines: dict[str, dict[str, Any]],
    delta: float,
) -> dict[str, Any]:
    """What the demo found, before the coordinator's forecast and confidence region: the
    run's parameters, its estimates' errors per round and the baselines'."""
    model = _model(config)
    assert data.beta_star is not None
    betas = [np.array(b) for b in trajectory]
    errors = [model.error(b, data.beta_star) for b in betas[1:]]
    return {
        "model": config.model,
        "mechanism": config.mechanism,
        "n": config.records,
        "d": config.d,
        "rounds": config.rounds,
        "epsilon": config.epsilon,
        "delta": delta,
        "beta": betas[-1].tolist(),
        "beta_star": data.beta_star.tolist(),
        "errors": errors,
        "error": errors[-1] if errors else None,
        "trivial_error": float(np.linalg.norm(data.beta_star)),
        "baselines": {name: b["error"] for name, b in baselines.items()},
        "baseline_errors": {name: b["errors"] for name, b in baselines.items()},
    }


def _baselines(
    config: DemoConfig, data: Dataset, beta0: np.ndarray, delta: float
) -> dict[str, dict[str, Any]]:
    """Non-private, clipped (C = 1) and hospital-level gradient EM in-process, on the
    hospitals' records as dealt and from the run's start β⁰ (hospital-level: each holder's
    own scale and noise, docs/HOSPITAL.md; secagg: the masked sum of noise shares,
    docs/SECAGG.md, at the default t_min = K − ⌊K/10⌋ and c colluders)."""
    out = {}
    for name, _ in BASELINES:
        # σ = 1 and the default declared bound snr·σ = 3: τ as the coordinator derives it.
        study = Study(
            model=config.model,
            mechanism=name,
            d=config.d,
            epsilon=config.epsilon,
            delta=delta,
            rounds=config.rounds,
            seed=config.seed + 1000,
            model_options=config.model_options,
        )
        result = run_study(study, data=data, beta0=beta0)
        assert result.errors is not None  # the demo's data has a known β*
        out[name] = {"error": result.errors[-1], "errors": list(result.errors)}
    return out


def _hospital_spend(
    names: list[str], sizes: tuple[int, ...], paths: list[Path], delta: float
) -> list[dict[str, Any]]:
    """Per hospital: records, rounds reported and ε spent, read from the agent's ledger."""
    out = []
    for name, size, path in zip(names, sizes, paths, strict=True):
        ledger = Ledger(path.parent / "state")
        try:
            entries = ledger.entries()
        finally:
            ledger.close()
        mu = max((entry.mu for entry in entries), default=0.0)
        out.append(
            {
                "name": name,
                "records": size,
                "rounds_reported": len(entries),
                # Each record reports in one round only: its ε is that of the largest μ.
                "epsilon_spent": epsilon_for_ratio(mu, delta) if mu > 0 else 0.0,
            }
        )
    return out
