"""One simulated study: the pipeline behind ``ldpem simulate``, ``ldpem plan``, the forecast
a coordinator states at run creation, the demo's in-process baselines and
``ldpem experiment``.

A ``Study`` is the declarative description (model, mechanism, size, budget, hospitals,
seed); ``run_study`` draws it and runs it through the round protocol: every hospital's
round is ``ldpem.common.protocol.rounds.holder_round`` and every M-step ``protocol.m_step`` (via
``simulator.run_gradient_em``), the functions the agent and the coordinator run. The
study defaults (δ, B, τ, m, β⁰) and the mechanisms are ``ldpem.common.protocol``'s, and
``study_mechanisms`` builds them from the study's public values (``study_values``) with
the construction functions the agent runs.

The module is a study's one stop: its description (``Study``), the checks of its values
(``check_study``, before anything is drawn, and ``check_size``, once its records are known)
and its runner (``run_study``).

One seeded generator (``protocol.study_rng``) drives everything, in this order: the
synthetic data, the gross outliers (if any), β⁰ (a random direction of norm σ, as the
coordinator's), the split over hospitals (only when there are several or their sizes are
given), then the run itself (partition into rounds, noise). So a study with the hospital
sizes of a run is exactly the planner's study of that run; the planner and the forecast of
``run create`` simulate it many times on the fast path (``ldpem.common.planning.fastsim``: the
same distribution, not the same draws) over the problem's prediction seeds
(``ldpem.common.planning.prediction``).

A study may deal each hospital's records over the rounds by a schedule (``Study.schedule``,
``protocol.round_sizes``; each round's mechanism then applies the scale rule with that
round's m_t) and report the average of its last iterates (``Study.final``,
``protocol.final_estimate``), as a run publishes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.accounting import ACCOUNTING_MODES
from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import Mechanism, get_mechanism, mechanism_names
from ldpem.common.models import Model, Records, get_model, model_names
from ldpem.common.planning.simulator import (
    RoundMechanisms,
    random_holder_sizes,
    run_gradient_em,
    split_holders,
)
from ldpem.common.protocol import (
    CentralNoise,
    central_noise,
    check_final,
    check_noise_shares,
    check_schedule,
    initial_beta,
    is_equal,
    least_records,
    public_budget,
    published_scales,
    records_per_round,
    round_records,
    round_sizes,
    study_beta_bound,
    study_colluders,
    study_delta,
    study_mechanism,
    study_rng,
    study_t_min,
    study_tau,
)
from ldpem.common.protocol.run_fields import (
    DEFAULT_D,
    DEFAULT_MECHANISM,
    DEFAULT_MODEL,
    RunFields,
)

__all__ = [
    "OUTLIER_NORM",
    "Dataset",
    "RoundCallback",
    "Study",
    "StudyResult",
    "StudyValues",
    "add_outliers",
    "check_size",
    "check_study",
    "given_sizes",
    "per_hospital",
    "run_study",
    "shares_threshold",
    "study_mechanisms",
    "study_model",
    "study_values",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Study(RunFields):
    """A simulated study: a run's public fields (``RunFields``, with their defaults and
    what ``None`` means) and what a simulation adds: the data's model, the mechanism, the
    records n (of dimension d), the hospitals and the seed.

    ``outliers`` is the fraction of records replaced by gross outliers of norm ~1e3.
    ``sizes``: the hospitals' record counts (summing to n; ``hospitals`` is then ignored);
    otherwise ``hospitals`` hospitals of random unequal sizes
    (``simulator.random_holder_sizes``). With records given to ``run_study`` instead of
    synthetic ones, n and d are theirs, and snr (but for B) and missing are unused.
    """

    model: str = DEFAULT_MODEL
    mechanism: str = DEFAULT_MECHANISM
    n: int = 20_000
    d: int = DEFAULT_D
    reuse: bool = False
    hospitals: int = 1
    seed: int = 0
    outliers: float = 0.0
    sizes: tuple[int, ...] | None = None
    #: Each holder misses each round with this probability (``run_gradient_em``).
    dropout: float = 0.0


def study_model(study: Study) -> Model:
    """The study's model with its ``model_options`` set (``Model.configured``); a
    UserError naming an option the model does not declare or a value out of range."""
    try:
        return get_model(study.model, dict(study.model_options))
    except ValueError as error:
        raise UserError(str(error)) from None


def _fail(name: str, requirement: str, value: object) -> UserError:
    return UserError(f"{name} must be {requirement}, got {value!r}")


def check_study(study: Study, *, synthetic: bool) -> None:
    """One-line UserErrors for a study's values (those its records do not decide)."""
    if study.model not in model_names():
        raise _fail("model", f"one of {', '.join(model_names())}", study.model)
    study_model(study)
    if study.mechanism not in mechanism_names():
        raise _fail("mechanism", f"one of {', '.join(mechanism_names())}", study.mechanism)
    if study.accounting not in ACCOUNTING_MODES:
        raise _fail("accounting", f"one of {', '.join(ACCOUNTING_MODES)}", study.accounting)
    optional = {"tau": study.tau, "beta-bound": study.beta_bound, "scale": study.scale}
    positive = {
        "epsilon": study.epsilon,
        "clip": study.clip,
        "snr": study.snr,
        "sigma": study.sigma,
        "eta": study.eta,
        **{name: value for name, value in optional.items() if value is not None},
    }
    for name, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            raise _fail(name, "a finite number > 0", value)
    for name, count in {"n": study.n, "d": study.d, "rounds": study.rounds}.items():
        if count < 1:
            raise _fail(name, "an integer >= 1", count)
    if study.hospitals < 1:
        raise _fail("hospitals", "an integer >= 1", study.hospitals)
    if study.sizes is not None:
        if not study.sizes or min(study.sizes) < 1:
            raise _fail("hospital sizes", "a non-empty list of integers >= 1", study.sizes)
        if synthetic and sum(study.sizes) != study.n:
            raise _fail("hospital sizes", f"a list summing to n = {study.n}", study.sizes)
    if study.delta is not None and not 0.0 < study.delta < 1.0:
        raise _fail("delta", "in (0, 1)", study.delta)
    if not 0.0 < study.zeta < 1.0:
        raise _fail("zeta", "in (0, 1)", study.zeta)
    if study.missing is not None and not 0.0 <= study.missing < 1.0:
        raise _fail("missing", "in [0, 1)", study.missing)
    if not 0.0 <= study.dropout < 1.0:
        raise _fail("dropout", "in [0, 1)", study.dropout)
    if study.t_min is not None and get_mechanism(study.mechanism).noise_site != "shares":
        raise UserError(f"t-min is only meaningful for noise shares, not {study.mechanism}")
    if study.colluders is not None and get_mechanism(study.mechanism).noise_site != "shares":
        raise UserError(f"colluders is only meaningful for noise shares, not {study.mechanism}")
    graph_values = (study.dropout_share, study.min_honest_shares)
    topology = study.secagg_topology
    if topology not in ("mesh", "graph", "expander"):
        raise _fail("secagg-topology", "mesh, graph or expander", topology)
    if topology != "mesh":
        if get_mechanism(study.mechanism).noise_site != "shares":
            raise UserError(f"secagg-topology {topology} needs noise shares, not {study.mechanism}")
        if study.t_min is not None:
            raise UserError(
                f"t-min is derived on the {topology} (t_k): give --dropout-share instead"
            )
    elif graph_values != (None, None):
        raise UserError(
            "--dropout-share and --min-honest-shares need --secagg-topology graph or expander"
        )
    if not 0.0 <= study.outliers <= 0.5:
        raise _fail("outliers", "in [0, 0.5]", study.outliers)
    try:
        check_schedule(study.schedule, study.rounds)
        check_final(study.final, study.rounds)
        check_noise_shares(study.mechanism, study.schedule, study.final)
    except ValueError as error:
        raise UserError(str(error)) from None
    if study.reuse and not is_equal(study.schedule):
        raise UserError("a schedule deals records over rounds: it needs partitioned rounds")


