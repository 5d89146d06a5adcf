"""Public mechanism parameters: smoothing β_s, scale s, sensitivity (docs/MATH.md, section 3).

All formulas are Algorithm 2's, with the paper's notation:

* ε̃ = √(log(1/δ) + ε) − √(log(1/δ)), β_s = √(log(d/ζ)), ζ the failure probability;
* local model (MATH (3.3)):    s = m^{1/4} √(τ ε̃) / (2 log(d/ζ));
* central model (Algorithm 2): s = √(m τ ε̃) / (2 log(d/ζ));
* every coordinate of T(·) lies in [−s·b, s·b] with b = (2√2/3)·erf(√(β_s/2)) the
  certified bound of ``ldpem.common.core.truncation_bound`` (< 2√2/3, the paper's), so
  replacing a record moves its report by at most Δ = 2·b·s·√d in L2 (local); the
  average of m records by Δ/m.

When a record takes part in k rounds (``--reuse``) its budget is split evenly: each round
gets the zCDP share ρ/k, i.e. ε̃/√k in the scale formula.

τ bounds the second moment of every gradient coordinate (Assumption 1). Lemmas 4, 6 and 8
give its order for each model in terms of ‖β*‖ and σ; each model's ``default_tau``
(``ldpem.common.models``) turns a declared bound on ‖β‖₂ into such a value, and users can
override it.
"""

from __future__ import annotations

import math

from ldpem.common.core._validation import check_count, check_open_unit, check_positive
from ldpem.common.core.accounting import epsilon_tilde
from ldpem.common.core.truncation_bound import truncation_bound

__all__ = [
    "DEFAULT_ZETA",
    "central_scale",
    "local_scale",
    "round_epsilon_tilde",
    "smoothing_precision",
    "truncation_sensitivity",
]

#: Failure probability ζ of the paper's high-probability bounds.
DEFAULT_ZETA = 0.1


def _log_d_over_zeta(d: int, zeta: float) -> float:
    d = check_count("d", d)
    zeta = check_open_unit("zeta", zeta)
    return math.log(d / zeta)


def smoothing_precision(d: int, zeta: float = DEFAULT_ZETA) -> float:
    """β_s = √(log(d/ζ)), the precision of the multiplicative smoothing noise."""
    return math.sqrt(_log_d_over_zeta(d, zeta))


def round_epsilon_tilde(epsilon: float, delta: float, participations: int = 1) -> float:
    """ε̃ of one participation when a record's (ε, δ) is split over ``participations`` rounds."""
    participations = check_count("participations", participations)
    return epsilon_tilde(epsilon, delta) / math.sqrt(participations)


def local_scale(
    *, records: int, tau: float, eps_tilde: float, d: int, zeta: float = DEFAULT_ZETA
) -> float:
    """s = m^{1/4} √(τ ε̃) / (2 log(d/ζ)) for the local model; m = ``records`` per round."""
    records = check_count("records", records)
    tau = check_positive("tau", tau)
    eps_tilde = check_positive("eps_tilde", eps_tilde)
    return float(records**0.25) * math.sqrt(tau * eps_tilde) / (2.0 * _log_d_over_zeta(d, zeta))


def central_scale(
    *, records: int, tau: float, eps_tilde: float, d: int, zeta: float = DEFAULT_ZETA
) -> float:
    """s = √(m τ ε̃) / (2 log(d/ζ)) for the central (curator) model of Algorithm 2."""
    records = check_count("records", records)
    tau = check_positive("tau", tau)
    eps_tilde = check_positive("eps_tilde", eps_tilde)
    return math.sqrt(records * tau * eps_tilde) / (2.0 * _log_d_over_zeta(d, zeta))


def truncation_sensitivity(s: float, d: int, *, smoothing: float) -> float:
    """L2 sensitivity 2·b(β_s)·s·√d of one record's truncated d-vector under replacement,
    b(β_s) = (2√2/3)·erf(√(β_s/2)) the certified bound of the smoothed truncation."""
    s = check_positive("s", s)
    d = check_count("d", d)
    return 2.0 * truncation_bound(smoothing) * s * math.sqrt(d)
