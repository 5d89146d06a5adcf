"""The accounting's own Brent root finder returns exactly what scipy's brentq returns."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
from scipy.optimize import brentq

from ldpem.common.core.accounting import _brentq, gdp_delta


def assert_same_root(f: Callable[[float], float], upper: float, tolerance: float) -> None:
    """Our root of ``f`` in [0, ``upper``] is scipy's to the bit, at x- and r-tolerance
    ``tolerance``."""
    expected = brentq(f, 0.0, upper, xtol=tolerance, rtol=tolerance)
    assert _brentq(f, 0.0, upper, xtol=tolerance, rtol=tolerance) == expected


def test_bit_identical_to_scipy_on_the_accounting_roots() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for epsilon in np.concatenate([np.geomspace(1e-3, 50, 25), rng.uniform(0.01, 20, 25)]):
        for delta in (1e-3, 1e-6, 1e-10, 0.3):
            upper = 1.0
            while gdp_delta(epsilon, upper) < delta:
                upper *= 2.0

            def by_mu(mu: float, e: float = epsilon, d: float = delta) -> float:
                return gdp_delta(e, mu) - d

            assert_same_root(by_mu, upper, 1e-14)
            checked += 1
    for mu in np.geomspace(1e-2, 30, 40):
        for delta in (1e-3, 1e-8, 1e-12):
            if gdp_delta(0.0, mu) <= delta:
                continue
            upper = 1.0
            while gdp_delta(upper, mu) > delta:
                upper *= 2.0

            def by_epsilon(e: float, m: float = mu, d: float = delta) -> float:
                return gdp_delta(e, m) - d

            assert_same_root(by_epsilon, upper, 1e-12)
            checked += 1
    assert checked > 250


def test_bit_identical_to_scipy_on_other_functions() -> None:
    rng = np.random.default_rng(1)
    for k in range(200):
        c, s = rng.uniform(-5, 5), rng.uniform(0.1, 3)

        def f(x: float, c: float = c, s: float = s, k: int = k) -> float:
            return float((x - c) ** 3 + s * (x - c) + (0.0 if k % 2 else np.tanh(x)))

        assert _brentq(f, -10.0, 10.0, xtol=2e-12, rtol=1e-13) == brentq(
            f, -10.0, 10.0, xtol=2e-12, rtol=1e-13
        )


def test_a_root_must_be_bracketed() -> None:
    with pytest.raises(ValueError, match="different signs"):
        _brentq(lambda x: x * x + 1.0, -1.0, 1.0, xtol=1e-12, rtol=1e-12)


def test_the_agent_does_not_import_scipy_optimize() -> None:
    code = "import sys, ldpem.cli, ldpem.client.agent; print('scipy.optimize' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
