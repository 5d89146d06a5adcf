"""``ldpem demo``: a coordinator and K hospital agents as real processes on 127.0.0.1.

The demo runs the same commands an operator and the hospitals would run
(``ldpem coordinator``, ``POST /v1/runs``, ``ldpem client``), shows the rounds as they
close, then compares the federated local-DP estimate with non-private and clipped gradient
EM run in-process on the same records, and writes ``result.json`` and ``convergence.png``.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import httpx
import numpy as np

from ldpem.client.ledger import Ledger
from ldpem.common.core.accounting import epsilon_for_ratio
from ldpem.common.core.errors import UserError
from ldpem.common.models import get_model
from ldpem.common.planning.simulation import split_holders
from ldpem.common.planning.study import Dataset, Study, run_study
from ldpem.common.protocol import study_delta
from ldpem.demo_plot import plot_convergence, prewarm_plotting
from ldpem.processes import Processes, ProcessFailed, start_agent, start_coordinator
from ldpem.run_estimate import final_region

__all__ = ["BASELINES", "DEMO_FORECAST_SEEDS", "DemoConfig", "demo_hospital_sizes", "run_demo"]

#: Seconds the demo waits for the coordinator to create the run.
CREATE_TIMEOUT = 60.0
#: Seconds the demo waits, once the run finished, for the forecast the coordinator computes
#: in the background (usually ready long before).
FORECAST_TIMEOUT = 300.0
#: Seeds of the demo coordinator's forecast: a real one's 200 are ~8 s of CPU at 2·10⁵
#: records; 20 make a band that covers 80% ± 9% of runs instead of ± 2.8% (and says so).
DEMO_FORECAST_SEEDS = 20
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
    model: str = "gmm"
    d: int = 10
    rounds: int = 10
    epsilon: float = 1.0
    seed: int = 0
    workdir: Path | None = None
    #: The federated run's mechanism: one of ``commands.demo.demo_mechanisms`` (docs/HOSPITAL.md).
    mechanism: str = "local"
    timeout: float = 300.0


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


def _write_data(
    config: DemoConfig, workdir: Path, rng: np.random.Generator
) -> tuple[list[Path], Dataset]:
    """Each hospital's records file, and all the records as dealt out to them, with β*."""
    model = get_model(config.model)
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


class _Progress:
    """One line per closed round on a non-TTY; a redrawn bar on a TTY."""

    def __init__(self, stream: TextIO, rounds: int, names: list[str], quiet: bool) -> None:
        self.stream, self.rounds, self.names, self.quiet = stream, rounds, names, quiet
        self.shown = 0
        self.tty = stream.isatty()

    def update(self, closed: list[dict[str, Any]], open_round: dict[str, Any] | None) -> None:
        if self.quiet:
            return
        for summary in closed[self.shown :]:
            self._line(summary["round"] + 1, summary["reporters"], final=True)
            self.shown += 1
        if self.tty and open_round is not None:
            self._line(open_round["round"] + 1, open_round["reporters"], final=False)

    def _line(self, number: int, reporters: list[str], *, final: bool) -> None:
        width = 20
        filled = round(width * (number - (0 if final else 1)) / self.rounds)
        bar = "#" * filled + "-" * (width - filled)
        marks = " ".join(f"{name}{'✓' if name in reporters else '·'}" for name in self.names)
        text = f"round {number:>3}/{self.rounds} [{bar}] {marks}"
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        elif final:
            self.stream.write(text + "\n")
        self.stream.flush()


