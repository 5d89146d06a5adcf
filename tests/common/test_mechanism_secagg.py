"""The secagg mechanism: registration, the quantized noisy sum, calibration, construction."""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np
import pytest
from scipy import stats

from ldpem.common.core.accounting import Budget
from ldpem.common.core.secagg_quantize import grid_step, integer_sensitivity, modulus_bits
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import (
    Mechanism,
    SecAggSkellam,
    get_mechanism,
    mechanism_names,
    register_mechanism,
)
from ldpem.common.mechanisms.base import NoiseSite
from ldpem.common.models import Records, get_model
from ldpem.common.protocol import (
    aggregate,
    derive_public_values,
    holder_mechanism,
    make_mechanism,
    study_colluders,
    study_t_min,
)
from ldpem.common.protocol.rounds import holder_round
from ldpem.common.secagg import Roster, generate_signing_key, minimum_t_min, public_key_bytes
from ldpem.common.wire import PublicParameters, RunCreate


def gradients(n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed).standard_t(df=2, size=(n, d)) * 5
    g[0], g[1], g[2] = 1e300, -1e300, np.nan
    return g


def calibrated(
    t_min: int = 3, d: int = 10, epsilon: float = 1.0, delta: float = 1e-6
) -> SecAggSkellam:
    mechanism = make_mechanism(
        "secagg", d=d, records_per_round=5000, epsilon=epsilon, delta=delta, tau=10.0, t_min=t_min
    )
    assert isinstance(mechanism, SecAggSkellam)
    return mechanism


def test_it_is_registered_after_central_clip_and_before_none() -> None:
    names = mechanism_names()
    assert names.index("central-clip") < names.index("secagg") < names.index("none")
    kind = get_mechanism("secagg")
    assert kind is SecAggSkellam
    assert kind.noise_site == "shares" and kind.needs == "scale"
    assert kind.scale_rule == "square-root" and not kind.per_holder_scale
    # A holder's report is not private on its own: it needs the other holders' shares.
    assert not kind.locally_private()
    assert kind.noise_draws(10) == 1 and kind.noise_draws(0) == 0
    # Until the masking protocol is wired in, a federated run cannot publish it.
    assert "secagg" in mechanism_names(federated=True)  # masked: client/secagg.py


def test_the_grid_and_sensitivity_follow_the_record_bound() -> None:
    mechanism = SecAggSkellam(scale=1.7, smoothing=2.1, noise_std=0.0, t_min=2)
    bound = 1.7 * truncation_bound(2.1)
    assert mechanism.record_bound(6) == bound
    assert mechanism.grid == grid_step(bound)
    linf = integer_sensitivity(bound, mechanism.grid, 6).linf
    assert mechanism.sensitivity(6) == mechanism.grid * math.sqrt(6 * linf**2)
    # The rounding slack makes it at most 2^-10 larger than the real-valued 2B√d.
    assert (
        2 * bound * math.sqrt(6)
        <= mechanism.sensitivity(6)
        <= (2 * bound * math.sqrt(6) * (1 + 2**-9))
    )


def test_a_holders_sum_is_its_quantized_sum_on_the_grid() -> None:
    mechanism = SecAggSkellam(scale=1.0, smoothing=2.0, noise_std=0.0, t_min=2)
    g = gradients(3000, 4, 1)
    total = mechanism.holder_sum(g, np.random.default_rng(0))
    exact = mechanism.contributions(g).sum(axis=0)
    assert np.all(np.abs(total - exact) <= mechanism.grid / 2 + 3000 * mechanism.grid * 2**-31)
    integers = total / mechanism.grid
    np.testing.assert_array_equal(integers, np.round(integers))  # γ·integer, exactly


def test_the_share_has_the_calibrated_std_and_t_min_shares_the_full_noise() -> None:
    mechanism = calibrated(t_min=3, d=4)
    g = gradients(200, 4, 2)
    rng = np.random.default_rng(3)
    clean = mechanism.with_noise(0.0).holder_sum(g, rng)
    noise = np.array([mechanism.holder_sum(g, rng) - clean for _ in range(4000)]).ravel()
    level = 1e-6
    ss = float(np.sum(noise**2))
    low = math.sqrt(ss / stats.chi2.ppf(1 - level / 2, noise.size))
    high = math.sqrt(ss / stats.chi2.ppf(level / 2, noise.size))
    assert low <= mechanism.noise_std <= high
    assert mechanism.share_mean == pytest.approx((mechanism.noise_std / mechanism.grid) ** 2 / 2)
    # privatize: a record alone plus t_min shares, whose std is √t_min times a share's.
    released = mechanism.privatize(np.zeros((20000, 4)), rng).ravel()
    assert math.isclose(float(np.std(released)), math.sqrt(3) * mechanism.noise_std, rel_tol=0.02)


