"""A mechanism whose noise is not a Gaussian, in one file, through ``ldpem simulate``
(docs/EXTENDING.md, issue 30 point 3).

``local-laplace`` (tests/examples/local_laplace.py) clips each coordinate to [−C, C] and
adds Laplace noise with its own event, calibration and noise; ``ldpem simulate`` runs it as
a user would, in a process that loads it through ``LDPEM_PLUGINS``, and the protocol and
the accountant take it without a product edit. It is imported here only inside the tests
(never at collection), so the other tests' lists of registered mechanisms do not see it.
"""

from __future__ import annotations

import importlib
import json
import math
from types import ModuleType

import numpy as np
import pytest

from ldpem.common.core.accounting import event_epsilon
from ldpem.common.core.privacy_events import ComposedEvent, GaussianEvent, SelfComposedEvent
from ldpem.common.protocol import make_mechanism, privacy_ratio
from tests.cli.clikit import run_ldpem
from tests.fedkit import plugin_env

PLUGIN = "tests.examples.local_laplace"
D = 3


@pytest.fixture
def laplace() -> ModuleType:
    """The plugin module, imported (and its mechanism registered) by the test."""
    return importlib.import_module(PLUGIN)


def test_simulate_runs_it_with_its_own_calibration() -> None:
    argv = ["simulate", "--mechanism", "local-laplace", "--clip", "1", "--n", "20000"]
    argv += ["--d", str(D), "--epsilon", "2", "--seed", "1", "--json"]
    outcome = json.loads(run_ldpem(argv, env=plugin_env(PLUGIN), timeout=120).stdout)
    # b = 2Cd/ε = 3 (each record reports once): σ = 3√2, not the Gaussian's σ_r.
    assert outcome["noise_std"] == pytest.approx(3.0 * math.sqrt(2.0), rel=1e-15)
    # 2,000 records a round, noise std 4.2 per coordinate: the last average's noise is
    # about 0.095 per coordinate, 0.16 in norm over d = 3; 0.6 leaves room for the EM's
    # own error, far below β = 0's error of 3.
    assert outcome["mechanism"] == "local-laplace" and outcome["error"] < 0.6


def test_its_event_is_what_the_accountant_composes(laplace: ModuleType) -> None:
    mechanism = make_mechanism(
        "local-laplace", d=D, records_per_round=100, epsilon=0.5, delta=1e-6, participations=4
    )
    event = SelfComposedEvent(mechanism.privacy_event(D), 4)
    assert event_epsilon(event, 1e-6) == pytest.approx(0.5, rel=1e-12)  # pure ε: 4 × ε/4
    # Composed with a Gaussian release: basic composition, the pure ε added.
    gaussian = GaussianEvent(1.0, 3.0)
    mixed = event_epsilon(ComposedEvent((event, gaussian)), 1e-6)
    assert mixed == pytest.approx(0.5 + event_epsilon(gaussian, 1e-6), rel=1e-12)


def test_the_agents_ledger_refuses_to_charge_it_as_a_gaussian(laplace: ModuleType) -> None:
    mechanism = make_mechanism("local-laplace", d=D, records_per_round=100, epsilon=1.0, delta=1e-6)
    assert isinstance(mechanism.privacy_event(D), laplace.LaplaceEvent)
    with pytest.raises(ValueError, match=r"ledger charges Gaussian privacy ratios.*LaplaceEvent"):
        privacy_ratio(mechanism, D)
    gaussian = make_mechanism("local-clip", d=D, records_per_round=100, epsilon=1.0, delta=1e-6)
    assert privacy_ratio(gaussian, D) == gaussian.sensitivity(D) / gaussian.noise_std


def test_its_reports_carry_laplace_noise(laplace: ModuleType) -> None:
    mechanism = make_mechanism("local-laplace", d=D, records_per_round=100, epsilon=1.0, delta=1e-6)
    assert isinstance(mechanism, laplace.LocalLaplace)
    reports = mechanism.privatize(np.zeros((200_000, D)), np.random.default_rng(3))
    # E|X| is b for Laplace(b), and σ·√(2/π) = 2b/√π ≈ 1.128·b for a Gaussian of the same
    # std; the mean of 600,000 |X| has std b/√600,000 ≈ 0.0013·b: 0.01·b is 7.7 of them.
    b = mechanism.laplace_scale
    assert np.mean(np.abs(reports)) == pytest.approx(b, rel=0.01)
