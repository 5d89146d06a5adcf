"""A model that owns its start (issue 30, point 5; docs/EXTENDING.md).

The mixture 0.7·N(β*, σ²I) + 0.3·N(−β*, σ²I) with known weights is not symmetric: gradient
EM from the default start (a random direction of norm σ) ends in the mirror mode −β*
for a share of seeds, even with no privacy. From β⁰ = 0, which is not a fixed point here
(the prior weight 0.7 makes the first step 0.4·mean(y) ≈ 0.16·β*), it goes to β*. The
model states that public rule (``start_rule = "origin"``) in this file only; the rule is
published in the run's parameters, and a real federated run (a coordinator and two agent
processes that load this module through ``LDPEM_PLUGINS``) starts from it and equals its
in-process simulation bit for bit.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from ldpem.cli import main
from ldpem.client.data import load_records
from ldpem.client.ledger import Ledger
from ldpem.common.models import Model, Records, get_model, register_model
from ldpem.common.models.base import DEFAULT_START, Draw, FloatArray, tau_spread
from ldpem.common.planning.simulator import simulate_run
from ldpem.common.planning.study import Study, run_study
from ldpem.common.protocol import GIVEN_START, FederatedStreams, run_start
from ldpem.common.wire import PublicParameters, RunCreate, public_parameters
from ldpem.processes import Processes
from tests.fedkit import (
    admin_headers,
    agents_to_the_end,
    plugin_env,
    post_run,
    split_into_files,
    start_ticking_coordinator,
)

PLUGIN_ENV = plugin_env("tests.test_extension_start")
#: The known weight π of the component at +β*.
WEIGHT = 0.7


class _SkewedMixture(Model):
    """π·N(β*, σ²I) + (1 − π)·N(−β*, σ²I), π = ``WEIGHT`` known."""

    sign_invariant: ClassVar[bool] = False
    has_response: ClassVar[bool] = False

    def gradients(self, beta: FloatArray, records: Records, sigma: float) -> FloatArray:
        """σ²·∇q_i(β; β) = (2w_i − 1)·y_i − β, with the posterior w_i = P(Z = +1 | y_i) =
        sigmoid(2⟨β, y_i⟩/σ² + logit π), so 2w_i − 1 = tanh(⟨β, y_i⟩/σ² + logit(π)/2)."""
        y = records.x
        shift = 0.5 * math.log(WEIGHT / (1.0 - WEIGHT))
        weight = np.tanh((y @ beta) / (sigma * sigma) + shift)
        gradients: FloatArray = weight[:, None] * y - beta[None, :]
        return gradients

    def sample_records(self, draw: Draw) -> Records:
        labels = np.where(draw.rng.random(draw.n) < WEIGHT, 1.0, -1.0)
        noise = draw.sigma * draw.rng.standard_normal((draw.n, draw.beta_star.size))
        return Records(labels[:, None] * draw.beta_star[None, :] + noise)

    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        return tau_spread(beta_bound=beta_bound, sigma=sigma, d=d)


class SkewedFromOrigin(_SkewedMixture):
    """The mixture, started at β⁰ = 0: a public rule that reads no data."""

    name: ClassVar[str] = "skewed-gmm"
    start_rule: ClassVar[str] = "origin"

    def start(self, d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
        return np.zeros(d)


class SkewedFromData(_SkewedMixture):
    """The mixture, started from its data: E[y] = (2π − 1)·β*, so β¹ = mean(y)/(2π − 1)
    from round 0's private mean of the records themselves (a start that reads data: round
    0 is its start round, privatized and charged like every round)."""

    name: ClassVar[str] = "skewed-gmm-data"
    start_rule: ClassVar[str] = "data-mean"
    start_reads_data: ClassVar[bool] = True

    def start(self, d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
        return np.zeros(d)  # β⁰, public; round 0 does not use it

    def start_statistics(self, records: Records, sigma: float) -> FloatArray:
        return records.x

    def start_from(self, mean: FloatArray, sigma: float) -> FloatArray:
        return mean / (2.0 * WEIGHT - 1.0)


class SkewedFromRandom(_SkewedMixture):
    """The same mixture with the default start, for comparison."""

    name: ClassVar[str] = "skewed-gmm-random"


register_model(SkewedFromOrigin())
register_model(SkewedFromData())
register_model(SkewedFromRandom())

D, SNR, SEEDS = 3, 3.0, range(10)
#: The mirror mode −β* is at distance 2‖β*‖ = 6 from β*; β* itself within the EM's
#: statistical error, about √(d/m) ≈ 0.04 per round of m = 2,000 records.
MIRROR, NEAR = 3.0, 0.3


def test_a_model_must_name_its_own_start_rule() -> None:
    class Unnamed(_SkewedMixture):
        name: ClassVar[str] = "unnamed-start"

        def start(self, d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
            return np.ones(d)

    assert Unnamed.start_rule == DEFAULT_START
    with pytest.raises(ValueError, match="unnamed-start has its own start: name its rule"):
        register_model(Unnamed())

    class Statisticless(_SkewedMixture):
        name: ClassVar[str] = "statisticless"
        start_rule: ClassVar[str] = "data"
        start_reads_data: ClassVar[bool] = True

    with pytest.raises(ValueError, match="reads data needs start_statistics and start_from"):
        register_model(Statisticless())


def test_ldpem_simulate_takes_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "skewed-gmm", "--mechanism", "hospital", "--n", "20000"]
    assert main([*argv, "--d", str(D), "--seed", "1", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    # β⁰ = 0: the initial error is ‖β*‖ = snr·σ = 3 exactly; the mirror mode is at 6.
    assert outcome["model"] == "skewed-gmm" and outcome["initial_error"] == pytest.approx(SNR)
    assert outcome["error"] < 1.0


def test_simulate_starts_from_the_rule_and_avoids_the_mirror_mode() -> None:
    def finals(model: str) -> list[float]:
        study = Study(model=model, mechanism="none", n=20_000, d=D, snr=SNR)
        results = [run_study(replace(study, seed=seed)) for seed in SEEDS]
        assert all(r.final_error is not None for r in results)
        if model == SkewedFromOrigin.name:
            # β⁰ = 0: the initial error is ‖β*‖ = snr·σ exactly.
            assert all(r.betas[0].tolist() == [0.0] * D for r in results)
            assert all(r.initial_error == pytest.approx(SNR, rel=1e-12) for r in results)
        return [float(r.final_error) for r in results if r.final_error is not None]

    from_origin, from_random = finals(SkewedFromOrigin.name), finals(SkewedFromRandom.name)
    assert max(from_origin) < NEAR, from_origin
    # The default start ends in the mirror mode for 7 of these 10 seeds (measured
    # 2026-11-26, as the issue saw): at least 3 leaves room for another platform's floats.
    assert sum(error > MIRROR for error in from_random) >= 3, from_random


def test_a_start_from_data_is_round_0_privatized_and_charged_like_any_other() -> None:
    study = Study(model=SkewedFromData.name, mechanism="hospital", n=20_000, d=D, snr=SNR)
    for seed in range(3):
        result = run_study(replace(study, seed=seed))
        assert result.errors is not None and result.betas[0].tolist() == [0.0] * D
        # Round 0 is the start: β¹ = the private mean of y over 0.4, already near β*
        # (from the origin, β¹ = 0.16·β* is at 0.84·‖β*‖ ≈ 2.5), and it stays there.
        assert result.errors[0] < 1.0 and result.final_error is not None
        assert result.final_error < 1.0
    # The same rounds, the same records per round and the same noise as every round:
    # the start round takes round 0's share of the records; each record reports once.
    plain = run_study(replace(study, model=SkewedFromOrigin.name))
    data = run_study(study)
    assert data.round_records == plain.round_records
    assert data.holder_mechanisms is not None and plain.holder_mechanisms is not None
    assert data.holder_mechanisms == plain.holder_mechanisms  # frozen values: equal fields


def test_the_rule_is_a_public_parameter_omitted_only_when_it_is_the_default() -> None:
    def params(model: str, **extra: object) -> PublicParameters:
        hospitals = [{"name": "h0", "records": 100}]
        request = {"model": model, "d": D, "sigma": 1.0, "rounds": 2, "hospitals": hospitals}
        return public_parameters(RunCreate.model_validate({**request, **extra}))

    # A built-in model's parameters serialize as before (the agents' stored bindings and
    # digests of older runs do not change); the rule is still there to read.
    assert "start" not in params("gmm").model_dump() and params("gmm").start == DEFAULT_START
    assert params("skewed-gmm").model_dump()["start"] == "origin"
    given = params("skewed-gmm", beta0=[1.0, 0.0, 0.0])
    assert given.model_dump()["start"] == GIVEN_START
    # What a coordinator may claim is checked: a rule the model does not have is refused.
    claimed = {**params("gmm").model_dump(), "start": "origin"}
    with pytest.raises(ValidationError, match="start must be one of"):
        PublicParameters.model_validate(claimed)


COUNTS, ROUNDS, RUN_SEED, AGENT_SEEDS = [2000, 2000], 4, 11, [31, 32]


@pytest.mark.parametrize(
    ("name", "rule"), [(SkewedFromOrigin.name, "origin"), (SkewedFromData.name, "data-mean")]
)
def test_a_federated_run_starts_from_the_rule_and_equals_its_simulation(
    tmp_path: Path, name: str, rule: str
) -> None:
    model = get_model(name)
    records, beta_star = model.generate(sum(COUNTS), D, snr=SNR, rng=np.random.default_rng(4))
    paths = split_into_files(tmp_path, records.x, COUNTS)
    processes = Processes(tmp_path, env=PLUGIN_ENV)
    try:
        url = start_ticking_coordinator(processes, tmp_path)
        created = post_run(
            url,
            COUNTS,
            model=model.name,
            d=D,
            sigma=1.0,
            rounds=ROUNDS,
            mechanism="hospital",
            seed=RUN_SEED,
            forecast=False,
        )
        run_id = created["run_id"]
        run = agents_to_the_end(
            processes, url, run_id, paths, model=model.name, state=tmp_path, seeds=AGENT_SEEDS
        )
        trajectory = httpx.get(
            f"{url}/v1/runs/{run_id}/trajectory", headers=admin_headers(), timeout=30
        ).json()["betas"]
    finally:
        processes.stop()
    assert run["status"] == "finished", run
    # The rule is public and bound: in the run's parameters, which every agent stores.
    params = PublicParameters.model_validate(created["params"])
    assert params.start == rule and created["params"]["start"] == rule
    beta0 = run_start(RUN_SEED, D, 1.0, model=model.name)
    assert trajectory[0] == beta0.tolist() == [0.0] * D
    simulated = simulate_run(
        params,
        holders=[load_records(path, model.name) for path in paths],
        beta0=beta0.tolist(),
        streams=FederatedStreams(run_id=run_id, seeds=AGENT_SEEDS, run_seed=RUN_SEED),
    )
    assert [beta.tolist() for beta in simulated.betas] == trajectory  # bit for bit
    assert model.error(np.array(run["beta"]), beta_star) < 1.0  # the mirror mode is at 6
    # Every round, the start round included, was charged in each agent's ledger.
    for i in range(len(COUNTS)):
        ledger = Ledger(tmp_path / f"state{i}")
        try:
            entries = ledger.entries(run_id)
            assert [(e.round, e.status) for e in entries] == [
                (t, "acknowledged") for t in range(ROUNDS)
            ]
            assert len({e.mu for e in entries}) == 1 and math.isfinite(entries[0].mu)
        finally:
            ledger.close()
