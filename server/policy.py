"""Report policy: which runs and reports the coordinator accepts (docs/FEDERATED.md).

A run is refused when its derived parameters are out of range; a report is refused unless
an honest agent could have sent it and it is as private as the run promises. The bounds,
sensitivities and noise levels come from ``ldpem.common.protocol`` (the functions the
agents run), never re-derived here. Under a round schedule they are those of the report's
round: its expected count, and the scale s_t that sets its bound, sensitivity and noise.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import numpy as np
from pydantic import ValidationError

from ldpem.common.core.accounting import Budget, epsilon_spent, gdp_delta, ratio_for_noise
from ldpem.common.mechanisms import get_mechanism
from ldpem.common.protocol import (
    holder_contribution,
    holder_noise_std,
    parameter_size,
    public_budget,
    report_sensitivity,
    round_sizes,
)
from ldpem.common.wire import (
    PublicParameters,
    ReportIn,
    RunCreate,
    describe_errors,
    expected_round_count,
    public_parameters,
)
from ldpem.server.refusals import Invalid
from ldpem.server.store import HospitalRow

__all__ = [
    "NOISE_FLOOR_RTOL",
    "check_report",
    "implied_delta",
    "implied_epsilon",
    "noise_floor",
    "record_bound",
    "run_noise_std",
    "usable_parameters",
]

log = logging.getLogger("ldpem.server")

#: Relative slack of the noise floor. Agents compute σ_r themselves with the same code as
#: ``noise_floor``, so an honest σ_r at the run's budget equals the floor up to rounding.
NOISE_FLOOR_RTOL = 1e-6


def usable_parameters(request: RunCreate) -> PublicParameters:
    """``wire.public_parameters(request)``, or Invalid (one line) when extreme values
    (ε = 5e-324, τ = 1e308, …) make a derived quantity zero or overflow float64: a run whose
    σ_r or bounds are not finite positive numbers could accept no report."""
    try:
        params = public_parameters(request)
        usable = True
        for hospital in request.hospitals:
            for t in _extreme_rounds(params, hospital.records):
                floor = noise_floor(params.mechanism, params, hospital.records, t)
                noise = run_noise_std(params, hospital.records, t)
                usable = usable and math.isfinite(noise) and math.isfinite(floor)
                if get_mechanism(params.mechanism).noise_site != "nowhere":
                    bound = record_bound(params, hospital.records, t)
                    usable = usable and 0 < bound < math.inf
    except ValidationError as error:
        raise Invalid(
            f"the run's derived parameters are out of range: {describe_errors(error.errors())}"
        ) from None
    except (ValueError, ArithmeticError) as error:
        reason = " ".join(str(error).split())  # whole: the fix comes last
        raise Invalid(f"the run's parameters are out of range: {reason}") from None
    if not usable:
        raise Invalid("the run's parameters are out of range: its noise or record bound overflows")
    return params


def _extreme_rounds(params: PublicParameters, records: int) -> tuple[int, ...]:
    """The rounds with the fewest and the most of a holder's records, and with the smallest
    and largest published scale: the scale, bound and noise grow with a round's m_t, so if
    they are finite there, they are in every round."""
    sizes = round_sizes(records, params.rounds, params.schedule)
    rounds = {sizes.index(min(sizes)), sizes.index(max(sizes))}
    if params.scales is not None:  # the run's s_t follow all records' m_t, not this holder's
        rounds |= {params.scales.index(min(params.scales)), params.scales.index(max(params.scales))}
    return tuple(sorted(rounds))


def run_noise_std(params: PublicParameters, records: int = 1, t: int | None = None) -> float:
    """σ_r of a local report in round ``t`` (for ``hospital``: of the one draw on the sum of
    a holder enrolled with ``records`` records) calibrated at the run's own budget and
    accounting; 0 for mechanisms without holder noise: the reference of the
    ``max_noise_factor`` ceiling. The σ_r an honest agent with the run's budget uses
    (``protocol.holder_mechanism``)."""
    return holder_noise_std(params, records, public_budget(params), t=t)


def noise_floor(
    mechanism: str, params: PublicParameters, records: int, t: int | None = None
) -> float:
    """The least noise std a round-``t`` report under ``mechanism`` by a holder enrolled
    with ``records`` records may declare and still be (ε, δ)-DP per record at the run's
    budget: the σ_r that tight ("exact") accounting needs for the mechanism's sensitivity,
    whatever accounting the run publishes (an agent may calibrate with either; both meet
    the budget above this floor). 0 for central and none, whose reports carry no noise."""
    return holder_noise_std(
        params,
        records,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
        mechanism=mechanism,
        t=t,
    )


def implied_epsilon(
    mechanism: str, params: PublicParameters, noise_std: float, records: int, t: int | None = None
) -> float | None:
    """ε per record at the run's δ of a round-``t`` report declaring ``noise_std`` by a
    holder enrolled with ``records`` records (tight accounting); None when the report
    carries no noise (central, none); infinity when σ_r is so small that Δ/σ_r or ε
    overflows float64 (σ_r = 1e-300: no privacy)."""
    sensitivity = report_sensitivity(params, records, mechanism=mechanism, t=t)
    if sensitivity is None or not noise_std > 0:
        return None
    return _epsilon(sensitivity, noise_std, params.delta)


def implied_delta(
    mechanism: str,
    params: PublicParameters,
    noise_std: float,
    records: int,
    epsilon: float,
    t: int | None = None,
) -> float | None:
    """δ at which a round-``t`` report declaring ``noise_std`` spends ``epsilon`` per record
    (tight accounting): the other reading of the same noise. An agent whose own δ is
    stricter than the run's calibrates at its own δ and the run's ε, and its ledger records
    that pair, not ``implied_epsilon``'s ε at the run's δ. None when the report has no
    noise."""
    sensitivity = report_sensitivity(params, records, mechanism=mechanism, t=t)
    if sensitivity is None or not noise_std > 0:
        return None
    with np.errstate(over="ignore"):
        try:
            return gdp_delta(epsilon, ratio_for_noise(sensitivity, noise_std))
        except (ValueError, ArithmeticError):  # μ = Δ/σ_r beyond float64
            return 1.0


@lru_cache(maxsize=1024)
def _epsilon(sensitivity: float, noise_std: float, delta: float) -> float:
    with np.errstate(over="ignore"):
        try:
            return epsilon_spent(
                sensitivity=sensitivity, noise_std=noise_std, delta=delta, accounting="exact"
            )
        except (ValueError, ArithmeticError):  # μ = Δ/σ_r or ε beyond float64
            return math.inf


def record_bound(params: PublicParameters, records: int = 1, t: int | None = None) -> float:
    """Largest |coordinate| of one record's contribution before noise in round ``t`` (inf
    for ``none``), for a holder enrolled with ``records`` records (only ``hospital``
    depends on it)."""
    return holder_contribution(params, records, t=t).record_bound(parameter_size(params))


def check_report(
    params: PublicParameters,
    hospital: HospitalRow,
    t: int,
    report: ReportIn,
    *,
    allow_weaker: bool,
    range_sigmas: float,
    max_noise_factor: float,
) -> None:
    """Raise Invalid unless ``report`` is one an honest agent could have sent and as
    private as the run promises (or the run was created to accept weaker reports,
    ``allow_weaker``). ``range_sigmas``: the honest range's width in noise stds;
    ``max_noise_factor``: the largest σ_r accepted, in multiples of the run's."""
    who = f"hospital {hospital.name}"
    if report.round != t:
        raise Invalid(f"report names round {report.round} but was posted to round {t}")
    if report.mechanism != params.mechanism:
        raise Invalid(
            f"report uses mechanism {report.mechanism}, the run uses {params.mechanism}",
        )
    size = parameter_size(params)
    if len(report.total) != size:
        raise Invalid(f"total must have {size} entries (the size of beta), got {len(report.total)}")
    expected = expected_round_count(hospital.records, params.rounds, t, params.schedule)
    if report.count != expected:
        raise Invalid(
            f"count {report.count} does not match enrolment: {who} enrolled "
            f"{hospital.records} records, {expected} in round {t}",
        )
    kind = get_mechanism(params.mechanism)
    local_noise = kind.locally_private()
    if local_noise and report.noise_std <= 0:
        raise Invalid(f"mechanism {params.mechanism} needs noise_std > 0")
    if not local_noise and report.noise_std != 0:
        raise Invalid(f"mechanism {params.mechanism} takes noise_std = 0")
    # The honest range grows with the stated σ_r, so an unbounded σ_r would let one
    # enrolled hospital move β arbitrarily. An agent may be stricter than the run (more
    # noise), but not beyond max_noise_factor × the σ_r of the run's own budget.
    ceiling = max_noise_factor * run_noise_std(params, hospital.records, t)
    if local_noise and report.noise_std > ceiling:
        raise Invalid(
            f"noise_std {report.noise_std:.6g} exceeds {max_noise_factor:g}× the "
            f"run's calibrated σ_r ({ceiling:.6g}): a budget that strict adds more noise "
            "than this run accepts",
        )
    # The floor: a report declaring less noise than the run's budget needs would count
    # near-noiseless sums in a run whose published guarantee is (ε, δ).
    floor = noise_floor(report.mechanism, params, hospital.records, t)
    if report.noise_std < floor * (1.0 - NOISE_FLOOR_RTOL):
        implied = implied_epsilon(report.mechanism, params, report.noise_std, hospital.records, t)
        shown = "n/a" if implied is None else f"{implied:.4g}"
        if implied is not None and not math.isfinite(implied):
            raise Invalid(
                f"noise_std {report.noise_std:.6g} is below the σ_r {floor:.6g} the run's "
                "budget needs and too small for any finite epsilon: refused in every run",
            )
        if not allow_weaker:
            raise Invalid(
                f"noise_std {report.noise_std:.6g} is below the σ_r {floor:.6g} the run's "
                f"budget needs (epsilon {params.epsilon:g}, delta {params.delta:.3g}): "
                f"this report would spend epsilon {shown}; the run was not created with "
                "allow_weaker_reports",
            )
        log.warning(
            "run %s round %d: %s declares noise_std %.6g below the run's %.6g "
            "(epsilon %s per record, run's %g): accepted, the run allows weaker reports",
            hospital.run_id,
            t,
            who,
            report.noise_std,
            floor,
            shown,
            params.epsilon,
        )
    bound = record_bound(params, hospital.records, t)
    # Noise per record is one draw per record (std √count·σ_r on the sum); noise per
    # holder is one draw on the whole sum (std σ_r).
    draws = kind.noise_draws(report.count)
    limit = report.count * bound + range_sigmas * math.sqrt(draws) * report.noise_std
    worst = max((abs(v) for v in report.total), default=0.0)
    if worst > limit:
        spread = "√count·" if kind.noise_site == "record" else ""
        raise Invalid(
            f"total is outside the range an honest client can produce: |total| = {worst:.6g}"
            f" > count·bound + {range_sigmas:g}·{spread}noise_std = {limit:.6g}",
        )
