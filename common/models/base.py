"""Records and the pieces every model shares: the error metric and the model descriptor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["Model", "Records", "estimation_error"]

FloatArray = NDArray[np.float64]


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


GradientFn = Callable[[FloatArray, Records, float], FloatArray]
GenerateFn = Callable[..., tuple[Records, FloatArray]]


@dataclass(frozen=True)
class Model:
    """A latent-variable model: its per-record gradient ∇q_i(β; β) and a data generator.

    gradients(beta (d,), records (n records), sigma) -> (n, d) per-record gradients.
    generate(n, d, *, snr, sigma, missing, rng) -> (records, beta_star).
    """

    name: str
    gradients: GradientFn
    generate: GenerateFn
    sign_invariant: bool
    has_response: bool
    allows_missing: bool

    def error(self, beta: FloatArray, beta_star: FloatArray) -> float:
        """``estimation_error`` of β (d,) against β* (d,) under this model's sign symmetry."""
        return estimation_error(beta, beta_star, sign_invariant=self.sign_invariant)
