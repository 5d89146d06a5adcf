"""In-process simulation of a whole federated gradient EM run (``ldpem simulate``).

Every data holder's round goes through ``ldpem.common.rounds.holder_round`` (called by
``ldpem.common.simulation.run_gradient_em``), the same function the hospital agent runs,
so there is one implementation of "a data holder's round".

The study defaults (δ, τ, m, β⁰) and the mechanisms are ``ldpem.common.protocol``'s, the
ones a federated run uses. One seeded generator (``protocol.study_rng``) drives everything,
in this order: the synthetic data, the gross outliers (if any), the starting point β⁰ (a
random direction of norm σ, as the coordinator's), the split over hospitals (only when
there are several or their sizes are given), then the run itself (partition into rounds,
noise). With hospital sizes and no outliers this is exactly the planner's study
(``planning.study_errors``), so the forecast of ``run create`` is the mean of these
figures over seeds 0, 1, ….
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.client.data import load_records
from ldpem.common.accounting import ACCOUNTING_MODES
from ldpem.common.calibration import DEFAULT_ZETA
from ldpem.common.errors import UserError
from ldpem.common.mechanisms import Mechanism, SecAggSkellam, get_mechanism, mechanism_names
from ldpem.common.models import Model, Records, get_model, model_names
from ldpem.common.planning import Problem, final_errors
from ldpem.common.protocol import (
    central_noise_for,
    holder_records_per_round,
    initial_beta,
    make_mechanism,
    records_per_round,
    study_beta_bound,
    study_delta,
    study_rng,
    study_t_min,
    study_tau,
)
from ldpem.common.secagg.quantize import modulus_bits
from ldpem.common.simulation import run_gradient_em, split_holders

__all__ = [
    "OUTLIER_NORM",
    "Dataset",
    "RoundCallback",
    "SimulationConfig",
    "SimulationOutcome",
    "add_outliers",
    "hospital_sizes",
    "simulate",
]

FloatArray = NDArray[np.float64]
SimulationOutcome = dict[str, Any]
#: Called after each M-step with (round t = 1..T, β^t, error at β^t or None).
RoundCallback = Callable[[int, FloatArray, float | None], None]

#: L2 norm of the gross outliers that ``outliers`` plants in the data.
OUTLIER_NORM = 1e3


@dataclass(frozen=True)
class Dataset:
    """Records to run on instead of synthetic data, with the true β* when it is known."""

    records: Records
    beta_star: FloatArray | None = None


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of one simulated run. ``None`` means "the documented default":

    delta: n^-1.1 (the paper's choice, at most 0.5); missing: 0.1 for rmc, 0 otherwise;
    beta_bound (the declared bound B on ‖β‖₂): snr·σ; tau: the model's ``default_tau(B, σ, d)``
    (``ldpem.common.protocol``'s study defaults).
    ``outliers`` is the fraction of records replaced by gross outliers of norm ~1e3.
    ``sizes``: the hospitals' record counts (they must sum to n; ``hospitals`` is then
    ignored). ``data``: a CSV (or .npy) file of records to use instead of synthetic ones
    (see ``ldpem.client.data``); n and d are then the file's, snr and missing are unused,
    and without a known β* the errors are None. ``t_min``: for a mechanism with noise
    shares, the honest holders whose shares make the noise. ``dropout``: the probability
    that a holder misses a round.
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
    data: Path | None = None
    #: Explicit hospital sizes (summing to n) instead of a random split into ``hospitals``.
    sizes: tuple[int, ...] | None = None
    #: Noise shares (secagg): the honest holders whose shares make the noise, 1 ≤ t_min ≤ K;
    #: None: ``protocol.study_t_min`` (max(2, ⌈K/2⌉), at most K).
    t_min: int | None = None
    #: Each holder misses each round with this probability (``run_gradient_em``).
    dropout: float = 0.0


def _fail(name: str, requirement: str, value: object) -> UserError:
    return UserError(f"{name} must be {requirement}, got {value!r}")


def _check_config(config: SimulationConfig) -> None:
    if config.model not in model_names():
        raise _fail("model", f"one of {', '.join(model_names())}", config.model)
    if config.mechanism not in mechanism_names():
        raise _fail("mechanism", f"one of {', '.join(mechanism_names())}", config.mechanism)
    if config.accounting not in ACCOUNTING_MODES:
        raise _fail("accounting", f"one of {', '.join(ACCOUNTING_MODES)}", config.accounting)
    positive = {
        "epsilon": config.epsilon,
        "clip": config.clip,
        "snr": config.snr,
        "sigma": config.sigma,
        "eta": config.eta,
        "tau": 1.0 if config.tau is None else config.tau,
        "beta-bound": 1.0 if config.beta_bound is None else config.beta_bound,
    }
    for name, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            raise _fail(name, "a finite number > 0", value)
    for name, count in {"n": config.n, "d": config.d, "rounds": config.rounds}.items():
        if count < 1:
            raise _fail(name, "an integer >= 1", count)
    if config.hospitals < 1:
        raise _fail("hospitals", "an integer >= 1", config.hospitals)
    if config.sizes is not None:
        if not config.sizes or min(config.sizes) < 1:
            raise _fail("hospital sizes", "a non-empty list of integers >= 1", config.sizes)
        if config.data is None and sum(config.sizes) != config.n:
            raise _fail("hospital sizes", f"a list summing to n = {config.n}", config.sizes)
    if config.delta is not None and not 0.0 < config.delta < 1.0:
        raise _fail("delta", "in (0, 1)", config.delta)
    if not 0.0 < config.zeta < 1.0:
        raise _fail("zeta", "in (0, 1)", config.zeta)
    if config.missing is not None and not 0.0 <= config.missing < 1.0:
        raise _fail("missing", "in [0, 1)", config.missing)
    if not 0.0 <= config.outliers <= 0.5:
        raise _fail("outliers", "in [0, 0.5]", config.outliers)
    if not 0.0 <= config.dropout < 1.0:
        raise _fail("dropout", "in [0, 1)", config.dropout)
    if config.t_min is not None:
        if get_mechanism(config.mechanism).noise_site != "shares":
            raise UserError(
                f"t-min is only meaningful for a mechanism whose noise is shared, not "
                f"{config.mechanism}"
            )
        holders = len(config.sizes) if config.sizes is not None else config.hospitals
        if not 1 <= config.t_min <= holders:
            raise _fail("t-min", f"an integer in [1, {holders}] (the hospitals)", config.t_min)


def _check_size(n: int, config: SimulationConfig) -> None:
    """Every hospital needs a record in every round (partitioned: ``rounds`` records)."""
    per_hospital = 1 if config.reuse else config.rounds
    if config.sizes is not None:
        if sum(config.sizes) != n:
            raise _fail("hospital sizes", f"a list summing to the {n} records", config.sizes)
        if min(config.sizes) < per_hospital:
            raise _fail("hospital sizes", f"each at least {per_hospital}", config.sizes)
    needed = config.hospitals * per_hospital
    if n < max(needed, config.rounds):
        raise UserError(
            f"n must be at least {max(needed, config.rounds)} for {config.hospitals} "
            f"hospital(s) and {config.rounds} rounds{'' if config.reuse else ' (partitioned)'}"
            f", got {n}"
        )


def add_outliers(records: Records, fraction: float, rng: np.random.Generator) -> Records:
    """``records`` with ⌊fraction·n⌋ random records replaced by gross outliers: covariates
    (GMM: the observation) of norm ~``OUTLIER_NORM`` and, if there is one, a response of
    size ~``OUTLIER_NORM``."""
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


def hospital_sizes(n: int, hospitals: int, minimum: int, rng: np.random.Generator) -> list[int]:
    """Unequal sizes summing to n, each ≥ ``minimum``: the rest is shared out with
    Dirichlet(1, …, 1) proportions."""
    spare = n - hospitals * minimum
    if spare < 0:
        raise UserError(f"n must be at least {hospitals * minimum}, got {n}")
    shares = rng.multinomial(spare, rng.dirichlet(np.ones(hospitals)))
    return [minimum + int(share) for share in shares]


def _split(records: Records, config: SimulationConfig, rng: np.random.Generator) -> list[Records]:
    if config.sizes is not None:
        sizes = list(config.sizes)
    elif config.hospitals == 1:
        return [records]
    else:
        minimum = 1 if config.reuse else config.rounds
        sizes = hospital_sizes(records.n, config.hospitals, minimum, rng)
    return split_holders(records, sizes, rng)


def _load(config: SimulationConfig, model: Model, rng: np.random.Generator) -> Dataset:
    if config.data is not None:
        return Dataset(load_records(config.data, model.name))
    missing = config.missing
    if missing is None:
        missing = 0.1 if model.allows_missing else 0.0
    if missing and not model.allows_missing:
        raise UserError(f"missing must be 0 for model {model.name}, got {missing!r}")
    records, beta_star = model.generate(
        config.n, config.d, snr=config.snr, sigma=config.sigma, missing=missing, rng=rng
    )
    return Dataset(records, beta_star)


def _mechanism(
    config: SimulationConfig,
    *,
    d: int,
    m: int,
    delta: float,
    tau: float,
    holders: int,
    name: str | None = None,
) -> Mechanism:
    return make_mechanism(
        config.mechanism if name is None else name,
        d=d,
        records_per_round=m,
        epsilon=config.epsilon,
        delta=delta,
        participations=config.rounds if config.reuse else 1,
        tau=tau,
        zeta=config.zeta,
        clip=config.clip,
        accounting=config.accounting,
        t_min=study_t_min(config.t_min, holders),
    )


def _holder_mechanisms(
    config: SimulationConfig, holders: list[Records], *, d: int, delta: float, tau: float
) -> list[Mechanism] | None:
    """Each holder's own mechanism when holders take their own scale (``hospital``: its
    scale and noise follow from its own records per round,
    ``protocol.holder_records_per_round``); None for the others."""
    if not get_mechanism(config.mechanism).per_holder_scale:
        return None
    return [
        _mechanism(
            config,
            d=d,
            m=holder_records_per_round(h.n, config.rounds, reuse=config.reuse),
            delta=delta,
            tau=tau,
            holders=len(holders),
        )
        for h in holders
    ]


def _mechanism_fields(
    mechanism: Mechanism, holder_mechanisms: list[Mechanism] | None
) -> dict[str, Any]:
    """The public parameters; for ``hospital`` those of the largest holder, plus each
    holder's scale and noise std (of its one draw on its sum)."""
    fields: dict[str, Any] = {"noise_std": mechanism.noise_std}
    if holder_mechanisms:
        mechanism = max(holder_mechanisms, key=lambda m: float(getattr(m, "scale", 0.0)))
        fields["noise_std"] = mechanism.noise_std
        fields["holder_scales"] = [float(getattr(m, "scale", math.nan)) for m in holder_mechanisms]
        fields["holder_noise_stds"] = [m.noise_std for m in holder_mechanisms]
    for name in ("scale", "smoothing", "clip"):
        if hasattr(mechanism, name):
            fields[name] = float(getattr(mechanism, name))
    return fields


