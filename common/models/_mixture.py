"""What the K-component models share (``gmmk``, ``lca``; docs/MATH.md §7).

Their β is K blocks of d values (component k's means or item logits), then K weight
logits α: β = (b_1, …, b_K, α), of size K·(d + 1). The weights are softmax(α), so any α is
valid and a gradient step never leaves the parameter space; adding a constant to α
changes nothing, so the error compares centred logits. The components have no order: the
error is the least over the K! relabellings, found by the Hungarian algorithm on a cost
that separates over pairs of components.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count
from ldpem.common.models.base import Model, ModelOption

__all__ = [
    "COMPONENTS_HELP",
    "TRIVIAL_STARTS",
    "MixtureModel",
    "class_logits",
    "permutation_error",
    "posterior",
    "record_dim",
    "relabelled",
    "split",
]

FloatArray = NDArray[np.float64]

COMPONENTS_HELP = "K, the number of components (classes)"
#: Starts whose mean error is the start's trivial error: its standard error is then about
#: 0.3% of it (gmmk K = 3, d = 5: 2.889 ± 0.008).
TRIVIAL_STARTS = 1000
#: The seed of the trivial estimate's β* and starts: the plan's figure is reproducible.
_TRIVIAL_SEED = 0
#: Half the spread of the true weight logits: α*_k from −¼ to ¼ (weights 0.25–0.42 at K = 3).
_LOGIT_SPREAD = 0.25


def record_dim(size: int, components: int) -> int:
    """d of a β of ``size`` = K·(d + 1) values; ValueError when it is not of that form."""
    d, rest = divmod(size, components)
    if rest or d < 2:
        raise ValueError(
            f"beta must have K·(d + 1) values for K = {components} and d >= 1, got {size}"
        )
    return d - 1


def split(beta: FloatArray, components: int) -> tuple[FloatArray, FloatArray]:
    """β (K·(d + 1),) as its K blocks (K, d) and its K weight logits (K,) (views)."""
    d = record_dim(beta.size, components)
    blocks = beta[: components * d].reshape(components, d)
    return blocks, beta[components * d :]


def posterior(scores: FloatArray) -> FloatArray:
    """Row-wise softmax of (n, K) log-scores: the posterior weights w_ik, each row summing
    to 1 (the largest score subtracted first, so no finite row overflows)."""
    shifted = scores - scores.max(axis=1, keepdims=True)
    weights: FloatArray = np.exp(shifted)
    weights /= weights.sum(axis=1, keepdims=True)
    return weights


def log_weights(logits: FloatArray) -> FloatArray:
    """log softmax(α) of the K weight logits, shape (K,)."""
    shifted = logits - logits.max()
    result: FloatArray = shifted - np.log(np.exp(shifted).sum())
    return result


def class_logits(components: int) -> FloatArray:
    """The true weight logits of the synthetic models: K values evenly from −¼ to ¼
    (centred; unequal weights, the largest 1.6 times the smallest)."""
    components = check_count("components", components)
    return np.linspace(-_LOGIT_SPREAD, _LOGIT_SPREAD, components)


def _relabelling(
    beta: FloatArray, beta_star: FloatArray, components: int
) -> tuple[NDArray[np.intp], float]:
    """The relabelling π of β's components nearest β* (π[k] is the component of β matched
    to component k of β*) and its squared distance (7.8). The cost separates over pairs
    (k, l), so the Hungarian algorithm (``scipy.optimize.linear_sum_assignment``) on the
    K × K matrix of pair costs gives the exact minimum over the K! relabellings. β and β*
    (K·(d + 1),), finite."""
    # scipy.optimize costs about 0.15 s to import: every `ldpem` command registers this
    # model, and only an error needs the assignment.
    from scipy.optimize import linear_sum_assignment

    blocks, logits = split(beta, components)
    true_blocks, true_logits = split(beta_star, components)
    centred = logits - logits.mean()
    true_centred = true_logits - true_logits.mean()
    cost = ((true_blocks[:, None, :] - blocks[None, :, :]) ** 2).sum(axis=2)
    cost += (true_centred[:, None] - centred[None, :]) ** 2
    rows, columns = linear_sum_assignment(cost)
    return columns[np.argsort(rows)], float(cost[rows, columns].sum())


def _checked(beta: FloatArray, beta_star: FloatArray) -> tuple[FloatArray, FloatArray]:
    beta = np.asarray(beta, dtype=np.float64)
    beta_star = np.asarray(beta_star, dtype=np.float64)
    if beta.shape != beta_star.shape:
        raise ValueError(f"beta must have shape {beta_star.shape}, got {beta.shape}")
    return beta, beta_star


def permutation_error(beta: FloatArray, beta_star: FloatArray, components: int) -> float:
    """min over relabellings π of the components of ‖β_π − β*‖₂, the weight logits of
    both centred: √(Σ_k ‖b_π(k) − b*_k‖² + (ᾱ_π(k) − ᾱ*_k)²), ᾱ = α − mean(α), exact
    over the K! relabellings (``_relabelling``).

    Parameters
    ----------
    beta, beta_star : array of shape (K·(d + 1),)
        The estimate and the true parameter.
    components : int
        K.

    Returns
    -------
    float
        The error, ≥ 0 (inf when β has a non-finite value).
    """
    beta, beta_star = _checked(beta, beta_star)
    if not np.all(np.isfinite(beta)):
        return float("inf")
    _, squared = _relabelling(beta, beta_star, components)
    return float(np.sqrt(squared))


def relabelled(beta: FloatArray, reference: FloatArray, components: int) -> FloatArray:
    """β (K·(d + 1),) with its components (block and weight logit together) reordered to
    the relabelling nearest ``reference`` (``_relabelling``), so that component k of the
    result is matched to component k of the reference; the weight logits keep their own
    constant. A β that is not finite is returned as it is."""
    beta, reference = _checked(beta, reference)
    if not np.all(np.isfinite(beta)):
        return beta
    order, _ = _relabelling(beta, reference, components)
    blocks, logits = split(beta, components)
    return np.concatenate([blocks[order].ravel(), logits[order]])


@functools.lru_cache(maxsize=64)
def _trivial_estimate(
    kind: type[MixtureModel], components: int, d: int, snr: float, sigma: float
) -> tuple[str, float]:
    """``MixtureModel.trivial_estimate`` of ``kind(components)``, computed once per value
    (a thousand assignments, ~0.15 s)."""
    model = kind(components)
    star = model.draw_parameter(d, snr=snr, sigma=sigma, rng=np.random.default_rng(_TRIVIAL_SEED))
    zero = model.error(np.zeros_like(star), star)
    rng = np.random.default_rng(_TRIVIAL_SEED)
    starts = [model.error(model.start(d, sigma, rng), star) for _ in range(TRIVIAL_STARTS)]
    start = float(np.mean(starts))
    return ("the start β⁰", start) if start < zero else ("β = 0", zero)


class MixtureModel(Model):
    """A K-component model: β of size K·(d + 1) (K blocks, then K weight logits), its error
    up to a relabelling of the components, K its one option ``components``."""

    sign_invariant = False
    error_symmetry = "up to a relabelling of the components"
    has_response = False
    options = (ModelOption("components", default=3, low=2, high=10, help=COMPONENTS_HELP),)

    def __init__(self, components: int = 3) -> None:
        self.components = components

    def parameter_dim(self, d: int) -> int:
        """K·(d + 1): K blocks of d values and K weight logits."""
        return self.components * (check_count("d", d) + 1)

    def error(self, beta: FloatArray, beta_star: FloatArray) -> float:
        """‖β − β*‖ up to a relabelling of the components, weight logits centred."""
        return permutation_error(beta, beta_star, self.components)

    def align(self, beta: FloatArray, reference: FloatArray) -> FloatArray:
        """β with its components relabelled to match ``reference`` (``relabelled``)."""
        return relabelled(beta, reference, self.components)

    def trivial_estimate(self, d: int, *, snr: float, sigma: float) -> tuple[str, float]:
        """The better of the two estimates a run has without data (docs/MATH.md §7, "The
        trivial estimate"): β = 0, every component at one place, whose error (7.8) is
        ‖β*‖ with centred weight logits whatever the relabelling; or the public start β⁰
        (``start``), its mean error over ``TRIVIAL_STARTS`` seeded draws, which the
        relabelling makes the smaller one for K ≥ 3 (it matches each component of β* with
        the nearest of K random ones). Neither depends on the generator's random
        orientation or deal of items, so one β* (seed 0) gives both."""
        return _trivial_estimate(type(self), self.components, d, snr, sigma)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(components={self.components})"