def per_hospital(study: Study) -> int:
    """The records a hospital of a random split gets at least: one with reuse, else enough
    for one in every round of the schedule (``protocol.least_records``)."""
    return 1 if study.reuse else least_records(study.rounds, study.schedule)


def check_size(n: int, study: Study, sizes: tuple[int, ...] | None) -> None:
    """Every hospital needs a record in every round (partitioned: at least ``rounds``
    records, and enough for the schedule to give each round one)."""
    least = 1 if study.reuse else study.rounds
    if sizes is not None:
        if sum(sizes) != n:
            raise _fail("hospital sizes", f"a list summing to the {n} records", sizes)
        if min(sizes) < least:
            raise _fail("hospital sizes", f"each at least {least}", sizes)
        if not study.reuse:
            for size in sizes:
                try:
                    round_sizes(size, study.rounds, study.schedule)
                except ValueError as error:
                    raise UserError(f"a hospital of {size} records: {error}") from None
    random_split = sizes is None and study.hospitals > 1
    needed = study.hospitals * (per_hospital(study) if random_split else least)
    if n < max(needed, study.rounds):
        raise UserError(
            f"n must be at least {max(needed, study.rounds)} for {study.hospitals} "
            f"hospital(s) and {study.rounds} rounds{'' if study.reuse else ' (partitioned)'}"
            f", got {n}"
        )
    if sizes is None and study.hospitals == 1 and not study.reuse:
        try:
            round_sizes(n, study.rounds, study.schedule)
        except ValueError as error:
            raise UserError(str(error)) from None


