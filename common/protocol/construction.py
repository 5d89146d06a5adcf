"""Mechanisms from a run's public values: the one place every mechanism object is built.

``holder_mechanism`` is what a data holder runs (public parameters, enrolled count, its OWN
budget); the coordinator's record bound, sensitivity and noise floor come from the same
functions, and a simulated study builds its hospitals' mechanisms from its own public
values with ``study_mechanism`` (``holder_mechanism`` with reused records and the
mechanisms of no federated run). ``make_mechanism`` builds one mechanism from a budget and
m (the audit, benchmarks). No name
is compared here: each class's declarations (where its noise goes, what it needs, its
scale rule) decide, so a registered mechanism takes every path (docs/EXTENDING.md).

**A mechanism calibrates its own noise** (``Mechanism.calibrated``): by default a Gaussian
of the σ_r its sensitivity needs; noise shares (``SharedNoise``, docs/SECAGG.md) integer
Skellam noise on the quantized sum, so that any ``t_min`` honest holders' shares make the
round's SUM (ε, δ)-DP (t_min is a public value of the run, ``study_t_min`` by default);
a plugin its own kind of noise.

**Central noise is calibrated on the actual count of the round** (``CentralNoise.std``):
the aggregator releases the average of the records that reported in THIS round, whose
replace-one sensitivity is Δ/count. Calibrating on the nominal m would under-noise every
round with fewer records than m — a round closed at quorum, or the smaller rounds of an
uneven partition — and break the published (ε, δ); calibrating on the count costs nothing
when count ≥ m. The simulator does the same, so both draw the same σ_r in every round.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_open_unit, check_positive
from ldpem.common.core.accounting import DEFAULT_ACCOUNTING, Budget
from ldpem.common.core.accounting import gaussian_noise_std as _noise_std
from ldpem.common.core.calibration import (
    DEFAULT_ZETA,
    central_scale,
    local_scale,
    round_epsilon_tilde,
    smoothing_precision,
    truncation_sensitivity,
)
from ldpem.common.mechanisms import Mechanism, SharedNoise, get_mechanism
from ldpem.common.protocol.defaults import parameter_size
from ldpem.common.protocol.parameters import PublicValues, RunChoices
from ldpem.common.protocol.schedule import (
    EQUAL,
    Schedule,
    is_equal,
    round_index,
    round_records,
)

__all__ = [
    "CentralNoise",
    "ScaleRule",
    "central_noise",
    "central_noise_for",
    "holder_contribution",
    "holder_mechanism",
    "holder_noise_std",
    "holder_scale",
    "local_noise_std",
    "make_mechanism",
    "public_budget",
    "public_scale",
    "published_scales",
    "report_sensitivity",
    "round_scales",
    "study_mechanism",
]

FloatArray = NDArray[np.float64]


def public_scale(
    mechanism: str,
    *,
    d: int,
    records_per_round: int,
    epsilon: float,
    delta: float,
    tau: float,
    participations: int = 1,
    zeta: float = DEFAULT_ZETA,
) -> float:
    """The truncation scale s of Algorithm 2 for a ``mechanism`` that needs one, by its
    scale rule (local: m^¼, central: √m). For a mechanism whose holders each take their own
    scale (hospital), m = ``records_per_round`` is the records ONE holder reports per round
    (``holder_records_per_round``), computable from the run's public values and its
    enrolled count."""
    kind = get_mechanism(mechanism)
    if kind.needs != "scale":
        raise ValueError(f"mechanism {mechanism!r} has no truncation scale")
    eps_tilde = round_epsilon_tilde(epsilon, delta, participations)
    scale_fn = local_scale if kind.scale_rule == "fourth-root" else central_scale
    return scale_fn(records=records_per_round, tau=tau, eps_tilde=eps_tilde, d=d, zeta=zeta)


class ScaleRule(Protocol):
    """Algorithm 2's scale s of a round of m records: ``public_scale`` with a run's public
    values but m bound (``functools.partial``)."""

    def __call__(self, *, records_per_round: int) -> float: ...


def round_scales(
    rule: ScaleRule, records: int, rounds: int, schedule: Schedule = EQUAL, *, reuse: bool = False
) -> tuple[float, ...]:
    """Algorithm 2's scale s_t of each round: the ``rule`` applied with that round's m_t
    (``schedule.round_records`` of ``records``: all of a run's, or one holder's); T equal
    values for the ``equal`` schedule (m = ⌊records/rounds⌋, all ``records`` with
    ``reuse``), one per round otherwise."""
    counts = round_records(records, rounds, schedule, reuse=reuse)
    scales = {m: rule(records_per_round=m) for m in set(counts)}  # equal rounds share one
    return tuple(scales[m] for m in counts)


def _run_scales(
    run: RunChoices, records: int, *, mechanism: str, delta: float, tau: float, reuse: bool
) -> tuple[float, ...]:
    """``round_scales`` of ``records`` records under ``public_scale`` of ``mechanism`` at
    the run's β size p (``parameter_size``: d but for a mixture), ε, ζ, T and schedule
    with its resolved δ and τ, for records that each report in one of the T rounds (or,
    with ``reuse``, in all of them)."""
    rule = partial(
        public_scale,
        mechanism,
        d=parameter_size(run),
        epsilon=run.epsilon,
        delta=delta,
        tau=tau,
        zeta=run.zeta,
        participations=_participations(run.rounds, reuse=reuse),
    )
    return round_scales(rule, records, run.rounds, run.schedule, reuse=reuse)


def published_scales(
    run: RunChoices, *, records: int, delta: float, tau: float, reuse: bool = False
) -> tuple[float | None, tuple[float, ...] | None]:
    """(s, s_t) a ``run`` (its request, or a study's values) of ``records`` records
    publishes at its resolved δ and τ when no one s is fixed for all: Algorithm 2's scale
    of equal rounds (m = ⌊records/T⌋, all ``records`` with ``reuse``, the budget then split
    over the T releases) and no per-round scales, or under another schedule no s and one
    s_t per round; (None, None) for a mechanism without a scale or whose holders take
    their own (``holder_scale``)."""
    kind = get_mechanism(run.mechanism)
    if kind.needs != "scale" or kind.per_holder_scale:
        return None, None
    per_round = _run_scales(
        run, records, mechanism=run.mechanism, delta=delta, tau=tau, reuse=reuse
    )
    return (per_round[0], None) if is_equal(run.schedule) else (None, per_round)


def _participations(rounds: int, *, reuse: bool) -> int:
    """The releases each record takes part in: every one of the T ``rounds`` with
    ``reuse`` (a simulated study's), else one (a run's: partitioned rounds)."""
    return rounds if reuse else 1


def local_noise_std(
    *, scale: float, smoothing: float, d: int, budget: Budget, participations: int = 1
) -> float:
    """σ_r of each local report of T(·) at scale s so that ``participations`` reports of one
    record are together (ε, δ)-DP at ``budget``. It is also the σ_r of the hospital-level
    mechanism's one draw on a holder's sum: replacing one record moves that sum by at most
    as much as it moves the record's own report."""
    return _noise_std(
        budget.epsilon,
        budget.delta,
        truncation_sensitivity(scale, d, smoothing=smoothing),
        budget.accounting,
        check_count("participations", participations),
    )


@dataclass(frozen=True)
class CentralNoise:
    """The aggregator's noise of a central mechanism: N(0, σ_r² I_d) on the average of the
    round's ``count`` records, σ_r calibrated to the average's sensitivity Δ/count at the
    budget (ε, δ) over ``participations`` rounds (module docstring: why the count)."""

    #: Δ of one record's contribution (L2, replace-one).
    sensitivity: float
    epsilon: float
    delta: float
    accounting: str = DEFAULT_ACCOUNTING
    participations: int = 1

    def std(self, count: int) -> float:
        """σ_r on the average of ``count`` records."""
        count = check_count("count", count)
        return _noise_std(
            self.epsilon,
            self.delta,
            self.sensitivity / count,
            self.accounting,
            self.participations,
        )

    def draw(self, count: int, d: int, rng: np.random.Generator) -> FloatArray:
        """One draw N(0, σ_r² I_d) of shape (d,), σ_r = ``std(count)``, for a round of
        ``count`` ≥ 1 records, from the round's central-noise stream ``rng`` (``central_rng``)."""
        noise: FloatArray = rng.normal(0.0, self.std(count), d)
        return noise


def central_noise_for(
    mechanism: Mechanism,
    *,
    d: int,
    epsilon: float,
    delta: float,
    accounting: str = DEFAULT_ACCOUNTING,
    participations: int = 1,
) -> CentralNoise | None:
    """The aggregator's noise for ``mechanism`` (None unless its noise is the aggregator's)."""
    if mechanism.noise_site != "aggregator":
        return None
    return CentralNoise(
        sensitivity=mechanism.sensitivity(d),
        epsilon=epsilon,
        delta=delta,
        accounting=accounting,
        participations=participations,
    )


def _shape(
    kind: type[Mechanism],
    *,
    scale: float | None,
    smoothing: float | None,
    clip: float | None,
    t_min: int | None = None,
    colluders: int = 0,
) -> Mechanism:
    """``kind`` without noise, from the values it ``needs``; ValueError naming a missing one."""
    if kind.needs == "scale" and scale is None:
        raise ValueError(f"the run publishes mechanism {kind.name} without a scale s")
    if kind.needs == "clip" and clip is None:
        raise ValueError(f"the run publishes mechanism {kind.name} without a clip norm")
    if kind.noise_site == "shares" and t_min is None:
        raise ValueError(f"the run publishes mechanism {kind.name} without t_min")
    return kind.from_values(
        noise_std=0.0, scale=scale, smoothing=smoothing, clip=clip, t_min=t_min, colluders=colluders
    )


def make_mechanism(
    name: str,
    *,
    d: int,
    records_per_round: int,
    epsilon: float | None = None,
    delta: float | None = None,
    participations: int = 1,
    tau: float | None = None,
    zeta: float = DEFAULT_ZETA,
    clip: float = 1.0,
    accounting: str = DEFAULT_ACCOUNTING,
    scale: float | None = None,
    t_min: int | None = None,
    colluders: int = 0,
) -> Mechanism:
    """The mechanism of a simulated study, calibrated so that each record, over its
    ``participations`` rounds, is (ε, δ)-DP under ``accounting`` (noise shares: under
    their own Skellam accounting, given t_min − ``colluders`` honest holders among the
    ``t_min`` of a sum; ignored otherwise).

    ``records_per_round`` is m (``records_per_round``): it sets s in Algorithm 2 and, when
    the noise is the aggregator's, the σ_r shown as ``noise_std`` (that of a round of m
    records; the M-step calibrates on each round's count, ``central_noise_for``); for a
    mechanism whose holders take their own scale it is m_k, the records of ONE holder per
    round, and the mechanism is that holder's. ``scale`` overrides s.
    """
    kind = get_mechanism(name)
    d = check_count("d", d)
    records_per_round = check_count("records_per_round", records_per_round)
    if kind.noise_site == "nowhere":
        return _shape(kind, scale=scale, smoothing=None, clip=clip)
    if epsilon is None or delta is None:
        raise ValueError(f"mechanism {name!r} needs epsilon and delta")
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    participations = check_count("participations", participations)
    smoothing: float | None = None
    if kind.needs == "clip":
        clip = check_positive("clip", clip)
    elif kind.needs == "scale":
        if scale is None:
            if tau is None:
                raise ValueError(f"mechanism {name!r} needs tau (or an explicit scale)")
            scale = public_scale(
                name,
                d=d,
                records_per_round=records_per_round,
                epsilon=epsilon,
                delta=delta,
                tau=tau,
                participations=participations,
                zeta=zeta,
            )
        smoothing = smoothing_precision(d, zeta)
    shares = kind.noise_site == "shares"
    shape = _shape(
        kind,
        scale=scale,
        smoothing=smoothing,
        clip=clip,
        t_min=t_min if shares else None,
        colluders=colluders if shares else 0,
    )
    central = central_noise_for(
        shape,
        d=d,
        epsilon=epsilon,
        delta=delta,
        accounting=accounting,
        participations=participations,
    )
    if central is not None:
        return shape.with_noise(central.std(records_per_round))
    return shape.calibrated(d, Budget(epsilon, delta, accounting), participations)


def holder_scale(
    params: PublicValues,
    records: int,
    *,
    mechanism: str | None = None,
    t: int | None = None,
    reuse: bool = False,
) -> float | None:
    """The scale a holder enrolled with ``records`` records truncates with in round ``t``:
    the published s (or s_t, when the run publishes one per round), or, for a mechanism
    whose holders take their own scale and a run that fixes none, its own s_k:
    ``round_scales`` of its own records at the run's public values. The holder and the
    coordinator both compute s_k from public values and the enrolled count: it is not
    sent (docs/HOSPITAL.md). ``mechanism`` overrides the run's. ``t`` may be omitted only
    when every round has the same scale (equal rounds); ``reuse``: every record reports
    in every round (a simulated study's, ``holder_mechanism``)."""
    name = params.mechanism if mechanism is None else mechanism
    if get_mechanism(name).per_holder_scale and params.scale is None:
        own = _run_scales(
            params, records, mechanism=name, delta=params.delta, tau=params.tau, reuse=reuse
        )
        return own[round_index(params.schedule, params.rounds, t)]
    if params.scales is not None:
        if t is None:
            raise ValueError("the run publishes a scale per round: give the round t")
        return params.scales[round_index(params.schedule, params.rounds, t)]
    return params.scale


def holder_contribution(
    params: PublicValues, records: int, *, mechanism: str | None = None, t: int | None = None
) -> Mechanism:
    """The mechanism a holder enrolled with ``records`` records runs in round ``t`` under
    ``params`` (``mechanism`` overrides its name), without its noise: what fixes each
    record's contribution, its bound and its sensitivity. β_s is recomputed from d and ζ,
    never taken from the published value. ValueError when the mechanism is not one of a
    federated run, or the run publishes no scale or clip norm it needs."""
    name = params.mechanism if mechanism is None else mechanism
    if not get_mechanism(name).federated:
        raise ValueError(f"mechanism {name!r} is not one of a federated run")
    return _contribution(params, records, name=name, t=t, reuse=False)


def _contribution(
    params: PublicValues, records: int, *, name: str, t: int | None, reuse: bool
) -> Mechanism:
    """``holder_contribution`` of mechanism ``name``, federated or not (``reuse``: every
    record reports in every round, ``holder_scale``)."""
    kind = get_mechanism(name)
    scaled = kind.needs == "scale"
    scale = holder_scale(params, records, mechanism=name, t=t, reuse=reuse) if scaled else None
    smoothing = smoothing_precision(parameter_size(params), params.zeta) if scaled else None
    shares = kind.noise_site == "shares"
    # The mechanism's c is t_min − (the honest shares the run promises): c on the mesh,
    # t_k − h on the Harary graph, where any learnable sum holds h honest shares, and
    # T − h on the expander, where such a sum holds at least T reports (h > t_k there).
    t_min = (params.survivors or params.t_min) if shares else None
    honest = params.honest_shares
    colluders = t_min - honest if t_min is not None and honest is not None else 0
    return _shape(
        kind,
        scale=scale,
        smoothing=smoothing,
        clip=params.clip,
        t_min=t_min,
        colluders=colluders,
    )


def report_sensitivity(
    params: PublicValues, records: int, *, mechanism: str | None = None, t: int | None = None
) -> float | None:
    """Δ of one record in round ``t``'s report of a holder enrolled with ``records``
    records; None when that report carries no noise of the holder's (aggregator's noise,
    or none)."""
    name = params.mechanism if mechanism is None else mechanism
    if not get_mechanism(name).locally_private():
        return None
    shape = holder_contribution(params, records, mechanism=name, t=t)
    return shape.sensitivity(parameter_size(params))


def holder_noise_std(
    params: PublicValues,
    records: int,
    budget: Budget,
    *,
    mechanism: str | None = None,
    t: int | None = None,
) -> float:
    """σ_r of round ``t``'s report of a holder enrolled with ``records`` records at the
    ``budget`` (noise per holder: of its one draw on its sum), as the mechanism calibrates
    it; 0 when the report carries no holder noise."""
    name = params.mechanism if mechanism is None else mechanism
    if not get_mechanism(name).locally_private():
        return 0.0
    shape = holder_contribution(params, records, mechanism=name, t=t)
    return shape.calibrated(parameter_size(params), budget).noise_std


def holder_mechanism(
    params: PublicValues,
    *,
    records: int,
    budget: Budget,
    t: int | None = None,
) -> Mechanism:
    """The mechanism a data holder enrolled with ``records`` records runs in round ``t`` of
    the run of ``params``, its noise calibrated from the holder's OWN ``budget``, never
    from a σ_r the coordinator chose. Mechanisms whose
    noise is the aggregator's carry no holder noise (``central_noise``); noise shares are
    calibrated for the run's sum with the run's public t_min (each record reports in one
    round). ValueError when the mechanism is not one of a federated run."""
    shape = holder_contribution(params, records, t=t)
    return _holder_noise(shape, d=parameter_size(params), budget=budget, participations=1)


def study_mechanism(
    params: PublicValues,
    *,
    records: int,
    budget: Budget,
    t: int | None = None,
    reuse: bool = False,
) -> Mechanism:
    """``holder_mechanism`` for a simulated study, whose ``params`` may also name a
    mechanism of no federated run (central-clip) and whose records may each report in
    every round (``reuse``: the budget is then split over the T releases)."""
    shape = _contribution(params, records, name=params.mechanism, t=t, reuse=reuse)
    participations = _participations(params.rounds, reuse=reuse)
    size = parameter_size(params)
    return _holder_noise(shape, d=size, budget=budget, participations=participations)


def _holder_noise(shape: Mechanism, *, d: int, budget: Budget, participations: int) -> Mechanism:
    """``shape`` with the noise its holder adds for ``participations`` releases at
    ``budget``; ``shape`` itself when the holder adds none (the aggregator's, or none)."""
    if not (shape.locally_private() or isinstance(shape, SharedNoise)):
        return shape
    return shape.calibrated(d, budget, participations)


def public_budget(params: PublicValues) -> Budget:
    """The budget a run of ``params`` publishes: what an honest holder with exactly that
    budget, and the aggregator's noise, are calibrated for."""
    return Budget(epsilon=params.epsilon, delta=params.delta, accounting=params.accounting)


def central_noise(
    params: PublicValues, t: int | None = None, *, reuse: bool = False
) -> CentralNoise | None:
    """The coordinator's noise in round ``t`` of a run of ``params`` (None unless its
    mechanism's noise is the aggregator's), at the run's published budget; ``reuse``
    (a simulated study's): every record reports in each of the T rounds."""
    if get_mechanism(params.mechanism).noise_site != "aggregator":
        return None
    contribution = _contribution(
        params, params.records_per_round, name=params.mechanism, t=t, reuse=reuse
    )
    budget = public_budget(params)
    return central_noise_for(
        contribution,
        d=parameter_size(params),
        epsilon=budget.epsilon,
        delta=budget.delta,
        accounting=budget.accounting,
        participations=_participations(params.rounds, reuse=reuse),
    )