def run_demo(config: DemoConfig, *, quiet: bool = False) -> dict[str, Any]:
    """Run the demo; returns the JSON-able result (also written to workdir/result.json)."""
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
    prewarm_plotting()
    names = [f"h{i + 1}" for i in range(config.hospitals)]
    tokens = [secrets.token_urlsafe(24) for _ in names]
    admin = secrets.token_urlsafe(24)
    delta = study_delta(None, config.records)

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr)

    processes = Processes(logs)
    forecast_env = {"LDPEM_FORECAST_SEEDS": str(DEMO_FORECAST_SEEDS)}
    try:
        with _terminate_on_sigterm():
            say(
                f"ldpem demo: {config.hospitals} hospitals, {config.records} {config.model} "
                f"records (d={config.d}), {config.mechanism} mechanism, ε={config.epsilon}, "
                f"workdir {workdir}"
            )
            coordinator, url = start_coordinator(
                processes,
                state=workdir / "coordinator.sqlite",
                # A demo on 127.0.0.1 with throw-away data: its status page opens as is.
                args=["--public-status"],
                # The coordinator's own forecast, as a real run gets, from fewer seeds.
                env={"LDPEM_ADMIN_TOKEN": admin, "LDPEM_TICK": "0.05", **forecast_env},
                wait=False,
            )
            # The records are written while the coordinator starts (its imports take seconds).
            paths, data = _write_data(config, workdir, rng)
            assert data.sizes is not None and data.beta_star is not None
            try:
                processes.wait_healthy(coordinator, url, timeout=60.0)
            except ProcessFailed as error:
                raise UserError(str(error)) from None
            client = httpx.Client(base_url=url, timeout=30.0)
            request = {
                "model": config.model,
                "d": config.d,
                "sigma": 1.0,
                "rounds": config.rounds,
                "mechanism": config.mechanism,
                "epsilon": config.epsilon,
                "delta": delta,
                "seed": config.seed,
                "missing": get_model(config.model).demo_missing,
                "hospitals": [
                    {"name": n, "records": size, "token": t}
                    for n, size, t in zip(names, data.sizes, tokens, strict=True)
                ],
            }
            response = client.post(
                "/v1/runs",
                json=request,
                headers={"Authorization": f"Bearer {admin}"},
                timeout=CREATE_TIMEOUT,
            )
            if response.status_code != 201:
                raise UserError(f"the coordinator refused the run: {response.text}")
            created = response.json()
            run_id = created["run_id"]
            say(f"run {run_id} created; status page {url}/runs/{run_id}")
            if created.get("pending"):
                say(
                    "the coordinator forecasts the run's accuracy in the background "
                    f"({DEMO_FORECAST_SEEDS} seeds, at the assumed ‖β*‖/σ and at half and "
                    "twice it)"
                )
            for i, (name, path, token) in enumerate(zip(names, paths, tokens, strict=True)):
                start_agent(
                    processes,
                    name,
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
                    ],
                )
            summary = _follow(client, run_id, config, names, processes, quiet)
            trajectory = client.get(f"/v1/runs/{run_id}/trajectory").json()["betas"]
            # The in-process baselines while the coordinator may still be forecasting.
            baselines = _baselines(config, data, np.array(trajectory[0]), delta)
            summary = _forecast(client, run_id, summary)
            forecast = summary.get("forecast")
            if forecast is not None:
                say(
                    f"coordinator forecast: error ≈ {forecast['mean']:.3f}, 10–90% of "
                    f"{forecast['seeds']} simulated runs in [{forecast['low']:.3f}, "
                    f"{forecast['high']:.3f}] (β = 0 would give {forecast['trivial_error']:.3f})"
                )
            if summary.get("warning"):
                say(f"warning: {summary['warning']}")
            # Agents exit 0 once they have seen the end of the run.
            processes.wait(names, timeout=30)
            problem = processes.failed()
            if problem is not None:
                raise UserError(problem)
            confidence = final_region(lambda: client.get(f"/v1/runs/{run_id}").json())
    finally:
        processes.stop()

    model = get_model(config.model)
    beta_star = data.beta_star
    betas = [np.array(b) for b in trajectory]
    errors = [model.error(b, beta_star) for b in betas[1:]]
    hospitals = _hospital_spend(names, data.sizes, paths, delta)
    result: dict[str, Any] = {
        "run_id": run_id,
        "model": config.model,
        "mechanism": config.mechanism,
        "n": config.records,
        "d": config.d,
        "rounds": config.rounds,
        "epsilon": config.epsilon,
        "delta": delta,
        "status": summary["status"],
        "beta": betas[-1].tolist(),
        "beta_star": beta_star.tolist(),
        "errors": errors,
        "error": errors[-1] if errors else None,
        "trivial_error": float(np.linalg.norm(beta_star)),
        "expected_error": summary.get("expected_error"),
        "forecast": summary.get("forecast"),
        "confidence": confidence,
        "baselines": {name: b["error"] for name, b in baselines.items()},
        "baseline_errors": {name: b["errors"] for name, b in baselines.items()},
        "hospitals": hospitals,
        "workdir": str(workdir),
        "seconds": time.perf_counter() - started,
    }
    (workdir / "result.json").write_text(json.dumps(result, indent=2))
    result["plot"] = plot_convergence(result, workdir / "convergence.png", BASELINES)
    (workdir / "result.json").write_text(json.dumps(result, indent=2))
    if config.workdir is None:
        # Keep the results, drop the bulky records and process state.
        for path in paths:
            shutil.rmtree(path.parent, ignore_errors=True)
    return result


def _follow(
    client: httpx.Client,
    run_id: str,
    config: DemoConfig,
    names: list[str],
    processes: Processes,
    quiet: bool,
) -> dict[str, Any]:
    """Show rounds as they close until the run ends; fail fast if a process dies."""
    progress = _Progress(sys.stderr, config.rounds, names, quiet)
    deadline = time.monotonic() + config.timeout
    while True:
        summary = client.get(f"/v1/runs/{run_id}").json()
        rounds = client.get(f"/v1/runs/{run_id}/rounds").json()
        closed = [r for r in rounds if r["status"] == "closed"]
        open_rounds = [r for r in rounds if r["status"] == "open"]
        progress.update(closed, open_rounds[0] if open_rounds else None)
        if summary["status"] == "finished":
            return dict(summary)
        if summary["status"] in ("failed", "cancelled"):  # cancelled from another shell
            raise UserError(f"the run {summary['status']}: {summary.get('reason')}")
        problem = processes.failed()
        if problem is not None:
            raise UserError(problem)
        if time.monotonic() > deadline:
            raise UserError(f"the run did not finish within {config.timeout:.0f} s")
        time.sleep(0.1)


def _forecast(client: httpx.Client, run_id: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The run's summary once its background forecast is stored (or FORECAST_TIMEOUT)."""
    deadline = time.monotonic() + FORECAST_TIMEOUT
    while "forecast" in summary.get("pending", []) and time.monotonic() < deadline:
        time.sleep(0.05)
        summary = client.get(f"/v1/runs/{run_id}").json()
    return summary


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