def _share_fields(
    config: SimulationConfig, mechanism: Mechanism, holders: list[Records], *, d: int, delta: float
) -> dict[str, Any]:
    """For Skellam noise shares (docs/SECAGG.md): t_min, the grid γ, the share's mean λ_s,
    the modulus bits of the aggregation, the ε of the sum with exactly t_min honest shares
    and the fallback ε of one holder's share alone (each at the study's δ)."""
    if not isinstance(mechanism, SecAggSkellam):
        return {}
    participations = config.rounds if config.reuse else 1
    # The most records a round can sum: every holder's largest group (⌊n_k/T⌋ + 1 bounds it).
    most = sum(
        holder_records_per_round(h.n, config.rounds, reuse=config.reuse) + 1 for h in holders
    )
    bits = modulus_bits(
        records=most,
        holders=len(holders),
        bound=mechanism.record_bound(d),
        grid=mechanism.grid,
        share_mean=mechanism.share_mean,
        d=d,
    )
    return {
        "t_min": mechanism.t_min,
        "dropout": config.dropout,
        "grid": mechanism.grid,
        "share_mean": mechanism.share_mean,
        "modulus_bits": bits,
        "sum_epsilon": mechanism.epsilon(
            d, delta=delta, honest=mechanism.t_min, participations=participations
        ),
        "fallback_epsilon": mechanism.fallback_epsilon(
            d, delta=delta, participations=participations
        ),
    }