@pytest.mark.parametrize("t_min", [1, 2, 5, 50])
def test_t_min_honest_shares_give_the_budget_and_fewer_do_not(t_min: int) -> None:
    mechanism = calibrated(t_min=t_min)
    assert mechanism.epsilon(10, delta=1e-6, honest=t_min) <= 1.0
    assert mechanism.epsilon(10, delta=1e-6, honest=t_min) >= 0.999
    if t_min > 1:
        assert mechanism.epsilon(10, delta=1e-6, honest=t_min - 1) > 1.0
    # More honest holders, more noise: never less private.
    assert mechanism.epsilon(10, delta=1e-6, honest=t_min + 1) < 1.0
    assert mechanism.fallback_epsilon(10, delta=1e-6) == mechanism.epsilon(10, delta=1e-6, honest=1)


def test_the_noise_on_the_sum_does_not_depend_on_the_count() -> None:
    """The shares are calibrated in grid units on the sum: the same λ for any m, and the
    std in the contributions' units follows γ ∝ s ∝ √m (as the central noise's s/m·m)."""
    small = make_mechanism(
        "secagg", d=10, records_per_round=1000, epsilon=1.0, delta=1e-6, tau=10.0, t_min=3
    )
    large = make_mechanism(
        "secagg", d=10, records_per_round=16000, epsilon=1.0, delta=1e-6, tau=10.0, t_min=3
    )
    assert isinstance(small, SecAggSkellam) and isinstance(large, SecAggSkellam)
    assert large.scale == pytest.approx(4 * small.scale)
    ratio = large.share_mean / small.share_mean
    assert 0.99 < ratio < 1.01  # Δ∞ differs by the position of 2B/γ in [2^10, 2^11)


def test_chunked_holder_rounds_are_identical() -> None:
    mechanism = calibrated(t_min=2, d=3)
    model = get_model("gmm")
    records = Records(np.random.default_rng(4).normal(size=(1000, 3)) * 3)
    reports = [
        holder_round(
            model=model,
            beta=np.ones(3),
            records=records,
            sigma=1.0,
            mechanism=mechanism,
            rng=np.random.default_rng(9),
            chunk=chunk,
        ).total
        for chunk in (1, 7, 1000)
    ]
    for report in reports[1:]:
        np.testing.assert_array_equal(report, reports[0])


def test_the_aggregate_of_reports_is_gamma_times_the_integer_sum() -> None:
    """math.fsum of the holders' floats is exactly γ·Σ integers: what a federated run gets
    by unmasking the integer sum mod 2^k and multiplying by γ."""
    mechanism = calibrated(t_min=3, d=5)
    rng = np.random.default_rng(5)
    totals = [mechanism.holder_sum(gradients(50 + k, 5, k), rng) for k in range(40)]
    integers = [[int(v) for v in total / mechanism.grid] for total in totals]
    summed, _ = aggregate(totals, [1] * 40)
    expected = [sum(column) * mechanism.grid for column in zip(*integers, strict=True)]
    assert list(summed) == expected


