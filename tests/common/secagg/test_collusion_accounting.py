"""The accounting honours the run's colluders (issue 29, finding 3; docs/SECAGG.md, "The
threat model").

A round's sum holds at least t_min reports, and the coordinator picks which holders
survive: up to c of the t_min may be its colluders, whose shares add no noise it does not
know. The shares are sized so that the t_min − c honest ones alone give the claimed
(ε, δ). Checked two ways, for every c' ≤ c colluders among exactly t_min survivors:

* in one dimension, with the exact hockey-stick divergence of the integer mechanism
  (``accounting.hockey_stick_delta``, summed over every integer with mass);
* in d = 10, with the Rényi bound the calibration uses (an upper bound of the exact ε).

The old sizing (t_min honest shares) fails the first check at the issue's numbers: K = 20,
t_min = 11, ε = 1 and two colluders deliver ε ≈ 1.02.
"""

from __future__ import annotations

import pytest

from ldpem.common.core.secagg_accounting import hockey_stick_delta, share_mean, skellam_mean_for
from ldpem.common.mechanisms.secagg import SecAggSkellam
from ldpem.common.protocol import make_mechanism, study_colluders, study_t_min

EPSILON, DELTA = 1.0, 1e-5


def shares_mechanism(d: int, t_min: int, colluders: int) -> SecAggSkellam:
    mechanism = make_mechanism(
        "secagg",
        d=d,
        records_per_round=5000,
        epsilon=EPSILON,
        delta=DELTA,
        tau=10.0,
        t_min=t_min,
        colluders=colluders,
    )
    assert isinstance(mechanism, SecAggSkellam)
    return mechanism


def exact_delta(mean: float, shift: int, epsilon: float) -> float:
    """The exact δ at ``epsilon`` of q + Sk(``mean``) on inputs ``shift`` apart: the exact ε
    at δ is at most ``epsilon`` exactly when this is at most δ (δ(ε) decreases in ε)."""
    return hockey_stick_delta(mean, shift, epsilon)


@pytest.mark.parametrize(("k", "t_min", "colluders"), [(20, 11, 2), (20, 18, 6), (10, 9, 3)])
def test_every_number_of_colluders_up_to_c_keeps_the_claim_exactly(
    k: int, t_min: int, colluders: int
) -> None:
    """One dimension, exact: with c' ≤ c colluders among t_min survivors the honest noise
    is Sk((t_min − c')·λ_s), and its exact ε is at most the claimed one."""
    mechanism = shares_mechanism(1, t_min, colluders)
    shift = mechanism.integer_sensitivity(1).linf
    for c in sorted({0, colluders // 2, colluders}):
        assert exact_delta((t_min - c) * mechanism.share_mean, shift, EPSILON) <= DELTA, c
    # Not loose either: at c' = c the exact ε is above 0.85 of the claim.
    assert exact_delta((t_min - colluders) * mechanism.share_mean, shift, 0.85) > DELTA


@pytest.mark.parametrize(
    ("k", "t_min", "colluders"), [(20, 11, 2), (100, 90, 33), (1000, 900, 333)]
)
def test_the_renyi_bound_holds_for_every_colluder_count_in_ten_dimensions(
    k: int, t_min: int, colluders: int
) -> None:
    mechanism = shares_mechanism(10, t_min, colluders)
    assert mechanism.noise_shares == t_min - colluders
    for c in (0, colluders // 2, colluders):
        assert mechanism.epsilon(10, delta=DELTA, honest=t_min - c) <= EPSILON * (1 + 1e-12)
    if k > 20:  # the defaults of K = 100 and 1000
        assert (study_t_min(None, k), study_colluders(None, k, t_min)) == (t_min, colluders)


def test_the_old_sizing_breaks_its_claim_with_two_colluders() -> None:
    """Issue 29's case: shares sized for t_min = 11 honest holders of K = 20, ε = 1; two of
    the eleven survivors the coordinator picks are its own, and the exact ε of the nine
    honest shares is above 1 (about 1.02), while the sizing for c = 2 holds."""
    old = shares_mechanism(1, 11, 0)
    sensitivity = old.integer_sensitivity(1)
    total = skellam_mean_for(EPSILON, DELTA, sensitivity, 1)
    assert old.share_mean >= share_mean(total, 11)  # the old rule: t_min honest shares
    assert exact_delta(9 * old.share_mean, sensitivity.linf, EPSILON) > DELTA  # ε > 1
    assert exact_delta(9 * old.share_mean, sensitivity.linf, 1.1) <= DELTA  # ε ≤ 1.1
    new = shares_mechanism(1, 11, 2)
    assert exact_delta(9 * new.share_mean, sensitivity.linf, EPSILON) <= DELTA


@pytest.mark.parametrize(("t_min", "colluders"), [(3, 3), (3, 4), (3, -1)])
def test_a_mechanism_refuses_colluders_it_cannot_hold(t_min: int, colluders: int) -> None:
    with pytest.raises(ValueError, match="colluders"):
        shares_mechanism(1, t_min, colluders)
