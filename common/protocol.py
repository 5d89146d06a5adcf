"""The round protocol of a federated run: one place for each of its ideas.

The coordinator (``ldpem.server.coordinator``), the hospital agent (``ldpem.client.agent``),
the in-process simulator (``ldpem.common.simulation``, ``ldpem simulate``), the planner and
the forecast stated at run creation (``ldpem.common.planning``, ``ldpem.server.forecast``)
and the tests' offline replay all call the functions below; none derives these quantities
itself (``tests/test_one_protocol.py`` checks the code for copies). So the simulator is the
exact model of the deployment: given the same records, seeds and partition it reproduces a
federated run's trajectory bit for bit (``tests/cli/test_simulate_equals_federated.py``).

Study defaults (what a run uses when the operator does not say):

* δ = min(n^-1.1, 0.5), n the records of the whole study (``study_delta``; 0.5 is the
  largest δ an agent accepts);
* B, the declared bound on ‖β‖₂: snr·σ; τ: ``calibration.default_tau`` of B
  (``study_beta_bound``, ``study_tau``);
* m, the records per round that set the scale s of Algorithm 2: ⌊Σ nᵢ / T⌋ (at least 1),
  all Σ nᵢ when records are reused every round (``records_per_round``); under
  ``hospital``, holder k's own m_k = ⌊n_k / T⌋ (``holder_records_per_round``);
* β⁰: a random direction of norm σ (β = 0 is a fixed point of the symmetric models);
  a run draws it from its seed (``run_start``), a simulation from its generator
  (``initial_beta``).

Mechanisms (docs/MATH.md 3, 5, 6): ``holder_mechanism`` is what a data holder runs, from
the run's public parameters, its enrolled count and its OWN budget; the coordinator's
record bound, sensitivity and noise floor come from the same function
(``holder_contribution``, ``report_sensitivity``, ``holder_noise_std``).
``make_mechanism`` builds the mechanism of a simulated study from its budget. Every
mechanism object of the code base is built here (``_assemble``).

The aggregate and the M-step (``m_step``): the correctly rounded sum of the reports'
totals (``math.fsum`` per coordinate, so the order in which reports arrive cannot change
a bit of β), divided by the round's record count, plus the central noise, times η.

**Central noise is calibrated on the actual count of the round** (``CentralNoise.std``):
the aggregator releases the average of the records that reported in THIS round, whose
replace-one sensitivity is Δ/count. Calibrating on the nominal m would under-noise every
round with fewer records than m — a round closed at quorum, or the smaller rounds of an
uneven partition — and break the published (ε, δ); calibrating on the count costs nothing
when count ≥ m. The simulator does the same, so both draw the same σ_r in every round.

Random streams (``FederatedStreams``): an agent partitions its records with
``partition_rng(seed, run)`` and draws round t's noise from ``noise_rng(seed, run, t)``
(a fresh OS seed unless a research ``--seed`` is given); the coordinator draws round t's
central noise from ``central_rng(run seed, t)``. The simulator's default
(``SharedStream``) is one generator for everything.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common._validation import check_count, check_open_unit, check_positive
from ldpem.common.accounting import DEFAULT_ACCOUNTING, noise_std_for
from ldpem.common.calibration import (
    DEFAULT_ZETA,
    central_scale,
    default_tau,
    local_scale,
    round_epsilon_tilde,
    smoothing_precision,
    truncation_sensitivity,
)
from ldpem.common.mechanisms import (
    MECHANISM_NAMES,
    CentralClipped,
    CentralTruncation,
    HospitalTruncation,
    LocalClipped,
    LocalTruncation,
    Mechanism,
    NoPrivacy,
)
from ldpem.common.wire import PublicParameters, RunCreate

__all__ = [
    "DELTA_EXPONENT",
    "DELTA_MAX",
    "CentralNoise",
    "FederatedStreams",
    "SharedStream",
    "Step",
    "Streams",
    "aggregate",
    "central_noise",
    "central_noise_for",
    "central_rng",
    "holder_contribution",
    "holder_mechanism",
    "holder_noise_std",
    "holder_records_per_round",
    "holder_scale",
    "hospital_scale",
    "initial_beta",
    "local_noise_std",
    "m_step",
    "make_mechanism",
    "noise_rng",
    "partition_rng",
    "privacy_ratio",
    "public_parameters",
    "public_scale",
    "records_per_round",
    "report_sensitivity",
    "run_digest",
    "run_start",
    "study_beta_bound",
    "study_delta",
    "study_rng",
    "study_tau",
]

FloatArray = NDArray[np.float64]

# --- study defaults -------------------------------------------------------------------

#: δ = n^-DELTA_EXPONENT per record when the study does not fix it (the paper's choice).
DELTA_EXPONENT = 1.1
#: The largest δ: an agent refuses a run whose δ is above it (docs/PRIVACY.md).
DELTA_MAX = 0.5
#: Generator keys of a run's start and of its central noise (with the run's seed).
_START_KEY = 0xB0
_CENTRAL_KEY = 0xCE


def study_delta(delta: float | None, records: int) -> float:
    """δ per record: ``delta``, or n^-1.1 for the study's ``records`` records; at most
    ``DELTA_MAX``."""
    records = check_count("records", records)
    value = delta if delta is not None else float(records) ** -DELTA_EXPONENT
    return check_open_unit("delta", min(value, DELTA_MAX))


def study_beta_bound(beta_bound: float | None, *, snr: float, sigma: float) -> float:
    """The declared bound B on ‖β‖₂: ``beta_bound``, or snr·σ."""
    return beta_bound if beta_bound is not None else snr * sigma


def study_tau(model: str, *, tau: float | None, beta_bound: float, sigma: float, d: int) -> float:
    """τ: ``tau``, or ``calibration.default_tau`` of the declared bound B = ``beta_bound``."""
    if tau is not None:
        return tau
    return default_tau(model, beta_bound=beta_bound, sigma=sigma, d=d)


def records_per_round(sizes: Sequence[int], rounds: int, *, reuse: bool = False) -> int:
    """m of a study whose holders have ``sizes`` records: ⌊Σ sizes / rounds⌋ (at least 1),
    or Σ sizes when every record reports every round. It sets the scale s only: the
    central noise is calibrated on each round's actual count (module docstring).

    Parameters
    ----------
    sizes : sequence of int of length K
        Records of each of the K holders (each ≥ 1).
    rounds : int
        T, the number of rounds (≥ 1).
    reuse : bool
        Whether every record reports in every round.

    Returns
    -------
    int
        m ≥ 1.
    """
    rounds = check_count("rounds", rounds)
    total = sum(check_count("records", size) for size in sizes)
    return total if reuse else max(1, total // rounds)


def holder_records_per_round(records: int, rounds: int, *, reuse: bool = False) -> int:
    """m_k, the records a holder with ``records`` records reports in its smallest round:
    ⌊records/rounds⌋ partitioned (at least 1), all of them with ``reuse``."""
    records = check_count("records", records)
    rounds = check_count("rounds", rounds)
    return records if reuse else max(1, records // rounds)


def initial_beta(d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
    """β⁰: a uniformly random direction of norm σ (β = 0 is a fixed point of the symmetric
    models). Draws d standard normals from ``rng``.

    Parameters
    ----------
    d : int
        Dimension (≥ 1).
    sigma : float
        The model's noise std σ, the norm of β⁰.
    rng : numpy.random.Generator
        The study's or run's generator.

    Returns
    -------
    beta0 : array of shape (d,)
    """
    start = rng.standard_normal(check_count("d", d))
    beta0: FloatArray = start / np.linalg.norm(start) * sigma
    return beta0


def run_start(seed: int, d: int, sigma: float) -> FloatArray:
    """β⁰ of a run created with ``seed`` (the coordinator's): ``initial_beta`` of shape (d,)
    with norm σ = ``sigma``, the model's noise std."""
    return initial_beta(d, sigma, np.random.default_rng([seed, _START_KEY]))


def study_rng(seed: int) -> np.random.Generator:
    """The one generator of a simulated study with ``seed`` (``ldpem simulate``, the
    planner and the forecast): data, β⁰, the split over holders, then the run."""
    return np.random.default_rng(seed)


# --- random streams -------------------------------------------------------------------


def run_digest(run_id: str) -> int:
    """The full SHA-256 of a run id as an integer (256 bits)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest(), 16)


def partition_rng(seed: int, run_id: str) -> np.random.Generator:
    """The generator of a run's partition: the agent's partition seed and the run id."""
    return np.random.default_rng([seed, run_digest(run_id)])


def noise_rng(seed: int | None, run_id: str, t: int) -> np.random.Generator:
    """The generator of one report's noise: a fresh 256-bit seed from the operating system,
    never derived from stored state, the run or the round; with a research ``seed``, the
    reproducible stream of (seed, run, round), which voids the privacy guarantee."""
    if seed is None:
        return np.random.default_rng(int.from_bytes(os.urandom(32), "big"))
    return np.random.default_rng([seed, run_digest(run_id), t])


def central_rng(run_seed: int, t: int) -> np.random.Generator:
    """The generator of the coordinator's central noise in round ``t`` of a run."""
    return np.random.default_rng([run_seed, _CENTRAL_KEY, t])


class Streams(Protocol):
    """Where each random draw of a run comes from."""

    def partition(self, holder: int) -> np.random.Generator: ...

    def noise(self, holder: int, t: int) -> np.random.Generator: ...

    def central(self, t: int) -> np.random.Generator: ...


@dataclass(frozen=True)
class SharedStream:
    """One generator for every draw, in the order: partitions, then per round the holders'
    noise and the central noise (the simulator's default)."""

    rng: np.random.Generator

    def partition(self, holder: int) -> np.random.Generator:
        return self.rng

    def noise(self, holder: int, t: int) -> np.random.Generator:
        return self.rng

    def central(self, t: int) -> np.random.Generator:
        return self.rng


@dataclass(frozen=True)
class FederatedStreams:
    """The draws of a federated run ``run_id`` whose agents were started with the research
    ``seeds`` (one per holder, in holder order) and whose coordinator has ``run_seed``."""

    run_id: str
    seeds: Sequence[int]
    run_seed: int = 0

    def partition(self, holder: int) -> np.random.Generator:
        return partition_rng(self.seeds[holder], self.run_id)

    def noise(self, holder: int, t: int) -> np.random.Generator:
        return noise_rng(self.seeds[holder], self.run_id, t)

    def central(self, t: int) -> np.random.Generator:
        return central_rng(self.run_seed, t)


# --- mechanisms -----------------------------------------------------------------------


def _assemble(
    name: str,
    *,
    noise_std: float,
    scale: float | None = None,
    smoothing: float | None = None,
    clip: float | None = None,
) -> Mechanism:
    """The mechanism ``name`` with these parameters: the one place mechanisms are built."""
    if name == "none":
        return NoPrivacy()
    if name in ("local-clip", "central-clip"):
        assert clip is not None
        kind_clip = LocalClipped if name == "local-clip" else CentralClipped
        return kind_clip(clip=clip, noise_std=noise_std)
    assert scale is not None and smoothing is not None
    kinds = {"local": LocalTruncation, "hospital": HospitalTruncation}
    kind = kinds.get(name, CentralTruncation)
    return kind(scale=scale, smoothing=smoothing, noise_std=noise_std)


def _record_sensitivity(mechanism: Mechanism, d: int) -> float:
    """L2 sensitivity of one record's contribution (replace-one): 2·b(β_s)·s·√d for the
    truncations (``calibration.truncation_sensitivity``), 2C when clipped, inf for none."""
    if isinstance(mechanism, LocalTruncation):
        return truncation_sensitivity(mechanism.scale, d, smoothing=mechanism.smoothing)
    return mechanism.sensitivity(d)


@lru_cache(maxsize=1024)
def _noise_std(
    epsilon: float, delta: float, sensitivity: float, accounting: str, participations: int
) -> float:
    # Cached: the exact accounting solves for a root, and every report of a run asks again.
    return noise_std_for(
        epsilon=epsilon,
        delta=delta,
        sensitivity=sensitivity,
        participations=participations,
        accounting=accounting,
    )


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
    """The truncation scale s of Algorithm 2 for the ``local``, ``central`` or ``hospital``
    mechanism. ``hospital`` uses the central rule with m = ``records_per_round`` the
    records ONE holder reports per round (``holder_records_per_round``), so each holder
    has its own scale, computable from the run's public values and its enrolled count."""
    if mechanism not in ("local", "central", "hospital"):
        raise ValueError(
            f"mechanism must be 'local', 'central' or 'hospital' for a scale, got {mechanism!r}"
        )
    eps_tilde = round_epsilon_tilde(epsilon, delta, participations)
    scale_fn = local_scale if mechanism == "local" else central_scale
    return scale_fn(records=records_per_round, tau=tau, eps_tilde=eps_tilde, d=d, zeta=zeta)


def hospital_scale(
    *,
    records: int,
    rounds: int,
    d: int,
    epsilon: float,
    delta: float,
    tau: float,
    zeta: float = DEFAULT_ZETA,
) -> float:
    """The scale s_k of a holder enrolled with ``records`` records in a partitioned run of
    the ``hospital`` mechanism: Algorithm 2's central rule with m_k = ⌊records/rounds⌋, at
    the run's public (ε, δ). The holder and the coordinator both compute it from public
    values and the enrolled count, so it need not be sent (docs/HOSPITAL.md)."""
    return public_scale(
        "hospital",
        d=d,
        records_per_round=holder_records_per_round(records, rounds),
        epsilon=epsilon,
        delta=delta,
        tau=tau,
        zeta=zeta,
    )


def local_noise_std(
    *,
    scale: float,
    smoothing: float,
    d: int,
    epsilon: float,
    delta: float,
    participations: int = 1,
    accounting: str = DEFAULT_ACCOUNTING,
) -> float:
    """σ_r of each local report of T(·) at scale s so that ``participations`` reports of one
    record are together (ε, δ)-DP. It is also the σ_r of the hospital-level mechanism's one
    draw on a holder's sum: replacing one record moves that sum by at most as much as it
    moves the record's own report."""
    return _noise_std(
        epsilon,
        delta,
        truncation_sensitivity(scale, d, smoothing=smoothing),
        accounting,
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
        """One draw N(0, σ_r² I_d), σ_r = ``std(count)``, for a round of ``count`` records.

        Parameters
        ----------
        count : int
            Records that reported in the round (≥ 1).
        d : int
            Dimension.
        rng : numpy.random.Generator
            The coordinator's central-noise stream of the round (``central_rng``).

        Returns
        -------
        noise : array of shape (d,)
        """
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
    """The aggregator's noise for ``mechanism`` (None unless it is central)."""
    if mechanism.is_local:
        return None
    return CentralNoise(
        sensitivity=_record_sensitivity(mechanism, d),
        epsilon=epsilon,
        delta=delta,
        accounting=accounting,
        participations=participations,
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
) -> Mechanism:
    """The mechanism of a simulated study, calibrated so that each record, over its
    ``participations`` rounds, is (ε, δ)-DP under ``accounting``.

    ``records_per_round`` is m (``records_per_round``): it sets s in Algorithm 2 and, for
    central mechanisms, the σ_r shown as ``noise_std`` (that of a round of m records; the
    M-step calibrates on each round's count, ``central_noise_for``); for ``hospital`` it
    is m_k, the records of ONE holder per round, and the mechanism is that holder's.
    ``scale`` overrides s.
    """
    if name not in MECHANISM_NAMES:
        raise ValueError(f"mechanism must be one of {MECHANISM_NAMES}, got {name!r}")
    d = check_count("d", d)
    records_per_round = check_count("records_per_round", records_per_round)
    if name == "none":
        return NoPrivacy()
    if epsilon is None or delta is None:
        raise ValueError(f"mechanism {name!r} needs epsilon and delta")
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    participations = check_count("participations", participations)
    if name in ("local-clip", "central-clip"):
        shape = _assemble(name, clip=check_positive("clip", clip), noise_std=0.0)
    else:
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
        shape = _assemble(name, scale=scale, smoothing=smoothing_precision(d, zeta), noise_std=0.0)
    central = central_noise_for(
        shape,
        d=d,
        epsilon=epsilon,
        delta=delta,
        accounting=accounting,
        participations=participations,
    )
    if central is not None:
        noise = central.std(records_per_round)
    else:
        noise = _noise_std(
            epsilon, delta, _record_sensitivity(shape, d), accounting, participations
        )
    return _with_noise(shape, noise)


def _with_noise(shape: Mechanism, noise_std: float) -> Mechanism:
    return _assemble(
        shape.name,
        noise_std=noise_std,
        scale=getattr(shape, "scale", None),
        smoothing=getattr(shape, "smoothing", None),
        clip=getattr(shape, "clip", None),
    )


def holder_scale(
    params: PublicParameters, records: int, *, mechanism: str | None = None
) -> float | None:
    """The scale a holder enrolled with ``records`` records truncates with: the published s,
    or for ``hospital`` without one, its own s_k (``hospital_scale``). ``mechanism``
    overrides the run's."""
    name = params.mechanism if mechanism is None else mechanism
    if name == "hospital" and params.scale is None:
        return hospital_scale(
            records=records,
            rounds=params.rounds,
            d=params.d,
            epsilon=params.epsilon,
            delta=params.delta,
            tau=params.tau,
            zeta=params.zeta,
        )
    return params.scale


def holder_contribution(
    params: PublicParameters, records: int, *, mechanism: str | None = None
) -> Mechanism:
    """The mechanism a holder enrolled with ``records`` records runs under ``params``
    (``mechanism`` overrides its name), without its noise: what fixes each record's
    contribution, its bound and its sensitivity. β_s is recomputed from d and ζ, never
    taken from the published value. ValueError when the run publishes no scale (local,
    central) or clip norm (local-clip) its mechanism needs."""
    name = params.mechanism if mechanism is None else mechanism
    if name == "none":
        return NoPrivacy()
    if name == "local-clip":
        if params.clip is None:
            raise ValueError("the run publishes mechanism local-clip without a clip norm")
        return _assemble(name, clip=params.clip, noise_std=0.0)
    if name not in ("local", "central", "hospital"):
        raise ValueError(f"mechanism {name!r} is not one of a federated run")
    scale = holder_scale(params, records, mechanism=name)
    if scale is None:
        raise ValueError(f"the run publishes mechanism {name} without a scale s")
    smoothing = smoothing_precision(params.d, params.zeta)
    return _assemble(name, scale=scale, smoothing=smoothing, noise_std=0.0)


def report_sensitivity(
    params: PublicParameters, records: int, *, mechanism: str | None = None
) -> float | None:
    """Δ of one record in the report of a holder enrolled with ``records`` records; None
    when that report carries no noise of the holder's (central, none)."""
    if (params.mechanism if mechanism is None else mechanism) in ("central", "none"):
        return None
    return _record_sensitivity(holder_contribution(params, records, mechanism=mechanism), params.d)


def holder_noise_std(
    params: PublicParameters,
    records: int,
    *,
    epsilon: float,
    delta: float,
    accounting: str,
    mechanism: str | None = None,
) -> float:
    """σ_r of the report of a holder enrolled with ``records`` records at the budget
    (``epsilon``, ``delta``) under ``accounting`` (for ``hospital``: of its one draw on
    its sum); 0 when the report carries no holder noise (central, none)."""
    sensitivity = report_sensitivity(params, records, mechanism=mechanism)
    if sensitivity is None:
        return 0.0
    return _noise_std(epsilon, delta, sensitivity, accounting, 1)


def holder_mechanism(
    params: PublicParameters, *, records: int, epsilon: float, delta: float, accounting: str
) -> Mechanism:
    """The mechanism a data holder enrolled with ``records`` records runs in the run of
    ``params``, its noise calibrated from the holder's OWN budget (``epsilon``, ``delta``,
    ``accounting``), never from a σ_r the coordinator chose. Central mechanisms carry no
    holder noise (the aggregator adds it, ``central_noise``)."""
    shape = holder_contribution(params, records)
    noise = holder_noise_std(params, records, epsilon=epsilon, delta=delta, accounting=accounting)
    return shape if noise == 0.0 else _with_noise(shape, noise)


def privacy_ratio(mechanism: Mechanism, d: int) -> float:
    """μ = Δ/σ_r of one record in a holder's report under ``mechanism`` (∞ when the report
    is not locally private: central, none)."""
    if not mechanism.is_local or isinstance(mechanism, NoPrivacy):
        return math.inf
    return mechanism.sensitivity(d) / mechanism.noise_std


def central_noise(params: PublicParameters) -> CentralNoise | None:
    """The coordinator's noise in a run of ``params`` (None unless the mechanism is
    central), at the run's published budget."""
    if params.mechanism != "central":
        return None
    return central_noise_for(
        holder_contribution(params, params.records_per_round),
        d=params.d,
        epsilon=params.epsilon,
        delta=params.delta,
        accounting=params.accounting,
    )


def public_parameters(request: RunCreate) -> PublicParameters:
    """The public mechanism parameters of a run, from its request and the study defaults."""
    sizes = [h.records for h in request.hospitals]
    total = sum(sizes)
    m = records_per_round(sizes, request.rounds)
    delta = study_delta(request.delta, total)
    bound = study_beta_bound(request.beta_bound, snr=request.snr, sigma=request.sigma)
    tau = study_tau(
        request.model, tau=request.tau, beta_bound=bound, sigma=request.sigma, d=request.d
    )
    scale: float | None = None
    smoothing: float | None = None
    clip: float | None = None
    if request.mechanism in ("local", "central"):
        scale = (
            request.scale
            if request.scale is not None
            else public_scale(
                request.mechanism,
                d=request.d,
                records_per_round=m,
                epsilon=request.epsilon,
                delta=delta,
                tau=tau,
                zeta=request.zeta,
            )
        )
        smoothing = smoothing_precision(request.d, request.zeta)
    elif request.mechanism == "hospital":
        # Each holder derives its own s_k from its enrolled count (hospital_scale) unless
        # the operator fixed one s for all.
        scale = request.scale
        smoothing = smoothing_precision(request.d, request.zeta)
    elif request.mechanism == "local-clip":
        clip = request.clip
    return PublicParameters(
        model=request.model,
        d=request.d,
        sigma=request.sigma,
        rounds=request.rounds,
        eta=request.eta,
        mechanism=request.mechanism,
        epsilon=request.epsilon,
        delta=delta,
        accounting=request.accounting,
        tau=tau,
        zeta=request.zeta,
        scale=scale,
        smoothing=smoothing,
        clip=clip,
        records_per_round=m,
    )


# --- the aggregate and the M-step ----------------------------------------------------


def aggregate(totals: Sequence[ArrayLike], counts: Sequence[int]) -> tuple[FloatArray, int]:
    """Σ of the reports' totals and of their counts. Each coordinate is the correctly
    rounded sum (``math.fsum``), which does not depend on the order of the reports; ±inf
    or NaN when the sum leaves the float range (the caller checks).

    Parameters
    ----------
    totals : sequence of K array-likes of shape (d,)
        The reports' totals (an array of shape (K, d) works too).
    counts : sequence of K int
        The reports' record counts.

    Returns
    -------
    total : array of shape (d,)
        Σ totals.
    count : int
        Σ counts.
    """
    rows = np.asarray(totals, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"totals must be a (reports, d) array, got shape {rows.shape}")
    try:
        total = np.array([math.fsum(column) for column in rows.T], dtype=np.float64)
    except (OverflowError, ValueError):  # a sum beyond the float range, or inf − inf
        with np.errstate(over="ignore", invalid="ignore"):
            total = rows.sum(axis=0)
    return total, sum(int(c) for c in counts)


@dataclass(frozen=True)
class Step:
    """One M-step: β^{t+1} (d,), the round's record count, the central noise drawn (or None)."""

    beta: FloatArray
    count: int
    noise: FloatArray | None


def m_step(
    beta: ArrayLike,
    totals: Sequence[ArrayLike],
    counts: Sequence[int],
    *,
    eta: float,
    central: CentralNoise | None = None,
    rng: np.random.Generator | None = None,
) -> Step:
    """β^{t+1} = β^t + η·(Σ totals / Σ counts + central noise) (docs/MATH.md 1).

    Overflow gives non-finite entries, not an exception: the caller decides (the
    coordinator fails the run).

    Parameters
    ----------
    beta : array-like of shape (d,)
        β^t.
    totals : sequence of K array-likes of shape (d,)
        The round's reported totals.
    counts : sequence of K int
        Their record counts.
    eta : float
        η, the step size.
    central : CentralNoise, optional
        The aggregator's noise (central mechanisms), drawn from ``rng`` with σ_r
        calibrated on this round's count.
    rng : numpy.random.Generator, optional
        Required with ``central``.

    Returns
    -------
    Step
        ``beta`` β^{t+1} of shape (d,), ``count`` Σ counts, ``noise`` the central noise
        drawn, shape (d,), or None.
    """
    start = np.asarray(beta, dtype=np.float64)
    total, count = aggregate(totals, counts)
    noise: FloatArray | None = None
    if central is not None:
        if rng is None:
            raise ValueError("central noise needs a generator")
        noise = central.draw(count, start.size, rng)
    with np.errstate(over="ignore", invalid="ignore"):
        gradient = total / count
        if noise is not None:
            gradient = gradient + noise
        step: FloatArray = start + eta * gradient
    return Step(beta=step, count=count, noise=noise)
