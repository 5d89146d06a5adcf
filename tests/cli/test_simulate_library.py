"""ldpem.simulate: the in-process simulator (acceptance accuracy, robustness, convergence)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from ldpem.common.errors import UserError
from ldpem.common.mechanisms import mechanism_names
from ldpem.common.models import Records, model_names
from ldpem.simulate import (
    OUTLIER_NORM,
    SimulationConfig,
    SimulationOutcome,
    add_outliers,
    hospital_sizes,
    simulate,
)

SEEDS = range(10)
# The acceptance setting of issue 3: GMM, n = 2e5, d = 10, ε = 1, δ = n^-1.1, 10 rounds,
# partitioned, exact accounting, ‖β*‖ = 3, β⁰ ~ N(0, (B²/d) I).
ACCEPTANCE = SimulationConfig(model="gmm", n=200_000, d=10, epsilon=1.0, rounds=10)
OUTLIER_SHARE = 0.001


def _runs(config: SimulationConfig) -> list[SimulationOutcome]:
    return [simulate(replace(config, seed=seed)) for seed in SEEDS]


def _errors(outcomes: list[SimulationOutcome]) -> np.ndarray:
    return np.array([float(o["error"]) for o in outcomes])


@pytest.fixture(scope="module")
def clean() -> dict[str, list[SimulationOutcome]]:
    return {m: _runs(replace(ACCEPTANCE, mechanism=m)) for m in ("local", "central", "none")}


@pytest.fixture(scope="module")
def polluted() -> dict[str, list[SimulationOutcome]]:
    config = replace(ACCEPTANCE, outliers=OUTLIER_SHARE)
    return {m: _runs(replace(config, mechanism=m)) for m in ("local", "central", "none")}


@pytest.mark.parametrize(
    ("mechanism", "limit"), [("local", 0.55), ("central", 0.07), ("none", 0.03)]
)
def test_acceptance_accuracy(
    clean: dict[str, list[SimulationOutcome]], mechanism: str, limit: float
) -> None:
    assert _errors(clean[mechanism]).mean() <= limit


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["local", "central"])
def test_private_mechanisms_keep_their_accuracy_under_gross_outliers(
    clean: dict[str, list[SimulationOutcome]],
    polluted: dict[str, list[SimulationOutcome]],
    mechanism: str,
) -> None:
    before, after = _errors(clean[mechanism]), _errors(polluted[mechanism])
    outcome = clean[mechanism][0]
    # Replacing a share p of the m records of a round moves the truncated mean by at most
    # 2p·s·(2√2/3) per coordinate; a contraction of 1/2 (or better) at most doubles that
    # in the fixed point. On top, three standard errors of the difference of two means.
    record_bound = float(outcome["scale"]) * 2.0 * math.sqrt(2.0) / 3.0
    bias = 2.0 * (2.0 * OUTLIER_SHARE * record_bound * math.sqrt(ACCEPTANCE.d))
    spread = 3.0 * math.sqrt((before.var(ddof=1) + after.var(ddof=1)) / len(SEEDS))
    assert after.mean() <= before.mean() + bias + spread


@pytest.mark.slow
def test_non_private_em_breaks_down_under_gross_outliers(
    clean: dict[str, list[SimulationOutcome]], polluted: dict[str, list[SimulationOutcome]]
) -> None:
    assert _errors(polluted["none"]).mean() >= 5.0 * _errors(clean["none"]).mean()


def _allowance(outcome: SimulationOutcome) -> float:
    """0.15‖β*‖ for statistical error and truncation/clipping bias, plus three times the
    L2 norm of the noise one round adds to the averaged gradient."""
    d = int(outcome["d"])
    noise_std = float(outcome["noise_std"])
    if outcome["mechanism"] in ("local", "local-clip"):
        noise_std /= math.sqrt(int(outcome["records_per_round"]))
    if outcome["mechanism"] == "hospital":  # one draw on a sum of m records
        noise_std /= int(outcome["records_per_round"])
    beta_star = np.asarray(outcome["beta_star"])
    return 0.15 * float(np.linalg.norm(beta_star)) + 3.0 * noise_std * math.sqrt(d)


@pytest.mark.parametrize("mechanism", mechanism_names())
@pytest.mark.parametrize("model", model_names())
def test_every_model_converges_with_every_mechanism(model: str, mechanism: str) -> None:
    local = mechanism in ("local", "local-clip")
    config = SimulationConfig(
        model=model,
        mechanism=mechanism,
        n=100_000 if local else 20_000,
        d=5,
        epsilon=4.0 if local else 2.0,
        clip=5.0,
    )
    outcomes = [simulate(replace(config, seed=seed)) for seed in range(3)]
    final = np.mean([float(o["error"]) for o in outcomes])
    initial = np.mean([float(o["initial_error"]) for o in outcomes])
    assert final <= _allowance(outcomes[0])
    assert final <= 0.5 * initial


def test_outcome_reports_rounds_errors_and_parameters() -> None:
    outcome = simulate(SimulationConfig(n=2000, d=4, rounds=5))
    assert outcome["delta"] == pytest.approx(2000**-1.1)
    assert len(outcome["errors"]) == 5
    assert outcome["error"] == outcome["errors"][-1]
    assert len(outcome["beta"]) == 4
    assert outcome["records_per_round"] == 400
    assert outcome["tau"] == pytest.approx(9.0 / 4 + 1.0)


def test_reuse_reports_every_record_every_round_with_a_split_budget() -> None:
    base = SimulationConfig(n=4000, d=4, rounds=5, seed=3)
    partitioned, reused = simulate(base), simulate(replace(base, reuse=True))
    assert reused["records_per_round"] == 4000
    # Five participations at ε̃/√5 each: the per-report noise is larger than with one.
    assert reused["noise_std"] > partitioned["noise_std"]


def test_simulation_is_deterministic_given_the_seed() -> None:
    config = SimulationConfig(n=3000, d=3, hospitals=3, seed=7)
    assert simulate(config)["beta"] == simulate(config)["beta"]
    assert simulate(config)["beta"] != simulate(replace(config, seed=8))["beta"]


def test_hospitals_split_the_records_unequally_and_each_takes_part_in_every_round() -> None:
    outcome = simulate(SimulationConfig(n=5000, d=3, hospitals=4, rounds=10, seed=1))
    sizes = outcome["hospital_sizes"]
    assert sum(sizes) == 5000 and len(sizes) == 4
    assert min(sizes) >= 10 and len(set(sizes)) > 1
    # m as a federated run publishes it: ⌊Σ nᵢ / T⌋ (it sets s; central noise is
    # calibrated on each round's count).
    assert outcome["records_per_round"] == 5000 // 10


def test_hospital_sizes_respect_the_minimum() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = hospital_sizes(100, 7, 10, rng)
        assert sum(sizes) == 100 and min(sizes) >= 10
    with pytest.raises(UserError, match="n must be at least 80"):
        hospital_sizes(79, 8, 10, rng)


def test_outliers_replace_the_requested_share_with_gross_records() -> None:
    rng = np.random.default_rng(0)
    records = Records(rng.standard_normal((5000, 4)), rng.standard_normal(5000))
    polluted = add_outliers(records, 0.002, rng)
    changed = np.flatnonzero(np.any(polluted.x != records.x, axis=1))
    assert changed.size == 10
    assert np.all(np.linalg.norm(polluted.x[changed], axis=1) > 0.2 * OUTLIER_NORM)
    assert polluted.y is not None and np.sum(polluted.y != records.y) == 10
    assert add_outliers(records, 0.0, rng) is records


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"epsilon": 0.0}, "epsilon must be a finite number > 0, got 0.0"),
        ({"delta": 1.0}, "delta must be in (0, 1), got 1.0"),
        ({"n": 5, "rounds": 10}, "n must be at least 10"),
        ({"model": "hmm"}, "model must be one of gmm, mrm, rmc, got 'hmm'"),
        ({"hospitals": 0}, "hospitals must be an integer >= 1, got 0"),
        ({"n": 30, "hospitals": 4}, "n must be at least 40 for 4 hospital(s)"),
        ({"missing": 0.2}, "missing must be 0 for model gmm, got 0.2"),
    ],
)
def test_bad_configurations_raise_one_line_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as caught:
        simulate(replace(SimulationConfig(n=100, d=2), **change))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_every_round_of_every_hospital_goes_through_holder_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ldpem.common import rounds, simulation

    calls: list[int] = []
    real = rounds.holder_round  # what ldpem.common.simulation calls

    def counting(**kwargs: Any) -> Any:
        calls.append(kwargs["records"].n)
        return real(**kwargs)

    monkeypatch.setattr(simulation, "holder_round", counting)
    outcome = simulate(SimulationConfig(n=3000, d=3, rounds=4, hospitals=3, seed=2))
    assert len(calls) == 4 * 3
    assert sum(calls) == 3000  # partitioned: every record reports exactly once
    assert outcome["records_per_round"] == 3000 // 4
