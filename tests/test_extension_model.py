"""A fourth model, defined in this file only, takes every path (docs/EXTENDING.md).

Ordinary linear regression, y = ⟨x, β*⟩ + V, is registered here with one call
(``register_model``) and run through ``ldpem simulate``, a real federated run (a
coordinator and two agent processes, which load this module through ``LDPEM_PLUGINS``),
``ldpem plan`` and ``ldpem audit``. No product module is edited or monkeypatched: if one
of them compared model names, or kept its own list, this test would fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from numpy.typing import NDArray

from ldpem.cli import main
from ldpem.common.models import Model, Records, get_model, register_model
from ldpem.common.models.base import Draw, tau_spread
from ldpem.processes import Processes
from tests.fedkit import (
    agents_to_the_end,
    plugin_env,
    post_run,
    start_ticking_coordinator,
)
from tests.forecastkit import wait_for_forecast

PLUGIN_ENV = plugin_env("tests.test_extension_model")


class LinearRegression(Model):
    """Ordinary linear regression with known noise σ: ∇q_i(β) = (y_i − ⟨x_i, β⟩)·x_i."""

    name: ClassVar[str] = "lr"
    sign_invariant: ClassVar[bool] = False
    has_response: ClassVar[bool] = True

    def gradients(
        self, beta: NDArray[np.float64], records: Records, sigma: float
    ) -> NDArray[np.float64]:
        assert records.y is not None
        residual = records.y - records.x @ beta
        gradients: NDArray[np.float64] = residual[:, None] * records.x
        return gradients

    def sample_records(self, draw: Draw) -> Records:
        x = draw.rng.standard_normal((draw.n, draw.beta_star.size))
        return Records(x, x @ draw.beta_star + draw.sigma * draw.rng.standard_normal(draw.n))

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d) + beta_bound**2


register_model(LinearRegression())

D, N = 3, 4000


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_fits_it_without_privacy_and_with_local_dp(
    capsys: pytest.CaptureFixture[str],
) -> None:
    common = ["simulate", "--model", "lr", "--n", "20000", "--d", str(D), "--seed", "1"]
    plain = _json(capsys, [*common, "--mechanism", "none", "--json"])
    private = _json(capsys, [*common, "--mechanism", "hospital", "--json"])
    # Noiseless gradient EM on least squares: each of the 10 rounds uses its own m = 2,000
    # records, and one step with η = 1 lands on that round's least-squares estimate, whose
    # error per coordinate is N(0, σ²/m): the norm over d = 3 is σ/√m·χ₃ (mean 0.036);
    # 0.1 is χ₃ > 4.5, probability below 1e-4. The private run stays far below β = 0's 3.
    assert plain["model"] == "lr" and plain["error"] < 0.1
    assert private["error"] < 1.0


def test_plan_and_audit_take_it(capsys: pytest.CaptureFixture[str]) -> None:
    plan = ["plan", "--model", "lr", "--d", str(D), "--n", "20000", "--hospitals", "2"]
    # --workers 1: in this process, where the model is registered (a pool's fresh worker
    # processes would need LDPEM_PLUGINS, as a deployment's do).
    assert main([*plan, "--seeds", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lr, d = 3") and "expected final error" in out
    argv = ["audit", "--model", "lr", "--mechanism", "local", "--accounting", "exact"]
    rows = _json(capsys, [*argv, "--d", "2", "--draws", "4000", "--holder-draws", "200", "--json"])
    results = rows["results"] if isinstance(rows, dict) else rows
    assert results and all(r["passed"] for r in results), results


def test_a_federated_run_of_it_with_two_agent_processes(tmp_path: Path) -> None:
    records, beta_star = get_model("lr").generate(N, D, rng=np.random.default_rng(7))
    assert records.y is not None
    paths = []
    for i, rows in enumerate((slice(0, N // 2), slice(N // 2, N))):
        table = np.column_stack([records.x[rows], records.y[rows]])
        path = tmp_path / f"h{i}.csv"
        header = ",".join([*(f"x{j}" for j in range(D)), "y"])
        np.savetxt(path, table, delimiter=",", header=header, comments="")
        paths.append(path)
    processes = Processes(tmp_path, env=PLUGIN_ENV)
    try:
        url = start_ticking_coordinator(processes, tmp_path, forecast_workers=2)
        counts = [N // 2] * 2
        created = post_run(url, counts, model="lr", d=D, sigma=1.0, rounds=4, mechanism="hospital")
        run_id = created["run_id"]
        # Simulated by pool workers that imported this module through LDPEM_PLUGINS.
        forecast = wait_for_forecast(url, run_id)["forecast"]
        assert forecast["seeds"] >= 2 and forecast["low"] <= forecast["mean"] <= forecast["high"]
        run = agents_to_the_end(processes, url, run_id, paths, model="lr", state=tmp_path)
    finally:
        processes.stop()
    assert run["status"] == "finished", run
    error = get_model("lr").error(np.array(run["beta"]), beta_star)
    assert error < 1.0, error  # β = 0 would be 3.0