def simulate(
    config: SimulationConfig,
    on_round: RoundCallback | None = None,
    dataset: Dataset | None = None,
) -> SimulationOutcome:
    """Run the configured gradient EM in-process and return a JSON-able summary.

    ``dataset`` (records and optionally β*) replaces the synthetic data and ``config.data``.
    Returns the fields of ``ldpem simulate --json``: model, mechanism, n, d, epsilon,
    delta, rounds, beta (final), errors (after each round; null without β*), error
    (final), initial_error, seconds, and the mechanism's public parameters.
    """
    started = time.perf_counter()
    _check_config(config)
    model = get_model(config.model)
    rng = study_rng(config.seed)
    data = dataset if dataset is not None else _load(config, model, rng)
    records = add_outliers(data.records, config.outliers, rng)
    n, d = records.n, records.d
    _check_size(n, config)
    delta = study_delta(config.delta, n)
    bound = study_beta_bound(config.beta_bound, snr=config.snr, sigma=config.sigma)
    tau = study_tau(model.name, tau=config.tau, beta_bound=bound, sigma=config.sigma, d=d)
    beta0 = initial_beta(d, config.sigma, rng)
    holders = _split(records, config, rng)
    m = records_per_round([h.n for h in holders], config.rounds, reuse=config.reuse)
    holder_mechanisms = _holder_mechanisms(config, holders, d=d, delta=delta, tau=tau)
    # For hospital the aggregator adds nothing; this instance only names the mechanism.
    mechanism = (
        holder_mechanisms[0]
        if holder_mechanisms
        else _mechanism(config, d=d, m=m, delta=delta, tau=tau, holders=len(holders))
    )
    beta_star = data.beta_star

    def report(t: int, beta: FloatArray) -> None:
        if on_round is not None:
            error = None if beta_star is None else model.error(beta, beta_star)
            on_round(t, beta, error)

    result = run_gradient_em(
        model=model,
        holders=holders,
        sigma=config.sigma,
        mechanism=mechanism,
        rounds=config.rounds,
        beta0=beta0,
        rng=rng,
        eta=config.eta,
        reuse=config.reuse,
        beta_star=beta_star,
        on_round=report,
        holder_mechanisms=holder_mechanisms,
        central=central_noise_for(
            mechanism,
            d=d,
            epsilon=config.epsilon,
            delta=delta,
            accounting=config.accounting,
            participations=config.rounds if config.reuse else 1,
        ),
        dropout=config.dropout,
        dropout_rng=rng,
    )
    known = beta_star is not None
    warning = None if known else _data_warning(config, holders, d=d, delta=delta, tau=tau)
    return {
        "model": model.name,
        "mechanism": config.mechanism,
        "n": n,
        "d": d,
        "epsilon": config.epsilon,
        "delta": delta,
        "rounds": config.rounds,
        "accounting": config.accounting,
        "reuse": config.reuse,
        "hospital_sizes": [h.n for h in holders],
        "records_per_round": m,
        "seed": config.seed,
        "sigma": config.sigma,
        "tau": tau,
        "beta_bound": bound,
        "outliers": config.outliers,
        **_mechanism_fields(mechanism, holder_mechanisms),
        **_share_fields(config, mechanism, holders, d=d, delta=delta),
        "reporters": result.reporters,
        "skipped_rounds": result.skipped,
        "beta": [float(v) for v in result.beta],
        "beta_star": [float(v) for v in beta_star] if beta_star is not None else None,
        "initial_error": model.error(beta0, beta_star) if beta_star is not None else None,
        "errors": [float(e) for e in result.errors] if known else None,
        "error": float(result.errors[-1]) if known else None,
        "warning": warning,
        "seconds": time.perf_counter() - started,
    }


