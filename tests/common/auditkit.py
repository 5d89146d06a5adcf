"""The privacy-audit harness the mechanism tests share: an honest mechanism at the audited
budget, a broken-on-purpose variant of it, and the two audit paths (one release of the
mechanism; one holder's round) with the tests' fixed settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import numpy as np

from ldpem.common.audit.empirical import audit_holder_round, audit_mechanism
from ldpem.common.audit.stats import AuditOutcome
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import get_model
from ldpem.common.protocol import make_mechanism

# (ε, δ) at which a 10⁶-draw audit has the power to see a factor-2 noise error (measured).
EPSILON, DELTA = 1.0, 1e-3

M = TypeVar("M", bound=Mechanism)


class Truncated(Protocol):
    """A truncation mechanism's values (local, central, hospital)."""

    @property
    def scale(self) -> float: ...
    @property
    def smoothing(self) -> float: ...
    @property
    def noise_std(self) -> float: ...


T = TypeVar("T")


def honest(name: str, *, d: int = 1, records: int = 1000, **extra: Any) -> Mechanism:
    """Mechanism ``name`` as the protocol builds it for the audited budget (τ = 1 unless
    ``extra`` says otherwise)."""
    values: dict[str, Any] = {"tau": 1.0, **extra}
    return make_mechanism(
        name, d=d, records_per_round=records, epsilon=EPSILON, delta=DELTA, **values
    )


def honest_as(kind: type[M], name: str, *, d: int = 1) -> M:
    """``honest(name, d=d)``, checked to be a ``kind``."""
    mechanism = honest(name, d=d)
    assert isinstance(mechanism, kind), mechanism
    return mechanism


def variant(broken: Callable[..., T], of: Truncated) -> T:
    """A broken-on-purpose class built with an honest truncation mechanism's values."""
    return broken(scale=of.scale, smoothing=of.smoothing, noise_std=of.noise_std)


def audited(
    mechanism: Mechanism, *, d: int, draws: int, seed: int, records: int = 1000, **extra: Any
) -> tuple[AuditOutcome, float]:
    """``audit_mechanism`` at δ = ``DELTA``: the outcome and the farthest pair's distance."""
    rng = np.random.default_rng(seed)
    return audit_mechanism(
        mechanism, d=d, records_per_round=records, delta=DELTA, draws=draws, rng=rng, **extra
    )


def audited_holder(
    mechanism: Mechanism,
    *,
    d: int,
    draws: int,
    seed: int,
    model: str = "gmm",
    options: Mapping[str, int] | None = None,
    **extra: Any,
) -> tuple[AuditOutcome, float]:
    """``audit_holder_round`` for ``model`` (with its ``options``: a mixture's components)
    at σ = 1 and δ = ``DELTA``; records of dimension d, the mechanism's β of the model's
    ``parameter_dim(d)``."""
    rng = np.random.default_rng(seed)
    audited_model = get_model(model, options)
    return audit_holder_round(
        audited_model, mechanism, d=d, sigma=1.0, delta=DELTA, draws=draws, rng=rng, **extra
    )


#: The models the audit's holder path is run for, with their options: records of d = 3
#: for the paper's models, and mixtures of K = 2 components of d = 1 (p = 4 coordinates:
#: the candidate search grows with p).
AUDITED_MODELS: tuple[tuple[str, dict[str, int], int], ...] = (
    ("gmm", {}, 3),
    ("mrm", {}, 3),
    ("rmc", {}, 3),
    ("gmmk", {"components": 2}, 1),
    ("lca", {"components": 2}, 1),
)
