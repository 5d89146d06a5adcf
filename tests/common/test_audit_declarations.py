"""The audit checks the declarations the noise is calibrated from (issue 30, point 4):
a mechanism whose declared ``sensitivity`` or ``record_bound`` is below what its
contributions do fails, whatever its distinguisher found, with one line naming it, the
declared and the measured value."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from ldpem.commands.audit import run_audit
from ldpem.common.audit.empirical import declaration_failure, measured_record_bound
from ldpem.common.mechanisms import Mechanism, mechanism_names
from ldpem.common.mechanisms import registry as mechanism_registry
from ldpem.common.mechanisms.base import FloatArray, Needs, NoiseSite
from ldpem.common.protocol import make_mechanism, study_tau

CLIP = 2.0


@dataclass(frozen=True, kw_only=True)
class BoxMissingSqrtD(Mechanism):
    """Each coordinate clipped to [−C, C], noise on each record's report, calibrated (as
    every clip mechanism) from the declared sensitivity — which lacks the √d factor: two
    records at opposite corners of the box are 2C√d apart, not 2C. At d = 1 (√1 = 1) the
    declaration is the truth, so the mechanism is what it claims there."""

    name: ClassVar[str] = "box-missing-sqrt-d"
    label: ClassVar[str] = "planted: box clip, sensitivity without √d"
    noise_site: ClassVar[NoiseSite] = "record"
    needs: ClassVar[Needs] = "clip"

    clip: float
    noise_std: float

    def contributions(self, gradients: FloatArray) -> FloatArray:
        clipped: FloatArray = np.clip(np.nan_to_num(gradients, nan=0.0), -self.clip, self.clip)
        return clipped

    def record_bound(self, d: int) -> float:
        return self.clip

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.clip  # the planted bug: the truth is 2·C·√d


@dataclass(frozen=True, kw_only=True)
class BoxUnderstatedBound(BoxMissingSqrtD):
    """The same box with the right sensitivity but a record bound of C/2."""

    name: ClassVar[str] = "box-understated-bound"

    def record_bound(self, d: int) -> float:
        return self.clip / 2

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.clip * math.sqrt(d)


@pytest.mark.parametrize("d", [1, 2, 3, 10])
def test_a_sensitivity_without_sqrt_d_fails_where_it_is_wrong(d: int) -> None:
    planted = BoxMissingSqrtD(clip=CLIP, noise_std=1.0)
    failure = declaration_failure(planted, d=d)
    if d == 1:
        # √1 = 1: the planted sensitivity 2C is the true one, the noise is calibrated
        # right, the true ε is the claim: the audit must not fail it.
        assert failure is None
        return
    assert failure is not None
    measured = 2.0 * CLIP * math.sqrt(d)  # two opposite corners of the box
    assert failure == (
        f"mechanism box-missing-sqrt-d: declared sensitivity {2 * CLIP:.6g} at d = {d}, "
        f"but its worst pair's contributions are {measured:.6g} apart"
    )


def test_a_record_bound_below_the_contributions_fails() -> None:
    planted = BoxUnderstatedBound(clip=CLIP, noise_std=1.0)
    assert measured_record_bound(planted, 3) == CLIP
    assert declaration_failure(planted, d=3) == (
        "mechanism box-understated-bound: declared record_bound 1 at d = 3, "
        "but a contribution's coordinate reaches 2"
    )


def test_an_unbounded_contribution_fails_the_bound() -> None:
    class Leaky(BoxUnderstatedBound):
        name: ClassVar[str] = "box-leaky"

        def contributions(self, gradients: FloatArray) -> FloatArray:
            return gradients  # NaN and ±inf pass through

    assert measured_record_bound(Leaky(clip=CLIP, noise_std=1.0), 2) == math.inf


@pytest.mark.parametrize("d", [1, 2, 10])
def test_every_built_in_mechanism_meets_its_declarations(d: int) -> None:
    tau = study_tau("gmm", tau=None, beta_bound=3.0, sigma=1.0, d=d)
    for name in mechanism_names():
        mechanism = make_mechanism(
            name, d=d, records_per_round=1000, epsilon=1.0, delta=1e-5, tau=tau, t_min=3
        )
        assert declaration_failure(mechanism, d=d) is None, name


@pytest.mark.parametrize("d", [1, 2])
def test_the_audit_command_fails_the_planted_variant(
    d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Registered for this test only; a small audit: the declaration check needs no draws.
    monkeypatch.setitem(mechanism_registry._MECHANISMS, BoxMissingSqrtD.name, BoxMissingSqrtD)
    rows = run_audit(
        mechanisms=(BoxMissingSqrtD.name,),
        accountings=("exact",),
        epsilon=1.0,
        delta=1e-5,
        draws=200,
        holder_draws=100,
        model_name="gmm",
        d=d,
        records_per_round=1000,
        seed=0,
    )
    assert {(r["built_by"], r["path"]) for r in rows} == {
        ("simulator", "mechanism"),
        ("simulator", "holder_round"),
        ("agent", "mechanism"),
        ("agent", "holder_round"),
    }
    for row in rows:
        failure = row["declaration_failure"]
        if d == 1:
            assert failure is None and row["passed"], row
        else:
            assert not row["passed"] and failure.startswith("mechanism box-missing-sqrt-d: "), row