def given_sizes(study: Study, dealt: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The hospitals' sizes fixed before any draw: the dataset's dealing (``dealt``), else
    the study's."""
    if dealt is None:
        return study.sizes
    if study.sizes is not None and study.sizes != dealt:
        raise UserError(
            f"the records are already dealt out as {list(dealt)}: give no other "
            f"hospital sizes, got {list(study.sizes)}"
        )
    return dealt


#: Called after each M-step with (round t = 1..T, β^t of shape (d,), error at β^t or None).
RoundCallback = Callable[[int, FloatArray, float | None], None]

#: L2 norm of the gross outliers that ``Study.outliers`` plants in the data.
OUTLIER_NORM = 1e3


@dataclass(frozen=True)
class Dataset:
    """Records to run a study on instead of synthetic ones, with the true β* (d,) when it
    is known. ``sizes``: the records are already dealt out in order (the first sizes[0]
    are hospital 1's, …), as the files of a federated run; None: the study deals them."""

    records: Records
    beta_star: FloatArray | None = None
    sizes: tuple[int, ...] | None = None


@dataclass(frozen=True, eq=False)
class StudyResult:
    """What a study drew and reached. T rounds, d dimensions, K hospitals.

    ``mechanism`` is every hospital's in round 0, or with per-hospital mechanisms (a
    mechanism with a ``per_holder_scale``, such as ``hospital``) the first one's, and
    ``holder_mechanisms`` then holds the K of them (else None);
    ``central`` is the aggregator's noise (None unless the mechanism is central);
    ``round_mechanisms`` (T) each round's, which differ under a schedule, whose m_t are
    ``round_records``.
    ``betas`` (T+1, p) is β⁰ … β^T, p = ``parameter_dim`` (d but for a mixture);
    ``errors`` (T floats) the error after each round,
    None (as ``initial_error``) without a known β*; ``estimate`` (d,) the reported
    estimate (``study.final`` of the iterates, with ``estimate_weights``) and
    ``estimate_error`` its error.
    """

    study: Study
    n: int
    d: int
    #: The size p of β (``Model.parameter_dim``: d, or K·(d + 1) for a mixture).
    parameter_dim: int
    delta: float
    tau: float
    beta_bound: float
    hospital_sizes: tuple[int, ...]
    records_per_round: int
    mechanism: Mechanism
    holder_mechanisms: tuple[Mechanism, ...] | None
    central: CentralNoise | None
    betas: FloatArray
    beta_star: FloatArray | None
    initial_error: float | None
    errors: tuple[float, ...] | None
    round_records: tuple[int, ...]
    round_mechanisms: tuple[RoundMechanisms, ...]
    estimate: FloatArray
    estimate_weights: tuple[float, ...]
    estimate_error: float | None
    #: The rounds not released (fewer reports than the mechanism's honest holders).
    skipped: tuple[int, ...] = ()
    #: The reports received in each round (K each without dropouts).
    reporters: tuple[int, ...] = ()

    @property
    def beta(self) -> FloatArray:
        """The reported estimate, shape (d,): β^T, or the average ``study.final`` asks."""
        return self.estimate

    @property
    def final_error(self) -> float | None:
        """The reported estimate's error (up to the model's symmetry), None without a
        known β*: ‖β^T − β*‖ for ``final = "last"``."""
        return self.estimate_error


def add_outliers(records: Records, fraction: float, rng: np.random.Generator) -> Records:
    """``records`` with ⌊fraction·n⌋ random records replaced by gross outliers: covariates
    (GMM: the observation) of norm ~``OUTLIER_NORM`` and, if there is one, a response of
    size ~``OUTLIER_NORM``. Draws nothing from ``rng`` when that count is 0.

    Parameters
    ----------
    records : Records
        n records, ``x`` of shape (n, d), ``y`` of shape (n,) or None.
    fraction : float
        Share of the records to replace, in [0, 1].
    rng : numpy.random.Generator
        The study's generator.

    Returns
    -------
    Records
        n records, ``x`` of shape (n, d); ``records`` itself when none is replaced.
    """
    count = int(fraction * records.n)
    if count == 0:
        return records
    index = rng.choice(records.n, count, replace=False)
    x = records.x.copy()
    x[index] = rng.standard_normal((count, records.d)) * (OUTLIER_NORM / math.sqrt(records.d))
    y = None
    if records.y is not None:
        y = records.y.copy()
        y[index] = rng.standard_normal(count) * OUTLIER_NORM
    return Records(x, y)


def _deal(
    records: Records, study: Study, dealt: tuple[int, ...] | None, rng: np.random.Generator
) -> list[Records]:
    """The hospitals' records: as the dataset dealt them (no draw), at random with the
    study's sizes or with ``simulator.random_holder_sizes``, or all of them for one
    hospital (no draw)."""
    if dealt is not None:
        return split_holders(records, dealt)
    sizes = study.sizes
    if sizes is None:
        if study.hospitals == 1:
            return [records]
        minimum = per_hospital(study)
        sizes = tuple(random_holder_sizes(records.n, study.hospitals, minimum, rng))
    return split_holders(records, sizes, rng)


def shares_threshold(study: Study, holders: int) -> tuple[int, int]:
    """(t_min, c) of the noise shares' mechanism of ``study`` with K = ``holders``: on the
    full mesh the study's t_min and c (``study_t_min``, ``study_colluders``), t_min − c
    honest shares; on the SecAgg+ graph t_k and t_k − h, so that its noise is sized for the
    h honest shares of a federated run on that graph (``runvalues.run_graph`` with c =
    ``colluders`` or ⌊K/3⌋); on the expander T and T − h (``runvalues.run_expander``: a
    learnable sum holds at least T reports, h of them honest, so a round with fewer
    reports than T is not released). UserError when the graph cannot be met or is the
    full mesh."""
    topology = study.secagg_topology
    if topology not in ("graph", "expander"):
        t_min = study_t_min(study.t_min, holders)
        return t_min, study_colluders(study.colluders, holders, t_min)
    from ldpem.common.secagg.graph.expander import ExpanderParameters
    from ldpem.common.secagg.runvalues import requested_graph

    try:
        graph, *_ = requested_graph(
            holders,
            study.colluders,
            study.dropout_share,
            study.min_honest_shares,
            topology=topology,
        )
    except ValueError as error:
        raise UserError(f"secagg-topology {topology}: {error}") from None
    if graph.full_mesh:
        raise UserError(
            f"secagg-topology graph: at K = {holders} the graph is the full mesh (k = K - 1)"
        )
    least = graph.survivors if isinstance(graph, ExpanderParameters) else graph.threshold
    return least, least - graph.honest_shares


@dataclass(frozen=True)
class StudyValues:
    """The public values of a simulated study (``protocol.PublicValues``), as a coordinator
    would publish them for its hospitals (``protocol.derive_public_values``): what the
    study's mechanisms are built from, by the construction functions the agent runs
    (``study_values``)."""

    model: str
    d: int
    sigma: float
    rounds: int
    eta: float
    mechanism: str
    epsilon: float
    delta: float
    accounting: str
    tau: float
    zeta: float
    scale: float | None
    smoothing: float | None
    clip: float | None
    records_per_round: int
    schedule: str | tuple[float, ...]
    scales: tuple[float, ...] | None
    final: str
    t_min: int | None
    colluders: int | None
    start: str
    honest_shares: int | None
    survivors: int | None = None
    #: The model's declared options, as a run publishes them (``protocol.configured_model``).
    model_options: Mapping[str, int] = field(default_factory=dict)


def study_values(
    study: Study, sizes: Sequence[int], *, d: int, delta: float, tau: float
) -> StudyValues:
    """The public values of ``study`` with hospitals of ``sizes`` records: its scale s
    (one, or one per round under a schedule) from Algorithm 2's rule with the records per
    round, at the budget split over the T releases when records are reused; t_min and the
    honest shares of noise shares from ``shares_threshold`` (mesh, graph or expander).
    ``d`` is the records' dimension; the scale and β_s are those of β's p coordinates
    (``Model.parameter_dim``), as a run's (``protocol.derive_public_values``)."""
    kind = get_mechanism(study.mechanism)
    size = study_model(study).parameter_dim(d)
    reuse = study.reuse
    scaled = kind.needs == "scale"
    t_min, colluders = shares_threshold(study, len(sizes))
    shares = kind.noise_site == "shares"
    values = StudyValues(
        model=study.model,
        d=d,
        sigma=study.sigma,
        rounds=study.rounds,
        eta=study.eta,
        mechanism=study.mechanism,
        epsilon=study.epsilon,
        delta=delta,
        accounting=study.accounting,
        tau=tau,
        zeta=study.zeta,
        scale=study.scale,
        smoothing=smoothing_precision(size, study.zeta) if scaled else None,
        clip=study.clip,
        records_per_round=records_per_round(sizes, study.rounds, reuse=reuse),
        schedule=study.schedule,
        scales=None,
        final=study.final,
        t_min=t_min if shares else None,
        colluders=colluders if shares else None,
        start=get_model(study.model).start_rule,
        honest_shares=t_min - colluders if shares else None,
        model_options=dict(study.model_options),
    )
    if values.scale is not None:
        return values
    scale, scales = published_scales(values, records=sum(sizes), delta=delta, tau=tau, reuse=reuse)
    return replace(values, scale=scale, scales=scales)


def study_mechanisms(
    study: Study, sizes: Sequence[int], *, d: int, delta: float, tau: float
) -> tuple[RoundMechanisms, ...]:
    """Each round's mechanisms, each hospital's and the aggregator's noise, built as the
    agent builds its own: from the study's public values (``study_values``) by
    ``protocol.study_mechanism`` (``holder_mechanism`` with reuse and the mechanisms of no
    federated run) and ``protocol.central_noise``, at the study's budget.

    Every hospital runs the mechanism of the round's scale s_t (from m_t,
    ``protocol.round_records`` of all the records: m = ⌊n/T⌋ in every equal round),
    except under a mechanism whose holders take their own scale
    (``Mechanism.per_holder_scale``: ``hospital``), where each has its own scale and noise
    from its own m_k,t (``protocol.round_records`` of its own records). A central
    mechanism shows the σ_r of a round of m_t records as its ``noise_std`` (the M-step
    calibrates on each round's count, ``central_noise_for``).

    Parameters
    ----------
    study : Study
        Mechanism, budget, rounds, schedule, reuse, ζ, C, accounting and scale.
    sizes : sequence of K int
        The hospitals' record counts.
    d : int
        The records' dimension (the mechanisms bound β's ``Model.parameter_dim`` of it).
    delta, tau : float
        The study's resolved δ and τ.

    Returns
    -------
    tuple of T RoundMechanisms
        Round t's mechanism of each hospital (K) and aggregator's noise (None unless the
        mechanism is central); equal rounds share one object.
    """
    values = study_values(study, sizes, d=d, delta=delta, tau=tau)
    budget = public_budget(values)
    own_scale = get_mechanism(study.mechanism).per_holder_scale
    counts = round_records(sum(sizes), study.rounds, study.schedule, reuse=study.reuse)

    def plan(t: int | None) -> RoundMechanisms:
        central = central_noise(values, t, reuse=study.reuse)

        @cache
        def build(records: int) -> Mechanism:
            built = study_mechanism(values, records=records, budget=budget, t=t, reuse=study.reuse)
            if central is not None:
                return built.with_noise(central.std(counts[0 if t is None else t]))
            return built

        # Without their own scale, all hospitals of a round run one mechanism.
        holders = tuple(build(size if own_scale else values.records_per_round) for size in sizes)
        return RoundMechanisms(holders, central)

    if is_equal(study.schedule):
        return (plan(None),) * study.rounds
    return tuple(plan(t) for t in range(study.rounds))


def _synthetic(study: Study, model: Model, rng: np.random.Generator) -> Dataset:
    missing = study.missing
    if missing is None:
        missing = 0.1 if model.allows_missing else 0.0
    if missing and not model.allows_missing:
        raise UserError(f"missing must be 0 for model {model.name}, got {missing!r}")
    records, beta_star = model.generate(
        study.n, study.d, snr=study.snr, sigma=study.sigma, missing=missing, rng=rng
    )
    return Dataset(records, beta_star)


def run_study(
    study: Study,
    *,
    data: Dataset | None = None,
    beta0: FloatArray | None = None,
    on_round: RoundCallback | None = None,
) -> StudyResult:
    """Draw and run ``study`` in-process (module docstring: what, and in which order).

    Parameters
    ----------
    study : Study
        What to simulate.
    data : Dataset, optional
        Records (n, d) to use instead of synthetic ones, with β* when known, possibly
        already dealt out over the hospitals.
    beta0 : array of shape (d,), optional
        The start β⁰ (a federated run's), instead of a draw.
    on_round : RoundCallback, optional
        Called after each M-step with (t, β^t, error at β^t or None).

    Returns
    -------
    StudyResult
        ``betas`` of shape (T+1, d), ``errors`` of T floats (None without β*), the
        resolved δ, τ, B, m, the hospitals' sizes and the mechanisms.
    """
    check_study(study, synthetic=data is None)
    model = study_model(study)
    rng = study_rng(study.seed)
    data = data if data is not None else _synthetic(study, model, rng)
    records = add_outliers(data.records, study.outliers, rng)
    n, d = records.n, records.d
    check_size(n, study, given_sizes(study, data.sizes))
    delta = study_delta(study.delta, n)
    bound = study_beta_bound(study.beta_bound, snr=study.snr, sigma=study.sigma)
    tau = study_tau(model, tau=study.tau, beta_bound=bound, sigma=study.sigma, d=d)
    # The mechanisms bound and calibrate β's coordinates: K·(d + 1) of them for a mixture.
    size = model.parameter_dim(d)
    if beta0 is None:
        start = initial_beta(d, study.sigma, rng, model=model)
    else:
        start = np.asarray(beta0, dtype=np.float64)
    holders = _deal(records, study, data.sizes, rng)
    counts = tuple(h.n for h in holders)
    plans = study_mechanisms(study, counts, d=d, delta=delta, tau=tau)
    beta_star = data.beta_star

    def report(t: int, beta: FloatArray) -> None:
        if on_round is not None:
            on_round(t, beta, None if beta_star is None else model.error(beta, beta_star))

    result = run_gradient_em(
        model=model,
        holders=holders,
        sigma=study.sigma,
        mechanisms=plans,
        beta0=start,
        rng=rng,
        eta=study.eta,
        reuse=study.reuse,
        beta_star=beta_star,
        on_round=report,
        schedule=study.schedule,
        final=study.final,
        dropout=study.dropout,
        dropout_rng=rng,
    )
    betas = np.array(result.betas)
    betas.setflags(write=False)
    assert result.final is not None  # run_gradient_em always makes the estimate
    estimate = result.final.beta
    estimate.setflags(write=False)
    per_holder = get_mechanism(study.mechanism).per_holder_scale
    return StudyResult(
        study=study,
        n=n,
        d=d,
        parameter_dim=size,
        delta=delta,
        tau=tau,
        beta_bound=bound,
        hospital_sizes=counts,
        records_per_round=records_per_round(counts, study.rounds, reuse=study.reuse),
        mechanism=plans[0].holders[0],
        holder_mechanisms=plans[0].holders if per_holder else None,
        central=plans[0].central,
        betas=betas,
        beta_star=beta_star,
        initial_error=None if beta_star is None else model.error(start, beta_star),
        errors=None if beta_star is None else tuple(float(e) for e in result.errors),
        round_records=round_records(sum(counts), study.rounds, study.schedule, reuse=study.reuse),
        round_mechanisms=plans,
        estimate=estimate,
        estimate_weights=result.final.weights,
        estimate_error=None if beta_star is None else model.error(estimate, beta_star),
        skipped=tuple(result.skipped),
        reporters=tuple(result.reporters),
    )
