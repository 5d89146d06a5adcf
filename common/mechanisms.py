"""Privacy mechanisms applied to per-record gradients (docs/MATH.md, sections 2, 5, 6).

Every mechanism is split the way a federated round is: the part a data holder runs on its
own records (``holder_sum``: the sum of its records' contributions, with local noise if the
mechanism is local) and the part the aggregator adds once to the average of all holders'
sums (``aggregate_noise``: central mechanisms only). The M-step then uses

    mean = Σ holder sums / Σ counts + aggregate_noise.

``privatize`` returns one report per record (the strict local-model view); ``holder_sum``
returns the sum of those reports. For the local mechanisms the sum is drawn as Σ T(g_i) plus
one Gaussian of variance m·σ_r² per coordinate, which has exactly the distribution of the sum
of m independent reports: identical privacy and accuracy at 1/m of the noise draws.

Parameters are keyword-only and validated once, at construction; every mechanism states the
per-coordinate bound of a record's contribution before noise (``record_bound``) and its L2
sensitivity (``sensitivity``), which is what privacy accounting and the coordinator's range
checks use.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Literal, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common._validation import check_positive
from ldpem.common.truncation import smoothed_truncation
from ldpem.common.truncation_bound import truncation_bound

__all__ = [
    "MECHANISM_NAMES",
    "CentralClipped",
    "CentralTruncation",
    "HospitalTruncation",
    "LocalClipped",
    "LocalTruncation",
    "Mechanism",
    "MechanismName",
    "NoPrivacy",
    "clip_rows",
]

FloatArray = NDArray[np.float64]
MechanismName = Literal["local", "hospital", "central", "local-clip", "central-clip", "none"]
MECHANISM_NAMES: tuple[str, ...] = get_args(MechanismName)


def _as_gradients(gradients: ArrayLike) -> FloatArray:
    array = np.asarray(gradients, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"gradients must be an (n, d) array, got shape {array.shape}")
    # NaN and ±inf are accepted: every bounded mechanism maps them to a bounded contribution.
    return array


def _check_noise_std(value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"noise_std must be a finite number >= 0, got {value!r}")
    return value


def clip_rows(gradients: FloatArray, clip: float) -> FloatArray:
    """Each row scaled to L2 norm at most ``clip``: g / max(1, ‖g‖/C) (Algorithm 1, line 3).

    Norms are taken of rows divided by their largest |entry|, so rows near the float range
    (where ‖g‖² overflows) keep their direction instead of collapsing to zero.

    Non-finite entries give a bounded row too (a refusal would leak, see
    ``smoothed_truncation``): NaN counts as 0, and a row with infinite entries becomes
    their direction (±1 on each, 0 elsewhere) at norm C, the limit of its finite
    neighbours.

    Parameters
    ----------
    gradients : array of shape (n, d)
        Per-record gradients; may hold NaN and ±inf.
    clip : float
        C > 0, the largest L2 norm of a row.

    Returns
    -------
    clipped : array of shape (n, d)
        Finite rows of L2 norm ≤ C.
    """
    gradients = np.where(np.isnan(gradients), 0.0, gradients)
    infinite = np.isinf(gradients)
    has_infinite: NDArray[np.bool_] = np.any(infinite, axis=1)
    gradients = np.where(
        has_infinite[:, None], np.where(infinite, np.sign(gradients), 0.0), gradients
    )
    peak = np.max(np.abs(gradients), axis=1)
    peak[peak == 0.0] = 1.0
    scaled = gradients / peak[:, None]
    scaled_norm = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    with np.errstate(over="ignore"):  # ‖g‖ = inf is fine: min(inf, C) = C
        norm = np.where(has_infinite, math.inf, peak * scaled_norm)
    length = np.minimum(norm, clip)
    safe = np.where(scaled_norm > 0.0, scaled_norm, 1.0)
    shrunk = scaled * (length / safe)[:, None]
    clipped: FloatArray = np.where((norm <= clip)[:, None], gradients, shrunk)
    return clipped


class Mechanism(ABC):
    """What a mechanism does to a batch of per-record gradients g_i ∈ R^d."""

    #: Name used on the command line and on the wire.
    name: MechanismName
    #: Whether the noise is added by each data holder (local) or once by the aggregator.
    is_local: bool
    #: Per-coordinate noise std of one record's report (local) or of the average (central).
    noise_std: float

    @abstractmethod
    def contributions(self, gradients: FloatArray) -> FloatArray:
        """Each record's contribution before noise.

        Parameters
        ----------
        gradients : array of shape (n, d)
            Per-record gradients g_i.

        Returns
        -------
        contributions : array of shape (n, d)
        """

    @abstractmethod
    def record_bound(self, d: int) -> float:
        """Largest |coordinate| of one record's contribution before noise (inf if none), for
        contributions of dimension ``d``."""

    @abstractmethod
    def sensitivity(self, d: int) -> float:
        """L2 distance between two records' contributions of dimension ``d``, at most
        (replace-one)."""

    def holder_noise(self, count: int, d: int, rng: np.random.Generator) -> FloatArray:
        """Noise of a sum of ``count`` local reports, shape (d,): N(0, count·σ_r² I_d).

        This has exactly the distribution of the sum of ``count`` independent per-record
        noises, so the summed report is as private as the reports it stands for.

        Parameters
        ----------
        count : int
            Records in the sum (≥ 0; zeros for 0, and for central mechanisms).
        d : int
            Dimension.
        rng : numpy.random.Generator
            The holder's noise stream.

        Returns
        -------
        noise : array of shape (d,)
        """
        if not self.is_local or self.noise_std == 0.0 or count == 0:
            return np.zeros(d)
        return rng.normal(0.0, self.noise_std * math.sqrt(count), d)

    def holder_sum(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """What a data holder sends for a batch: Σ_i contribution_i + local noise.

        Parameters
        ----------
        gradients : array-like of shape (n, d)
            The batch's per-record gradients.
        rng : numpy.random.Generator
            The holder's noise stream.

        Returns
        -------
        total : array of shape (d,)
        """
        g = _as_gradients(gradients)
        total: FloatArray = self.contributions(g).sum(axis=0)
        return total + self.holder_noise(g.shape[0], g.shape[1], rng)

    def privatize(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """One report per record: contribution_i + N(0, σ_r² I_d) for local mechanisms, (n, d).

        For central mechanisms and ``none`` the reports are the contributions themselves.

        Parameters
        ----------
        gradients : array-like of shape (n, d)
            Per-record gradients.
        rng : numpy.random.Generator
            The noise stream.

        Returns
        -------
        reports : array of shape (n, d)
        """
        g = _as_gradients(gradients)
        reports = self.contributions(g)
        if self.is_local and self.noise_std > 0.0:
            reports += rng.normal(0.0, self.noise_std, reports.shape)
        return reports

    def aggregate_noise(
        self, d: int, rng: np.random.Generator, draws: int | None = None
    ) -> FloatArray:
        """Noise the aggregator adds to the average of all contributions (zeros for local
        mechanisms).

        Parameters
        ----------
        d : int
            Dimension.
        rng : numpy.random.Generator
            The aggregator's noise stream.
        draws : int, optional
            Independent draws to return at once (used by the privacy audit).

        Returns
        -------
        noise : array of shape (d,), or (draws, d) when ``draws`` is given
        """
        shape = (d,) if draws is None else (draws, d)
        if self.is_local or self.noise_std == 0.0:
            return np.zeros(shape)
        return rng.normal(0.0, self.noise_std, shape)


class LocalTruncation(Mechanism):
    """Local model (docs/MATH.md (3.3)): report T(g_i) + N(0, σ_r² I_d) per record.

    Parameters
    ----------
    scale : float
        s > 0, the truncation scale.
    smoothing : float
        β_s > 0, the precision of the smoothing noise.
    noise_std : float
        σ_r ≥ 0, the per-coordinate std of the Gaussian noise on each report.
    """

    name: MechanismName = "local"
    is_local = True

    def __init__(self, *, scale: float, smoothing: float, noise_std: float) -> None:
        self.scale = check_positive("scale", scale)
        self.smoothing = check_positive("smoothing", smoothing)
        self.noise_std = _check_noise_std(noise_std)

    def contributions(self, gradients: FloatArray) -> FloatArray:
        return smoothed_truncation(gradients, self.scale, self.smoothing)

    def record_bound(self, d: int) -> float:
        return self.scale * truncation_bound(self.smoothing)

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.record_bound(d) * math.sqrt(d)

    def __repr__(self) -> str:
        return (
            f"LocalTruncation(scale={self.scale!r}, smoothing={self.smoothing!r}, "
            f"noise_std={self.noise_std!r})"
        )


class CentralTruncation(LocalTruncation):
    """Central model of Algorithm 2: the curator averages T(g_i) over the m records of a round
    and adds N(0, σ_r² I_d) once (docs/MATH.md (3.4), with the paper's s/n typo corrected to
    s/m)."""

    name: MechanismName = "central"
    is_local = False

    def sensitivity_of_average(self, d: int, records: int) -> float:
        """L2 sensitivity of the average of ``records`` contributions."""
        return self.sensitivity(d) / records

    def __repr__(self) -> str:
        return super().__repr__().replace("LocalTruncation", "CentralTruncation", 1)


class HospitalTruncation(LocalTruncation):
    """Hospital-level mechanism (docs/HOSPITAL.md): the data holder is the curator of its
    own records. Each record is truncated as in the local model, the holder sums them and
    adds ONE draw of N(0, σ_r² I_d) to the sum, σ_r calibrated to the replace-one sensitivity
    of the sum, 2·record_bound·√d — the same as that of one record's report.

    The scale is Algorithm 2's central rule with the holder's own records per round, so it
    differs between holders; ``privatize`` gives what a holder of a single record would
    send (its contribution plus one draw), the tightest case for the privacy audit.
    """

    name: MechanismName = "hospital"

    def holder_noise(self, count: int, d: int, rng: np.random.Generator) -> FloatArray:
        """One draw N(0, σ_r² I_d) for the whole sum, whatever ``count`` (none for count 0):
        an array of shape (d,)."""
        if self.noise_std == 0.0 or count == 0:
            return np.zeros(d)
        return rng.normal(0.0, self.noise_std, d)

    def __repr__(self) -> str:
        return super().__repr__().replace("LocalTruncation", "HospitalTruncation", 1)


class LocalClipped(Mechanism):
    """Clipped baseline in the local model (Algorithm 1): clip each g_i to L2 norm C, add
    N(0, σ_r² I_d) per record; sensitivity 2C.

    Parameters
    ----------
    clip : float
        C > 0, the largest L2 norm of a record's contribution.
    noise_std : float
        σ_r ≥ 0, the per-coordinate std of the Gaussian noise on each report.
    """

    name: MechanismName = "local-clip"
    is_local = True

    def __init__(self, *, clip: float, noise_std: float) -> None:
        self.clip = check_positive("clip", clip)
        self.noise_std = _check_noise_std(noise_std)

    def contributions(self, gradients: FloatArray) -> FloatArray:
        return clip_rows(gradients, self.clip)

    def record_bound(self, d: int) -> float:
        return self.clip

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.clip

    def __repr__(self) -> str:
        return f"{type(self).__name__}(clip={self.clip!r}, noise_std={self.noise_std!r})"


class CentralClipped(LocalClipped):
    """Clipped baseline in the central model (Algorithm 1 as printed): the curator averages
    the clipped gradients of a round and adds N(0, σ_r² I_d) once; sensitivity 2C/m."""

    name: MechanismName = "central-clip"
    is_local = False


class NoPrivacy(Mechanism):
    """Non-private gradient EM: contributions are the raw gradients, no noise.

    Unlike the private mechanisms it refuses NaN and ±inf gradients (ValueError): it has no
    bound to map them to, its output reveals the records anyway, and a silent 0 or inf
    would corrupt the estimate of a run that makes no privacy claim.
    """

    name: MechanismName = "none"
    is_local = True
    noise_std = 0.0

    def contributions(self, gradients: FloatArray) -> FloatArray:
        if not np.all(np.isfinite(gradients)):
            raise ValueError("mechanism 'none' needs finite gradients, got NaN or inf")
        return gradients

    def record_bound(self, d: int) -> float:
        return math.inf

    def sensitivity(self, d: int) -> float:
        return math.inf

    def __repr__(self) -> str:
        return "NoPrivacy()"
