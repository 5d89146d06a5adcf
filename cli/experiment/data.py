"""The real medical data sets of ``ldpem experiment``'s Figure 8, prepared as the paper
does: breast cancer for the GMM and diabetes for RMC, both shipped with scikit-learn (the
``experiments`` extra)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.models import Records
from ldpem.common.planning.study import Dataset

__all__ = [
    "DatasetFactory",
    "RealSource",
    "balanced_gmm_dataset",
    "missing_covariates_dataset",
    "real_sources",
]

FloatArray = NDArray[np.float64]
#: The records of a study with the given seed.
DatasetFactory = Callable[[int], Dataset]


def balanced_gmm_dataset(
    features: FloatArray, labels: NDArray[Any], rng: np.random.Generator
) -> tuple[Dataset, float]:
    """The paper's preprocessing of a labelled data set for the GMM, returns (data, σ).

    Columns are standardised; the larger class is subsampled to the size of the smaller;
    records are centred at the midpoint of the two class means, so β* is half their
    difference; σ = √(largest eigenvalue of the pooled within-class covariance).
    """
    x = (features - features.mean(axis=0)) / features.std(axis=0)
    classes = np.unique(labels)
    if classes.size != 2:
        raise ValueError(f"labels must have exactly 2 classes, got {classes.size}")
    first, second = (np.flatnonzero(labels == c) for c in classes)
    size = min(first.size, second.size)
    first = rng.choice(first, size, replace=False)
    second = rng.choice(second, size, replace=False)
    mean_first, mean_second = x[first].mean(axis=0), x[second].mean(axis=0)
    midpoint = (mean_first + mean_second) / 2.0
    beta_star = (mean_second - mean_first) / 2.0
    within = np.vstack([x[first] - mean_first, x[second] - mean_second])
    sigma = math.sqrt(float(np.linalg.eigvalsh(np.cov(within, rowvar=False))[-1]))
    records = x[rng.permutation(np.concatenate([first, second]))] - midpoint
    return Dataset(Records(records), beta_star), sigma


def missing_covariates_dataset(
    features: FloatArray, target: FloatArray, missing: float, rng: np.random.Generator
) -> tuple[Dataset, float]:
    """A regression data set for RMC, returns (data, σ).

    The covariates are whitened (ZCA: zero mean, identity covariance, as the model's
    x ~ N(0, I_d); correlated covariates would make the unit gradient step diverge) and the
    response standardised; β* is the least-squares fit on the complete data and σ the
    residual std; then each covariate is removed (NaN) with probability ``missing``.
    """
    centred = features - features.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(centred, rowvar=False))
    x = centred @ (vectors / np.sqrt(values)) @ vectors.T
    y = (target - target.mean()) / target.std()
    beta_star = np.linalg.lstsq(x, y, rcond=None)[0]
    residual = y - x @ beta_star
    sigma = math.sqrt(float(residual @ residual) / (x.shape[0] - x.shape[1]))
    x[rng.random(x.shape) < missing] = np.nan
    order = rng.permutation(x.shape[0])
    return Dataset(Records(x[order], y[order]), beta_star), sigma


@dataclass(frozen=True)
class RealSource:
    """A real data set prepared for a model: a Dataset per seed, with fixed σ and β*."""

    name: str
    model: str
    sigma: float
    beta_star: FloatArray
    n: int
    d: int
    dataset: DatasetFactory


def _same(dataset: Dataset, seed: int) -> Dataset:
    return dataset


def _with_missing(features: FloatArray, target: FloatArray, seed: int) -> Dataset:
    rng = np.random.default_rng([seed, 8])
    return missing_covariates_dataset(features, target, 0.1, rng)[0]


def real_sources() -> list[RealSource]:
    """Breast cancer (GMM, balanced once with seed 0) and diabetes (RMC, a new random 10%
    of covariates removed for each seed), both shipped with scikit-learn."""
    try:
        from sklearn.datasets import load_breast_cancer, load_diabetes
    except ImportError:
        raise UserError(
            "fig8 needs scikit-learn for its data sets: pip install 'ldpem[experiments]'"
        ) from None
    cancer = load_breast_cancer()
    features, labels = np.asarray(cancer.data, float), np.asarray(cancer.target)
    balanced, sigma = balanced_gmm_dataset(features, labels, np.random.default_rng(0))
    assert balanced.beta_star is not None
    diabetes = load_diabetes()
    x, y = np.asarray(diabetes.data, float), np.asarray(diabetes.target, float)
    first, diabetes_sigma = missing_covariates_dataset(x, y, 0.1, np.random.default_rng([0, 8]))
    assert first.beta_star is not None
    return [
        RealSource(
            "breast cancer",
            "gmm",
            sigma,
            balanced.beta_star,
            balanced.records.n,
            balanced.records.d,
            partial(_same, balanced),
        ),
        RealSource(
            "diabetes",
            "rmc",
            diabetes_sigma,
            first.beta_star,
            first.records.n,
            first.records.d,
            partial(_with_missing, x, y),
        ),
    ]