#: Simulations behind the warning of a run on records without a known β*.
WARNING_SEEDS = 2


def _data_warning(
    config: SimulationConfig, holders: list[Records], *, d: int, delta: float, tau: float
) -> str | None:
    """On records without β*, what the planning simulations expect for this size, budget
    and declared ‖β‖ ≤ B: a warning when the mechanism cannot beat β = 0 (``ldpem plan``)."""
    bound = study_beta_bound(config.beta_bound, snr=config.snr, sigma=config.sigma)
    problem = Problem(
        model=config.model,
        d=d,
        sizes=tuple(h.n for h in holders),
        sigma=config.sigma,
        epsilon=config.epsilon,
        delta=delta,
        rounds=config.rounds,
        snr=bound / config.sigma,
        tau=tau,
        zeta=config.zeta,
        accounting=config.accounting,
        clip=config.clip,
        eta=config.eta,
    )
    errors = final_errors(problem, config.mechanism, WARNING_SEEDS, max_records=200_000)
    expected = float(np.mean(errors))
    if expected <= problem.useful_error:
        return None
    return (
        f"on synthetic {config.model} data of this size with ‖β*‖ = {bound:g}, mechanism "
        f"{config.mechanism} reaches a mean error of {expected:.3g}, not below half the error "
        f"of the trivial estimate β = 0 ({problem.trivial_error:.3g}): this estimate is "
        "probably no better than β = 0; see `ldpem plan` for what would be"
    )
