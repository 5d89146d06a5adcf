"""make_mechanism: the calibrated mechanisms meet their budgets."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from ldpem.common.core.accounting import Budget as RecordBudget
from ldpem.common.core.accounting import epsilon_spent
from ldpem.common.core.calibration import smoothing_precision, truncation_sensitivity
from ldpem.common.mechanisms import (
    CentralClipped,
    CentralTruncation,
    LocalClipped,
    LocalTruncation,
    NoPrivacy,
)
from ldpem.common.protocol import local_noise_std, make_mechanism, public_scale


class Budget(TypedDict):
    epsilon: float
    delta: float


BUDGET: Budget = {"epsilon": 1.0, "delta": 1e-6}


@pytest.mark.parametrize("accounting", ["exact", "paper"])
@pytest.mark.parametrize("participations", [1, 10])
def test_local_mechanism_spends_exactly_the_budget(accounting: str, participations: int) -> None:
    mech = make_mechanism(
        "local",
        d=10,
        records_per_round=20_000,
        tau=1.9,
        participations=participations,
        accounting=accounting,
        **BUDGET,
    )
    assert isinstance(mech, LocalTruncation)
    assert mech.smoothing == pytest.approx(smoothing_precision(10))
    spent = epsilon_spent(
        sensitivity=mech.sensitivity(10),
        noise_std=mech.noise_std,
        participations=participations,
        delta=BUDGET["delta"],
        accounting=accounting,
    )
    assert spent == pytest.approx(1.0, rel=1e-9)


def test_central_mechanism_calibrates_the_average() -> None:
    mech = make_mechanism("central", d=10, records_per_round=2000, tau=1.9, **BUDGET)
    assert isinstance(mech, CentralTruncation)
    spent = epsilon_spent(
        sensitivity=truncation_sensitivity(mech.scale, 10, smoothing=mech.smoothing) / 2000,
        noise_std=mech.noise_std,
        delta=BUDGET["delta"],
    )
    assert spent == pytest.approx(1.0, rel=1e-9)


def test_clipped_mechanisms_use_sensitivity_2c() -> None:
    local = make_mechanism("local-clip", d=5, records_per_round=100, clip=2.0, **BUDGET)
    central = make_mechanism("central-clip", d=5, records_per_round=100, clip=2.0, **BUDGET)
    assert isinstance(local, LocalClipped) and isinstance(central, CentralClipped)
    assert local.noise_std == pytest.approx(100 * central.noise_std)
    spent = epsilon_spent(sensitivity=4.0, noise_std=local.noise_std, delta=1e-6)
    assert spent == pytest.approx(1.0, rel=1e-9)


def test_none_needs_no_budget() -> None:
    assert isinstance(make_mechanism("none", d=3, records_per_round=10), NoPrivacy)


def test_explicit_scale_overrides_tau() -> None:
    mech = make_mechanism("local", d=4, records_per_round=10, scale=2.5, **BUDGET)
    assert isinstance(mech, LocalTruncation)
    assert mech.scale == 2.5
    assert mech.noise_std == pytest.approx(
        local_noise_std(scale=2.5, smoothing=mech.smoothing, d=4, budget=RecordBudget(1.0, 1e-6))
    )


def test_public_scale_matches_the_mechanism() -> None:
    mech = make_mechanism("local", d=10, records_per_round=500, tau=2.0, **BUDGET)
    assert isinstance(mech, LocalTruncation)
    s = public_scale("local", d=10, records_per_round=500, tau=2.0, **BUDGET)
    assert mech.scale == s


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("laplace", {}, "mechanism must be one of"),
        ("local", {"epsilon": None}, "mechanism 'local' needs epsilon and delta"),
        ("local", {"tau": None}, "mechanism 'local' needs tau"),
        ("local-clip", {"clip": 0.0}, "clip must be a finite number > 0, got 0.0"),
        ("local", {"delta": 2.0}, "delta must be in (0, 1), got 2.0"),
    ],
)
def test_validation(name: str, kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "tau": 1.0}
    arguments.update(kwargs)
    with pytest.raises(ValueError) as caught:
        make_mechanism(name, d=3, records_per_round=10, **arguments)
    assert message in str(caught.value)
