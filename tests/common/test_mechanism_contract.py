"""The mechanism contract (issue 30, point 3): declared fields checked at registration,
the secagg-only API behind its own interface, privacy as events the accountant composes
(the same ε as before on a grid), and docs/EXTENDING.md's example as the file a test runs."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from ldpem.common.core.accounting import (
    epsilon_for_ratio,
    epsilon_spent,
    event_epsilon,
    ratio_for_noise,
)
from ldpem.common.core.privacy_events import (
    ComposedEvent,
    GaussianEvent,
    NonPrivateEvent,
    NoOpEvent,
    PureEvent,
    SelfComposedEvent,
)
from ldpem.common.mechanisms import (
    Mechanism,
    SecAggSkellam,
    SharedNoise,
    get_mechanism,
    honest_holders,
    mechanism_names,
    register_mechanism,
)
from ldpem.common.mechanisms.base import FloatArray, Needs, NoiseSite
from ldpem.common.protocol import make_mechanism
from tests.dockit import ROOT, python_blocks


class _Box(Mechanism):
    """Contributions clipped to [−1, 1] per coordinate; what the plugins below share."""

    label: ClassVar[str] = "test"
    noise_site: ClassVar[NoiseSite] = "record"
    needs: ClassVar[Needs] = "clip"

    def contributions(self, gradients: FloatArray) -> FloatArray:
        clipped: FloatArray = np.clip(np.nan_to_num(gradients), -1.0, 1.0)
        return clipped

    def record_bound(self, d: int) -> float:
        return 1.0

    def sensitivity(self, d: int) -> float:
        return 2.0 * math.sqrt(d)


def refused_at_registration(cls: type[Mechanism], message: str) -> None:
    """``register_mechanism(cls)`` raises a TypeError matching the regex ``message``."""
    with pytest.raises(TypeError, match=message):
        register_mechanism(cls)


def test_a_field_named_otherwise_is_refused_at_registration_naming_the_declaration() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Misnamed(_Box):
        name: ClassVar[str] = "misnamed"
        c: float
        noise_std: float

    refused_at_registration(Misnamed, "needs = 'clip' but it declares no field 'clip'")
    assert "misnamed" not in mechanism_names()


def test_the_noise_std_shares_t_min_and_the_dataclass_itself_are_declarations() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Silent(_Box):
        name: ClassVar[str] = "silent"
        clip: float

    refused_at_registration(Silent, "noise_site = 'record' but it declares no field 'noise_std'")

    class Plain(_Box):  # attributes set in __init__: nothing the registry can read
        name: ClassVar[str] = "plain"

        def __init__(self, *, clip: float, noise_std: float) -> None:
            self.clip, self.noise_std = clip, noise_std

    refused_at_registration(Plain, r"declare it as a @dataclass\(frozen=True, kw_only=True\)")

    @dataclass(kw_only=True)
    class Mutable(_Box):
        name: ClassVar[str] = "mutable"
        clip: float
        noise_std: float

    refused_at_registration(Mutable, "frozen=True")

    @dataclass(frozen=True, kw_only=True)
    class Extra(_Box):
        name: ClassVar[str] = "extra"
        clip: float
        noise_std: float
        width: float

    refused_at_registration(Extra, "field 'width' is not one of the public values")


def test_every_builtin_is_built_from_its_declared_fields() -> None:
    expected = {
        "local": ("scale", "smoothing", "noise_std"),
        "hospital": ("scale", "smoothing", "noise_std"),
        "central": ("scale", "smoothing", "noise_std"),
        "local-clip": ("clip", "noise_std"),
        "central-clip": ("clip", "noise_std"),
        "secagg": ("scale", "smoothing", "noise_std", "t_min", "colluders"),
        "none": (),
    }
    for name, fields in expected.items():
        kind = get_mechanism(name)
        assert kind.declared_fields() == fields, name
        built = kind.from_values(
            noise_std=0.5, scale=2.0, smoothing=3.0, clip=4.0, t_min=3, colluders=1
        )
        values = {
            "noise_std": 0.5,
            "scale": 2.0,
            "smoothing": 3.0,
            "clip": 4.0,
            "t_min": 3,
            "colluders": 1,
        }
        assert all(getattr(built, f) == values[f] for f in fields), built
        again = built.with_noise(0.25 if fields else 0.0)
        assert type(again) is kind
        assert all(getattr(again, f) == getattr(built, f) for f in fields if f != "noise_std")
    with pytest.raises(ValueError, match=r"mechanism none adds no noise, got 0\.25"):
        get_mechanism("none").from_values(noise_std=0.0).with_noise(0.25)
    with pytest.raises(ValueError, match="mechanism local-clip needs a value for clip"):
        get_mechanism("local-clip").from_values(noise_std=1.0)


def test_the_secagg_api_is_its_own_interface() -> None:
    shares = make_mechanism(
        "secagg", d=3, records_per_round=100, epsilon=1.0, delta=1e-6, tau=1.0, t_min=2
    )
    local = make_mechanism("local", d=3, records_per_round=100, epsilon=1.0, delta=1e-6, tau=1.0)
    for attribute in ("t_min", "shared_noise_std", "honest_holders", "empty_sum"):
        assert not hasattr(local, attribute), attribute
        assert hasattr(shares, attribute), attribute
    for attribute in ("shared_noise_std", "honest_holders", "partial_sum", "finish_sum"):
        assert not hasattr(Mechanism, attribute), attribute
        assert attribute in SharedNoise.__abstractmethods__, attribute
    for name in mechanism_names():
        kind = get_mechanism(name)
        assert issubclass(kind, SharedNoise) == (kind.noise_site == "shares"), name
    assert isinstance(shares, SharedNoise) and not isinstance(local, SharedNoise)
    assert honest_holders(local) == 1
    assert isinstance(shares, SecAggSkellam) and honest_holders(shares) == shares.honest_holders


def _old_epsilon(sensitivity: float, noise_std: float, delta: float, k: int, how: str) -> float:
    """ε as ``epsilon_spent`` computed it before the events (8e54e94)."""
    return epsilon_for_ratio(ratio_for_noise(sensitivity, noise_std, k), delta, how)


GRID = list(
    itertools.product(
        (1e-3, 0.3, 1.0, 7.0),  # Δ
        (0.05, 1.0, 40.0),  # σ_r
        (1e-12, 1e-6, 0.3),  # δ
        (1, 5),  # participations
        ("exact", "paper"),
    )
)


@pytest.mark.parametrize(("sensitivity", "noise_std", "delta", "k", "how"), GRID)
def test_the_event_accountant_gives_the_former_epsilon(
    sensitivity: float, noise_std: float, delta: float, k: int, how: str
) -> None:
    old = _old_epsilon(sensitivity, noise_std, delta, k, how)
    new = epsilon_spent(
        sensitivity=sensitivity, noise_std=noise_std, delta=delta, participations=k, accounting=how
    )
    event = SelfComposedEvent(GaussianEvent(sensitivity, noise_std), k)
    for value in (new, event_epsilon(event, delta, how)):
        assert value == pytest.approx(old, rel=1e-12, abs=0.0)


def test_heterogeneous_gaussian_compositions_keep_their_epsilon() -> None:
    sensitivities, stds = [0.5, 1.0, 2.0], [1.0, 3.0, 0.7]
    old = epsilon_for_ratio(ratio_for_noise(sensitivities, stds, 2), 1e-6)
    new = epsilon_spent(sensitivity=sensitivities, noise_std=stds, delta=1e-6, participations=2)
    assert new == pytest.approx(old, rel=1e-12, abs=0.0)


@pytest.mark.parametrize(("t_min", "participations"), [(1, 1), (2, 1), (3, 4)])
def test_the_skellam_event_is_the_secagg_accounting(t_min: int, participations: int) -> None:
    mechanism = make_mechanism(
        "secagg",
        d=3,
        records_per_round=500,
        epsilon=1.0,
        delta=1e-6,
        tau=1.0,
        t_min=t_min,
        participations=participations,
    )
    assert isinstance(mechanism, SecAggSkellam)
    event = SelfComposedEvent(mechanism.privacy_event(3), participations)
    old = mechanism.epsilon(3, delta=1e-6, honest=t_min, participations=participations)
    assert event_epsilon(event, 1e-6) == old
    assert old <= 1.0  # calibrated for the sum's budget
    with pytest.raises(ValueError, match="SkellamEvent composes with no other event"):
        event_epsilon(ComposedEvent((event, GaussianEvent(1.0, 1.0))), 1e-6)


@dataclass(frozen=True)
class _Pure(PureEvent):
    value: float

    @property
    def epsilon(self) -> float:
        return self.value


def test_the_accountant_composes_pure_gaussian_and_trivial_events() -> None:
    gaussian = epsilon_spent(sensitivity=1.0, noise_std=2.0, delta=1e-6, participations=3)
    mixed = ComposedEvent(
        (
            SelfComposedEvent(GaussianEvent(1.0, 2.0), 3),
            SelfComposedEvent(_Pure(0.25), 2),
            NoOpEvent(),
        )
    )
    assert event_epsilon(mixed, 1e-6) == gaussian + 0.5
    assert event_epsilon(_Pure(0.25), 1e-6) == 0.25
    assert event_epsilon(NoOpEvent(), 1e-6) == 0.0
    assert event_epsilon(ComposedEvent((_Pure(1.0), NonPrivateEvent())), 1e-6) == math.inf
    for mechanism in ("local", "hospital", "local-clip"):
        built = make_mechanism(
            mechanism, d=4, records_per_round=100, epsilon=0.7, delta=1e-5, tau=1.0
        )
        assert event_epsilon(built.privacy_event(4), 1e-5) == pytest.approx(0.7, rel=1e-9)
    for mechanism in ("central", "none"):
        built = make_mechanism(
            mechanism, d=4, records_per_round=100, epsilon=0.7, delta=1e-5, tau=1.0
        )
        assert built.privacy_event(4) == NonPrivateEvent()  # a report not private on its own
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        GaussianEvent(math.nan, 1.0)
    with pytest.raises(ValueError, match="noise_std must be a finite number > 0"):
        GaussianEvent(1.0, 0.0)
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        SelfComposedEvent(NoOpEvent(), 0)


def test_the_extending_guide_shows_the_example_file_verbatim() -> None:
    guide = (ROOT / "docs" / "EXTENDING.md").read_text()
    source = (ROOT / "tests" / "examples" / "local_box.py").read_text()
    assert source in python_blocks(guide, "docs/EXTENDING.md")
    assert "..." not in source
