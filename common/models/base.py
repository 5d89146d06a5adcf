"""Records and the pieces every model shares: the error metric and the model base class."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.models._synthetic import true_parameter

__all__ = [
    "DEFAULT_START",
    "Draw",
    "FloatArray",
    "Model",
    "ModelOption",
    "Records",
    "estimation_error",
    "random_direction",
    "tau_spread",
]

FloatArray = NDArray[np.float64]
#: The name of the default start rule (``random_direction``), in a run's public parameters.
DEFAULT_START = "random-direction"


@dataclass(frozen=True)
class Records:
    """A batch of n records of dimension d.

    x : (n, d) float64. GMM: the observations y_i. MRM/RMC: the covariates x_i
        (RMC: NaN marks a missing covariate).
    y : (n,) float64 response for MRM/RMC; None for GMM.
    """

    x: FloatArray
    y: FloatArray | None = None

    def __post_init__(self) -> None:
        if self.x.ndim != 2:
            raise ValueError(f"x must be an (n, d) array, got shape {self.x.shape}")
        if self.y is not None and self.y.shape != (self.x.shape[0],):
            raise ValueError(
                f"y must have shape ({self.x.shape[0]},) to match x, got {self.y.shape}"
            )

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def d(self) -> int:
        return int(self.x.shape[1])

    def __len__(self) -> int:
        return self.n

    def take(self, index: NDArray[np.intp] | slice) -> Records:
        """The records at ``index`` (an index array or a slice), as a new Records.

        Parameters
        ----------
        index : array of int of shape (k,), or slice
            Rows to take.

        Returns
        -------
        Records
            k records: ``x`` of shape (k, d), ``y`` of shape (k,) or None.
        """
        return Records(self.x[index], None if self.y is None else self.y[index])


def estimation_error(beta: FloatArray, beta_star: FloatArray, *, sign_invariant: bool) -> float:
    """‖β − β*‖₂, or min(‖β − β*‖₂, ‖β + β*‖₂) when the sign of β is not identifiable.

    Parameters
    ----------
    beta, beta_star : array of shape (d,)
        The estimate and the true parameter.
    sign_invariant : bool
        Whether β and −β describe the same model (GMM, MRM).

    Returns
    -------
    float
        The error, ≥ 0.
    """
    error = float(np.linalg.norm(beta - beta_star))
    if sign_invariant:
        error = min(error, float(np.linalg.norm(beta + beta_star)))
    return error


@dataclass(frozen=True)
class Draw:
    """What ``Model.sample_records`` draws from: n records at β*, noise std σ, a share
    ``missing`` of missing covariates, and the one generator."""

    n: int
    beta_star: FloatArray
    sigma: float
    missing: float
    rng: np.random.Generator


def tau_spread(*, beta_bound: float, sigma: float, d: int) -> float:
    """B²/d + σ²: the part of the default τ every model shares.

    The paper's lemmas give τ only up to constants and in terms of ‖β*‖∞ (GMM, Lemma 4) or
    ‖β*‖₂ (MRM, Lemma 6; RMC, Lemma 8). Users rarely know ‖β*‖∞, and the lemmas' worst cases
    are loose by an order of magnitude at the parameters the EM visits, which costs accuracy
    (the local error grows like √τ). The rule takes each lemma's leading term with ‖β*‖∞²
    replaced by its value for a vector of norm B spread over d coordinates, B²/d; each
    model adds its own terms in ``Model.default_tau``.
    Checked by sweeping τ over {¼, ½, 1, 2}× the defaults (local mechanism, n = 2·10⁵,
    d = 10, SNR 3, ε = 1, T = 10, seeds 0–9, 2026-11-25): GMM 0.536 / **0.459** / 0.549;
    MRM 2.83 / 2.59 / 2.35 / **2.37** / 2.66; RMC 1.88 / 1.35 / 1.05 / **1.11** / 1.45
    (bold: the default), the best or within 6% of the best τ tried."""
    beta_bound = check_positive("beta_bound", beta_bound)
    sigma = check_positive("sigma", sigma)
    d = check_count("d", d)
    return beta_bound**2 / d + sigma**2


def random_direction(d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
    """β⁰ = σ·u for a uniformly random direction u (β = 0 is a fixed point of the symmetric
    models): d standard normals from ``rng``, scaled to norm σ. Shape (d,)."""
    start = rng.standard_normal(check_count("d", d))
    beta0: FloatArray = start / np.linalg.norm(start) * sigma
    return beta0


@dataclass(frozen=True)
class ModelOption:
    """An integer option a model declares (``Model.options``), such as a mixture's number
    of components: ``--NAME`` on the command line of ``ldpem simulate``, a value in
    [``low``, ``high``], ``default`` when not given."""

    name: str
    default: int
    low: int
    high: int
    help: str


class Model(ABC):
    """A latent-variable model fitted by gradient EM: one subclass in one file, registered
    with ``ldpem.common.models.register_model`` (docs/EXTENDING.md).

    The M-step of gradient EM is the same for every model, β^{t+1} = β^t + η·mean_i ∇q_i
    (``ldpem.common.protocol.m_step``): a model supplies the per-record gradient ∇q_i(β; β),
    a generator of synthetic records, the default τ of its second-moment bound, and how it
    treats missing values; and it may state its own start β⁰ (``start``, ``start_rule``).
    """

    #: The name on the command line, on the wire and in the ledger.
    name: ClassVar[str]
    #: Whether β and −β describe the same model (the error is then taken up to sign).
    sign_invariant: ClassVar[bool]
    #: How the error is taken, as the summary of ``ldpem simulate`` says it.
    error_symmetry: ClassVar[str] = ""
    #: Whether a record has a response y besides the covariates x.
    has_response: ClassVar[bool]
    #: Whether a covariate may be missing (NaN); a record with a missing value is refused
    #: otherwise. A response is never missing.
    allows_missing: ClassVar[bool] = False
    #: The share of covariates synthetic demo data leaves missing (models that allow it).
    demo_missing: ClassVar[float] = 0.0
    #: The name of its start rule (``start``), published in a run's parameters; a model
    #: that overrides ``start`` names its own rule (the registry checks it).
    start_rule: ClassVar[str] = DEFAULT_START

    #: Whether the start reads the records: round 0 of every run is then its start round,
    #: private and charged like any other (each holder sends the privatized sum of its
    #: round-0 records' ``start_statistics``; β¹ = ``start_from`` of their mean).
    start_reads_data: ClassVar[bool] = False
    #: The integer options the model declares (a mixture's components); each is an
    #: attribute of that name of the instance and a keyword of its constructor.
    options: ClassVar[tuple[ModelOption, ...]] = ()

    def option_values(self) -> dict[str, int]:
        """This instance's values of its declared ``options``, by name."""
        return {option.name: int(getattr(self, option.name)) for option in self.options}

    def configured(self, values: Mapping[str, int]) -> Model:
        """This model with its declared options set to ``values`` (the others at their
        defaults): a new instance, ``type(self)(**values)``. ValueError naming an option
        the model does not declare or a value out of its range."""
        declared = {option.name: option for option in self.options}
        for name, value in values.items():
            option = declared.get(name)
            if option is None:
                known = ", ".join(declared) or "none"
                raise ValueError(f"model {self.name} has no option {name} (its options: {known})")
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not option.low <= value <= option.high
            ):
                raise ValueError(
                    f"{name} must be an integer in [{option.low}, {option.high}] for model "
                    f"{self.name}, got {value!r}"
                )
        if not values:
            return self
        chosen = {name: option.default for name, option in declared.items()} | dict(values)
        return type(self)(**chosen)

    def parameter_dim(self, d: int) -> int:
        """The size of β for records of dimension d: d for the paper's models, more for a
        model with several components (``gradients`` returns (n, parameter_dim(d)), and the
        mechanisms bound and calibrate that many coordinates)."""
        return d

    def draw_parameter(
        self, d: int, *, snr: float, sigma: float, rng: np.random.Generator
    ) -> FloatArray:
        """A true parameter β* of shape (``parameter_dim(d)``,) for synthetic records of
        dimension d; here ``true_parameter``: ‖β*‖ = snr·σ, equal magnitudes, random signs.
        A model with components states its own (its separation)."""
        return true_parameter(d, snr=snr, sigma=sigma, rng=rng)

    def start(self, d: int, sigma: float, rng: np.random.Generator) -> FloatArray:
        """β⁰ of shape (d,) from public values only: the dimension d, the model's σ and
        ``rng``, the run's public start stream (a federated run's seed, a simulation's
        generator); here ``random_direction``. Never from the records: a start that reads
        data does so in round 0 (``start_reads_data``)."""
        return random_direction(d, sigma, rng)

    def start_statistics(self, records: Records, sigma: float) -> FloatArray:
        """With ``start_reads_data``: each record's statistic, (n, d), which round 0
        privatizes in place of its gradient (the mechanism bounds it the same way)."""
        raise NotImplementedError(f"model {self.name}'s start reads no data")

    def start_from(self, mean: FloatArray, sigma: float) -> FloatArray:
        """With ``start_reads_data``: β¹ (d,) from the private mean (d,) of the start
        statistics (post-processing: no privacy cost)."""
        raise NotImplementedError(f"model {self.name}'s start reads no data")

    @abstractmethod
    def gradients(self, beta: FloatArray, records: Records, sigma: float) -> FloatArray:
        """Per-record ∇q_i(β; β).

        Parameters
        ----------
        beta : array of shape (d,)
            The current estimate β.
        records : Records
            n records of dimension d.
        sigma : float
            The model's noise std σ (> 0), not the privacy noise.

        Returns
        -------
        gradients : array of shape (n, d)
            Row i is ∇q_i(β; β); finite or not, never an exception for a finite record (a
            refusal would depend on the record: the mechanisms bound every row).
        """

    def generate(
        self,
        n: int,
        d: int,
        *,
        snr: float = 3.0,
        sigma: float = 1.0,
        missing: float = 0.0,
        rng: np.random.Generator,
    ) -> tuple[Records, FloatArray]:
        """n synthetic records of dimension d with ‖β*‖ = snr·σ; returns (records, β*).

        β* is drawn first (``draw_parameter``; by default ``true_parameter``: equal
        magnitudes, random signs), then the model's records (``sample_records``).

        Parameters
        ----------
        n : int
            Number of records (≥ 1).
        d, snr, sigma : int, float, float
            As for ``true_parameter``: the dimension, ‖β*‖₂/σ and the model's noise std σ.
        missing : float
            The share of covariates left missing (NaN), in [0, 1); 0 unless the model
            ``allows_missing``.
        rng : numpy.random.Generator
            The only source of randomness.

        Returns
        -------
        records : Records
            ``x`` of shape (n, d), ``y`` of shape (n,) when the model has a response.
        beta_star : array of shape (parameter_dim(d),)
            The true parameter β*.
        """
        n = check_count("n", n)
        sigma = check_positive("sigma", sigma)
        if missing and not self.allows_missing:
            raise ValueError(f"missing must be 0 for model {self.name}, got {missing!r}")
        if not 0.0 <= missing < 1.0:
            raise ValueError(f"missing must be in [0, 1), got {missing!r}")
        beta_star = self.draw_parameter(d, snr=snr, sigma=sigma, rng=rng)
        draw = Draw(n=n, beta_star=beta_star, sigma=sigma, missing=missing, rng=rng)
        return self.sample_records(draw), beta_star

    @abstractmethod
    def sample_records(self, draw: Draw) -> Records:
        """``draw.n`` records from the model at β* = ``draw.beta_star`` (d,) with noise std
        ``draw.sigma``, a share ``draw.missing`` of covariates NaN (0 unless
        ``allows_missing``), all randomness from ``draw.rng``."""

    @abstractmethod
    def default_tau(self, *, beta_bound: float, sigma: float, d: int) -> float:
        """τ, the bound on a gradient coordinate's second moment (Assumption 1), for a
        declared bound B = ``beta_bound`` on ‖β‖₂, the model's σ and dimension d."""

    def error(self, beta: FloatArray, beta_star: FloatArray) -> float:
        """``estimation_error`` of β (d,) against β* (d,) under this model's sign symmetry."""
        return estimation_error(beta, beta_star, sign_invariant=self.sign_invariant)

    def align(self, beta: FloatArray, reference: FloatArray) -> FloatArray:
        """β (p,) in the labelling nearest ``reference`` (p,) under the model's symmetry,
        the one ``error`` takes: −β when ``sign_invariant`` and ⟨β, reference⟩ < 0, else β
        itself (a mixture relabels its components). A β that is not finite is returned
        as it is. ``error(beta, reference)`` is ‖align(beta, reference) − reference‖ (a
        mixture's weight logits centred first)."""
        beta = np.asarray(beta, dtype=np.float64)
        if self.sign_invariant and np.all(np.isfinite(beta)) and beta @ reference < 0.0:
            return -beta
        return beta

    def trivial_estimate(self, d: int, *, snr: float, sigma: float) -> tuple[str, float]:
        """The estimate that ignores the data, against which the plan reads a run's error,
        and its error against the β* ``draw_parameter`` draws for dimension d: here β = 0,
        whose error is ‖β*‖ = snr·σ (``true_parameter``'s norm). A model that draws β*
        otherwise states its own (a mixture: docs/MATH.md §7, "The trivial estimate").

        Returns
        -------
        name : str
            How the plan names it ("β = 0").
        error : float
            Its error, > 0.
        """
        check_count("d", d)
        return "β = 0", check_positive("snr", snr) * check_positive("sigma", sigma)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
