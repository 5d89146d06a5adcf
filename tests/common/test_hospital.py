"""The hospital-level mechanism: calibration, one draw per sum, sensitivity, privacy audit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core.accounting import Budget, epsilon_spent
from ldpem.common.core.calibration import central_scale, round_epsilon_tilde, smoothing_precision
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import HospitalTruncation, LocalTruncation
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import every_round, run_gradient_em
from ldpem.common.protocol import (
    holder_records_per_round,
    holder_scale,
    local_noise_std,
    make_mechanism,
)
from ldpem.common.wire import PublicParameters
from tests.common.auditkit import EPSILON, audited, audited_holder, honest_as, variant
from tests.publickit import published_params


def honest_hospital(d: int = 1) -> HospitalTruncation:
    return honest_as(HospitalTruncation, "hospital", d=d)


def test_calibration_is_the_central_scale_with_the_holders_own_count() -> None:
    mech = make_mechanism(
        "hospital", d=10, records_per_round=2000, epsilon=1.0, delta=1e-6, tau=1.9
    )
    assert isinstance(mech, HospitalTruncation)
    eps_tilde = round_epsilon_tilde(1.0, 1e-6)
    assert mech.scale == pytest.approx(
        central_scale(records=2000, tau=1.9, eps_tilde=eps_tilde, d=10)
    )
    assert mech.smoothing == smoothing_precision(10)
    # The one draw on the sum is calibrated to the replace-one sensitivity of the sum.
    assert mech.sensitivity(10) == pytest.approx(
        2 * mech.scale * truncation_bound(mech.smoothing) * math.sqrt(10)
    )
    spent = epsilon_spent(sensitivity=mech.sensitivity(10), noise_std=mech.noise_std, delta=1e-6)
    assert spent == pytest.approx(1.0, rel=1e-9)
    assert mech.noise_std == local_noise_std(
        scale=mech.scale, smoothing=mech.smoothing, d=10, budget=Budget(1.0, 1e-6)
    )


def test_hospital_scale_uses_the_enrolled_count_per_round() -> None:
    assert holder_records_per_round(50_003, 10) == 5000
    assert holder_records_per_round(7, 10) == 1
    assert holder_records_per_round(123, 10, reuse=True) == 123
    params = PublicParameters.model_validate(
        published_params(
            mechanism="hospital", rounds=10, d=10, epsilon=1.0, delta=1e-6, tau=1.9, scale=None
        )
    )
    scale = holder_scale(params, 50_003)
    direct = make_mechanism(
        "hospital", d=10, records_per_round=5000, epsilon=1.0, delta=1e-6, tau=1.9
    )
    assert isinstance(direct, HospitalTruncation)
    assert scale == pytest.approx(direct.scale)


def test_the_sum_gets_one_draw_whatever_the_count() -> None:
    mech = HospitalTruncation(scale=1.0, smoothing=2.0, noise_std=3.0)
    rng = np.random.default_rng(0)
    noise = np.array([mech.holder_noise(10_000, 2, rng) for _ in range(4000)])
    # Sample std of 8000 normals within 5% of σ (a local sum would have √10⁴·σ = 300).
    assert np.std(noise) == pytest.approx(3.0, rel=0.05)
    assert np.all(mech.holder_noise(0, 2, rng) == 0.0)
    local = LocalTruncation(scale=1.0, smoothing=2.0, noise_std=3.0)
    assert np.std(local.holder_noise(10_000, 2000, rng)) == pytest.approx(300.0, rel=0.1)


def test_replacing_one_record_moves_the_sum_by_at_most_the_sensitivity() -> None:
    mech = HospitalTruncation(scale=0.7, smoothing=2.0, noise_std=0.0)
    rng = np.random.default_rng(1)
    d = 4
    base = rng.standard_normal((500, d)) * 5
    worst = 0.0
    for extreme in (1e300, -1e300, 1e3, -1e3, 0.0):
        for other in (1e300, -1e300, 0.0, 2.0):
            a, b = base.copy(), base.copy()
            a[0], b[0] = extreme, other
            diff = mech.holder_sum(a, rng) - mech.holder_sum(b, rng)
            worst = max(worst, float(np.linalg.norm(diff)))
    assert worst <= mech.sensitivity(d) * (1 + 1e-12)
    assert worst >= 0.999 * mech.sensitivity(d)  # the bound is tight (±huge records)


def test_privacy_audit_passes_the_honest_mechanism() -> None:
    outcome, distance = audited(honest_hospital(), d=1, draws=200_000, seed=3)
    assert outcome.lower_bound <= EPSILON
    assert 0 < distance <= honest_hospital().sensitivity(1) * (1 + 1e-9)


class HalfNoiseHospital(HospitalTruncation):
    """Broken on purpose: the one draw is calibrated for half the sensitivity."""

    def holder_noise(self, count: int, d: int, rng: np.random.Generator) -> np.ndarray:
        return super().holder_noise(count, d, rng) / 2

    def privatize(self, gradients: ArrayLike, rng: np.random.Generator) -> NDArray[np.float64]:
        reports = self.contributions(np.asarray(gradients, dtype=np.float64))
        return reports + rng.normal(0.0, self.noise_std / 2, reports.shape)


def test_privacy_audit_catches_noise_for_half_the_sensitivity() -> None:
    broken = variant(HalfNoiseHospital, honest_hospital())
    outcome, _ = audited(broken, d=1, draws=200_000, seed=4)
    assert outcome.lower_bound > EPSILON


def test_holder_round_path_measures_one_draw_of_the_calibrated_noise() -> None:
    broken_low = []
    halved = HalfNoiseHospital(scale=1.0, smoothing=2.0, noise_std=1.0)
    for mechanism in (honest_hospital(d=2), halved):
        outcome, _ = audited_holder(mechanism, d=2, draws=2000, seed=5)
        assert outcome.noise_ratio is not None
        broken_low.append(outcome.noise_ratio[1] < 1.0)
    assert broken_low == [False, True]


def test_holder_mechanisms_must_match_the_holders() -> None:
    mech = honest_hospital(d=2)
    records = Records(np.zeros((20, 2)))
    with pytest.raises(ValueError, match="one mechanism per holder"):
        run_gradient_em(
            model=get_model("gmm"),
            holders=[records, records],
            sigma=1.0,
            mechanisms=every_round([mech], 2),
            beta0=np.ones(2),
            rng=np.random.default_rng(0),
        )
