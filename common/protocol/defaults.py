"""Study defaults: what a run or a simulated study uses when the operator does not say.

* δ = min(n^-1.1, 0.5), n the records of the whole study (``study_delta``; 0.5 is the
  largest δ an agent accepts);
* B, the declared bound on ‖β‖₂: snr·σ; τ: the model's ``default_tau`` of B
  (``study_beta_bound``, ``study_tau``);
* m, the records per round that set the scale s of Algorithm 2: ⌊Σ nᵢ / T⌋ (at least 1),
  all Σ nᵢ when records are reused every round (``records_per_round``); a holder's own
  m_k = ⌊n_k / T⌋ (``holder_records_per_round``);
* t_min and c, for noise shares (docs/SECAGG.md, "The threat model"): a round's sum holds
  at least t_min = K − ⌊K/10⌋ holders (10% may drop out), of whom at most c may collude
  with the coordinator, c the largest value ≤ ⌊K/3⌋ with c < 2·t_min − K (the mask
  security bound); the noise is sized for the t_min − c honest shares, at the price of
  about K/(t_min − c) ≈ 1.8 times the central noise variance when all report
  (``study_t_min``, ``study_colluders``);
* β⁰: the model's public start rule (``Model.start``; by default a random direction of
  norm σ, as β = 0 is a fixed point of the symmetric models); a run draws it from its
  seed (``run_start``), a simulation from its generator (``initial_beta``). A model whose
  start reads data makes round 0 its private start round (``start_round``).

A run's model is its registered model with the run's declared options set
(``configured_model``), and its β has ``parameter_size`` coordinates: d for the paper's
models, K·(d + 1) for a mixture. Every check and calibration of β asks these two, never
d.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_open_unit
from ldpem.common.models import Model, get_model
from ldpem.common.models.base import random_direction

__all__ = [
    "DELTA_EXPONENT",
    "DELTA_MAX",
    "ConfiguredRun",
    "configured_model",
    "holder_records_per_round",
    "initial_beta",
    "parameter_size",
    "records_per_round",
    "run_start",
    "start_finish",
    "start_round",
    "study_beta_bound",
    "study_colluders",
    "study_delta",
    "study_rng",
    "study_t_min",
    "study_tau",
]

FloatArray = NDArray[np.float64]

#: δ = n^-DELTA_EXPONENT per record when the study does not fix it (the paper's choice).
DELTA_EXPONENT = 1.1
#: The largest δ: an agent refuses a run whose δ is above it (docs/PRIVACY.md).
DELTA_MAX = 0.5
#: Generator key of a run's start (with the run's seed).
_START_KEY = 0xB0


def study_delta(delta: float | None, records: int) -> float:
    """δ per record: ``delta``, or n^-1.1 for the study's ``records`` records; at most
    ``DELTA_MAX``."""
    records = check_count("records", records)
    value = delta if delta is not None else float(records) ** -DELTA_EXPONENT
    return check_open_unit("delta", min(value, DELTA_MAX))


def study_beta_bound(beta_bound: float | None, *, snr: float, sigma: float) -> float:
    """The declared bound B on ‖β‖₂: ``beta_bound``, or snr·σ."""
    return beta_bound if beta_bound is not None else snr * sigma


class ConfiguredRun(Protocol):
    """What configures a run's model: its name, its declared options and the records'
    dimension (a run request, its public parameters, a study's public values)."""

    @property
    def model(self) -> str: ...
    @property
    def model_options(self) -> Mapping[str, int]: ...
    @property
    def d(self) -> int: ...


def configured_model(run: ConfiguredRun) -> Model:
    """The model of ``run``: the registered ``run.model`` with ``run.model_options`` set
    (``Model.configured``). ValueError, one line, naming an unknown model or option or a
    value out of its declared range."""
    return get_model(run.model, dict(run.model_options))


def parameter_size(run: ConfiguredRun) -> int:
    """p, the size of β of ``run``: its model's ``parameter_dim`` of the records' d (d for
    the paper's models, K·(d + 1) for a mixture): the coordinates β⁰, every β^t, every
    report and every mechanism's bound and calibration have."""
    return configured_model(run).parameter_dim(run.d)


def _model(model: str | Model) -> Model:
    """A registered model's name, or a model instance (one configured with its options)."""
    return model if isinstance(model, Model) else get_model(model)


def study_tau(
    model: str | Model, *, tau: float | None, beta_bound: float, sigma: float, d: int
) -> float:
    """τ: ``tau``, or the model's ``default_tau`` of the declared bound B = ``beta_bound``."""
    if tau is not None:
        return tau
    return _model(model).default_tau(beta_bound=beta_bound, sigma=sigma, d=d)


def study_t_min(t_min: int | None, holders: int) -> int:
    """t_min of a study with ``holders`` holders K: ``t_min`` (1 ≤ t_min ≤ K), or
    K − ⌊K/10⌋: a round survives 10% of its holders dropping out, and for K ≥ 2 it is more
    than K/2 (the secure aggregation's least, docs/SECAGG.md), so that c ≈ K/3 colluders
    stay below 2·t_min − K (``study_colluders``). ValueError naming a value out of range."""
    holders = check_count("holders", holders)
    if t_min is None:
        return holders - holders // 10
    t_min = check_count("t_min", t_min)
    if t_min > holders:
        raise ValueError(f"t_min must be at most the {holders} holders, got {t_min}")
    return t_min


def study_colluders(colluders: int | None, holders: int, t_min: int) -> int:
    """c of a study with K = ``holders`` holders and threshold ``t_min``: ``colluders``, or
    the largest c ≤ ⌊K/3⌋ with c < 2·t_min − K (0 when t_min ≤ K/2, a simulation's choice
    the secure aggregation itself refuses). ValueError when a given c breaks c < 2·t_min − K
    (a coordinator with c + 1 holders could unmask one input) or is negative."""
    most = max(0, 2 * t_min - holders - 1)
    if colluders is None:
        return min(holders // 3, most)
    if isinstance(colluders, bool) or not isinstance(colluders, int) or colluders < 0:
        raise ValueError(f"colluders must be an integer >= 0, got {colluders!r}")
    if colluders > most:
        raise ValueError(
            f"colluders must be below 2·t_min − K = {2 * t_min - holders} (t_min {t_min}, "
            f"K {holders}), got {colluders}"
        )
    return colluders


def records_per_round(sizes: Sequence[int], rounds: int, *, reuse: bool = False) -> int:
    """m of a study whose holders have ``sizes`` records: ⌊Σ sizes / rounds⌋ (at least 1),
    or Σ sizes when every record reports every round. It sets the scale s only: the
    central noise is calibrated on each round's actual count (``ldpem.common.protocol``).

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


def initial_beta(
    d: int, sigma: float, rng: np.random.Generator, *, model: str | Model | None = None
) -> FloatArray:
    """β⁰ of shape (p,), p = ``Model.parameter_dim(d)`` (d for the paper's models), by the
    start rule of ``model`` (``Model.start``; the default rule, a uniformly random
    direction of norm σ, when None), drawn from ``rng``.

    Parameters
    ----------
    d : int
        Dimension (≥ 1).
    sigma : float
        The model's noise std σ (the norm of the default β⁰).
    rng : numpy.random.Generator
        The study's or run's generator.
    model : str or Model, optional
        The registered model (or a configured instance) whose rule it is.

    Returns
    -------
    beta0 : array of shape (p,)
    """
    if model is None:
        return random_direction(d, sigma, rng)
    d = check_count("d", d)
    chosen = _model(model)
    size = chosen.parameter_dim(d)
    beta0 = np.asarray(chosen.start(d, sigma, rng), dtype=np.float64)
    if beta0.shape != (size,) or not np.all(np.isfinite(beta0)):
        raise ValueError(f"model {chosen.name}'s start rule must give {size} finite values")
    return beta0


def run_start(seed: int, d: int, sigma: float, *, model: str | Model | None = None) -> FloatArray:
    """β⁰ of a run created with ``seed`` (the coordinator's): ``initial_beta`` of shape (p,)
    by ``model``'s start rule (the run's ``configured_model``), from the run's start
    stream."""
    return initial_beta(d, sigma, np.random.default_rng([seed, _START_KEY]), model=model)


def start_round(model: str | Model, t: int) -> bool:
    """Whether round ``t`` of a run of ``model`` is its start round: round 0 when the
    model's start reads data (``Model.start_reads_data``). It is privatized by the run's
    mechanism, takes its share of the records and is charged like every round."""
    return t == 0 and _model(model).start_reads_data


def start_finish(
    model: str | Model, sigma: float, t: int
) -> Callable[[FloatArray], FloatArray] | None:
    """The M-step's ``start_from`` in round ``t`` of a run of ``model`` with noise std
    ``sigma``: the model's, in its start round (``start_round``); None otherwise."""
    if not start_round(model, t):
        return None
    return partial(_model(model).start_from, sigma=sigma)


def study_rng(seed: int) -> np.random.Generator:
    """The one generator of a simulated study with ``seed`` (``ldpem simulate``, the
    planner and the forecast): data, β⁰, the split over holders, then the run."""
    return np.random.default_rng(seed)