def test_a_masked_sum_mod_2_to_the_k_unmasks_to_the_simulators_aggregate() -> None:
    """The federated path in miniature: each holder's integer Q + Z plus masks that cancel,
    all mod 2^k (k from ``modulus_bits``), unmasked into the signed range, times γ: the
    same floats as the simulator's math.fsum of the holders' reports."""
    mechanism = calibrated(t_min=3, d=5)
    rng = np.random.default_rng(8)
    sizes = [30 + 7 * k for k in range(12)]
    totals = [mechanism.holder_sum(gradients(n, 5, k), rng) for k, n in enumerate(sizes)]
    bits = modulus_bits(
        records=sum(sizes),
        holders=len(sizes),
        bound=mechanism.record_bound(5),
        grid=mechanism.grid,
        share_mean=mechanism.share_mean,
        d=5,
    )
    modulus = 1 << bits
    masks = [[int(v) for v in rng.integers(0, 2**62, 5)] for _ in sizes]
    masks[-1] = [(-sum(column)) % modulus for column in zip(*masks[:-1], strict=True)]
    masked = [
        [(int(v / mechanism.grid) + m) % modulus for v, m in zip(total, mask, strict=True)]
        for total, mask in zip(totals, masks, strict=True)
    ]
    unmasked = [sum(column) % modulus for column in zip(*masked, strict=True)]
    signed = [v - modulus if v >= modulus // 2 else v for v in unmasked]
    federated = [v * mechanism.grid for v in signed]
    simulated, _ = aggregate(totals, sizes)
    assert list(simulated) == federated


def test_t_min_is_needed_and_kept() -> None:
    with pytest.raises(ValueError, match="without t_min"):
        make_mechanism("secagg", d=3, records_per_round=100, epsilon=1.0, delta=1e-6, tau=1.0)
    mechanism = calibrated(t_min=4)
    noisy = mechanism.with_noise(0.5)
    assert isinstance(noisy, SecAggSkellam) and noisy.t_min == 4
    with pytest.raises(ValueError, match="t_min must be an integer >= 1"):
        SecAggSkellam(scale=1.0, smoothing=1.0, noise_std=0.0, t_min=0)


def test_a_shares_mechanism_must_implement_the_shared_noise_interface() -> None:
    class Unaccounted(Mechanism):
        name: ClassVar[str] = "unaccounted"
        label: ClassVar[str] = "no calibration"
        noise_site: ClassVar[NoiseSite] = "shares"

        def contributions(self, gradients: np.ndarray) -> np.ndarray:
            return gradients

        def record_bound(self, d: int) -> float:
            return 1.0

        def sensitivity(self, d: int) -> float:
            return 1.0

    with pytest.raises(ValueError, match="noise shares go with the SharedNoise interface"):
        register_mechanism(Unaccounted)


@pytest.mark.parametrize(
    ("k", "t_min", "colluders"),
    # K − ⌊K/10⌋, and the largest c ≤ ⌊K/3⌋ with c < 2·t_min − K (docs/SECAGG.md).
    [
        (1, 1, 0),
        (2, 2, 0),
        (3, 3, 1),
        (4, 4, 1),
        (5, 5, 1),
        (10, 9, 3),
        (20, 18, 6),
        (100, 90, 33),
        (101, 91, 33),
        (1000, 900, 333),
    ],
)
def test_the_defaults_tolerate_a_tenth_dropping_and_a_third_colluding(
    k: int, t_min: int, colluders: int
) -> None:
    assert study_t_min(None, k) == t_min
    assert study_colluders(None, k, t_min) == colluders
    assert 0 <= colluders < max(1, 2 * t_min - k)  # the mask security bound
    if k >= 2:
        assert t_min >= minimum_t_min(k)  # more than K/2: what the secure aggregation takes


def test_given_t_min_and_colluders_are_checked() -> None:
    assert study_t_min(7, 10) == 7
    with pytest.raises(ValueError, match="t_min must be at most the 10 holders, got 11"):
        study_t_min(11, 10)
    assert study_colluders(3, 10, 7) == 3  # 3 < 2·7 − 10 = 4
    with pytest.raises(ValueError, match="colluders must be below 2·t_min − K = 4"):
        study_colluders(4, 10, 7)
    with pytest.raises(ValueError, match="colluders must be an integer >= 0, got -1"):
        study_colluders(-1, 10, 7)
    assert study_colluders(None, 10, 5) == 0  # t_min ≤ K/2: no colluder is safe


def run_request(**changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": "gmm",
        "d": 3,
        "sigma": 1.0,
        "rounds": 2,
        "mechanism": "secagg",
        "tau": 10.0,
        "hospitals": [{"name": f"h{i}", "records": 100} for i in range(5)],
        # A federated secagg run names its holders' roster (wire.secagg.check_shares).
        "roster": json.loads(
            Roster({f"h{i}": public_key_bytes(generate_signing_key()) for i in range(5)}).to_json()
        ),
    }
    return {**request, **changes}


def test_a_run_publishes_t_min_and_agents_build_the_simulators_mechanism() -> None:
    params = PublicParameters(**derive_public_values(RunCreate.model_validate(run_request())))
    assert (params.t_min, params.colluders) == (5, 1)  # 5 − ⌊5/10⌋; 1 < 2·5 − 5
    assert params.scale is not None
    fixed = PublicParameters(**derive_public_values(RunCreate.model_validate(run_request(t_min=4))))
    assert (fixed.t_min, fixed.colluders) == (4, 1)
    agent = holder_mechanism(
        params,
        records=100,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
    )
    simulator = make_mechanism(
        "secagg",
        d=3,
        records_per_round=params.records_per_round,
        epsilon=params.epsilon,
        delta=params.delta,
        tau=10.0,
        t_min=5,
        colluders=1,
    )
    assert repr(agent) == repr(simulator)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"t_min": 6}, "t_min 6 exceeds the 5 enrolled hospitals"),
        ({"t_min": 0}, "greater than or equal to 1"),
        ({"t_min": 2, "mechanism": "local"}, "t_min is only meaningful"),
        ({"colluders": 1, "mechanism": "local"}, "colluders is only meaningful"),
        ({"t_min": 4, "colluders": 3}, "colluders must be below 2·t_min − K = 3"),
        ({"colluders": -1}, "greater than or equal to 0"),
    ],
)
def test_a_run_request_with_a_bad_t_min_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunCreate.model_validate(run_request(**changes))


def test_other_mechanisms_publish_no_t_min() -> None:
    request = RunCreate.model_validate(run_request(mechanism="central", roster=None))
    values = derive_public_values(request)
    assert values["t_min"] is None


def test_a_federated_run_needs_the_roster_and_an_honest_majority() -> None:
    with pytest.raises(ValueError, match="needs the consortium's roster") as missing:
        RunCreate.model_validate(run_request(roster=None))
    # Where it goes (issue 43, finding 12).
    assert "ldpem run create --roster FILE" in str(missing.value)
    with pytest.raises(ValueError, match="more than half"):
        RunCreate.model_validate(run_request(t_min=2))
