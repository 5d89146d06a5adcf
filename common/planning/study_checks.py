"""A simulated study's description (``Study``, run by ``ldpem.common.planning.study``) and its
checks: one-line UserErrors for its values, before anything is drawn, and for its size once
its records are known. The description lives beside its checks, so that the study's runner
imports both and neither imports the runner."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ldpem.common.core.accounting import ACCOUNTING_MODES
from ldpem.common.core.calibration import DEFAULT_ZETA
from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import get_mechanism, mechanism_names
from ldpem.common.models import Model, get_model, model_names
from ldpem.common.protocol import (
    EQUAL,
    LAST,
    check_final,
    check_noise_shares,
    check_schedule,
    is_equal,
    least_records,
    round_sizes,
)

__all__ = [
    "NoiseShareChoices",
    "Study",
    "check_size",
    "check_study",
    "given_sizes",
    "per_hospital",
    "study_model",
]


@dataclass(frozen=True, kw_only=True)
class NoiseShareChoices:
    """How a study or a predicted run (``problem.Problem``) shares its noise (secagg), the
    fields both carry; keyword-only, so that each keeps its own positional fields first.

    ``t_min``: the fewest holders of a sum (None: ``protocol.study_t_min``); ``colluders``:
    c, the most of them that may collude with the coordinator (None:
    ``protocol.study_colluders``); ``secagg_topology``: the full mesh, or the SecAgg+ graph
    or expander (docs/SECAGG_GRAPH.md) with its dropout share δ and least honest shares h
    (None: ``runvalues`` defaults), whose t_k (T on the expander) and h size the noise as
    in a federated run of that topology (``ldpem simulate`` resolves its default "auto"
    with ``runvalues.resolve_topology`` before it makes the study).
    """

    t_min: int | None = None
    colluders: int | None = None
    secagg_topology: str = "mesh"
    dropout_share: float | None = None
    min_honest_shares: int | None = None


@dataclass(frozen=True)
class Study(NoiseShareChoices):
    """A simulated study. ``None`` means "the documented default":

    delta: n^-1.1 (at most 0.5); missing: 0.1 for a model that allows missing covariates
    (rmc), 0 otherwise; beta_bound (the declared bound B on ‖β‖₂): snr·σ; tau: the model's
    ``default_tau`` of B, σ and d (``protocol.study_tau``); scale: Algorithm 2's rule (the
    ``scale`` a run's operator may fix instead).
    ``outliers`` is the fraction of records replaced by gross outliers of norm ~1e3.
    ``sizes``: the hospitals' record counts (summing to n; ``hospitals`` is then ignored);
    otherwise ``hospitals`` hospitals of random unequal sizes
    (``simulation.random_holder_sizes``). With records given to ``run_study`` instead of
    synthetic ones, n and d are theirs, and snr (but for B) and missing are unused.
    ``schedule``: records per round (``protocol.round_sizes``: ``"equal"``,
    ``"geometric:g"`` or T fractions); ``final``: the reported estimate (``"last"`` or
    ``"average:k"``, ``protocol.final_estimate``). How it shares its noise:
    ``NoiseShareChoices``. ``model_options``: (name, value) pairs of the model's declared
    options (``Model.options``, such as gmmk's components; the others at their defaults).
    """

    model: str = "gmm"
    mechanism: str = "local"
    n: int = 20_000
    d: int = 10
    epsilon: float = 1.0
    delta: float | None = None
    rounds: int = 10
    clip: float = 1.0
    snr: float = 3.0
    sigma: float = 1.0
    missing: float | None = None
    accounting: str = "exact"
    reuse: bool = False
    hospitals: int = 1
    seed: int = 0
    tau: float | None = None
    beta_bound: float | None = None
    zeta: float = DEFAULT_ZETA
    eta: float = 1.0
    outliers: float = 0.0
    sizes: tuple[int, ...] | None = None
    scale: float | None = None
    schedule: str | tuple[float, ...] = EQUAL
    final: str = LAST
    #: Each holder misses each round with this probability (``run_gradient_em``).
    dropout: float = 0.0
    model_options: tuple[tuple[str, int], ...] = ()


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
