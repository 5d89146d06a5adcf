"""How often the parametric bootstrap's regions hold the true β*: runs they did not use.

The calibration check of ``ldpem.common.planning.confidence`` (issue 31; the test
tests/common/test_confidence_calibration.py and benchmarks/confidence_coverage.py): run i
of a case is one synthetic study at seed ``seed_base + i`` (its own β*, drawn from that
seed), run on the fast path (``fastsim.simulate``: the distribution of ``run_study``'s
estimate, which tests/common/test_fastsim.py checks), and its region from ``draws``
bootstrap draws at its estimate, their seeds derived from i (``bootstrap_seeds(draws,
i)``), never the study's. Each run and its draws are one task of an executor: a run at
n = 2·10⁵ and its 19 draws are ~1 s of CPU, so a pool of two halves the wall time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ldpem.common.planning.confidence import (
    DEFAULT_LEVEL,
    bootstrap_estimates,
    bootstrap_seeds,
    region,
    resolved_missing,
    shrinkage_region,
)
from ldpem.common.planning.executor import Executor, SerialExecutor
from ldpem.common.planning.fastsim import simulate
from ldpem.common.planning.study import Study, study_model

__all__ = ["REGIONS", "Covered", "coverage_runs", "synthetic_bootstrap_study"]


@dataclass(frozen=True)
class Covered:
    """One run's region against its true β* (aligned to β̂: by sign for gmm and mrm, by
    relabelling the components for gmmk and lca).

    ``inside``: ‖β* − β̂‖ ≤ r; ``coordinates``: the share of the d coordinates whose
    interval holds β*_j; ``error``: ‖β* − β̂‖; ``radius``: r; ``width``: the mean
    interval width."""

    inside: bool
    coordinates: float
    error: float
    radius: float
    width: float


def synthetic_bootstrap_study(study: Study) -> Study:
    """The bootstrap's pipeline for a synthetic ``study`` whose hospitals' sizes are
    fixed (given, or one hospital): the study itself with its share of missing covariates
    resolved and no outliers (``confidence.bootstrap_study``). Its δ, B and τ resolve
    from n, snr and σ as the run's did, so they are left as the study says.

    Raises ValueError for hospitals of random sizes: the run's sizes would be unknown."""
    if study.sizes is None and study.hospitals > 1:
        raise ValueError(f"sizes must be given for {study.hospitals} hospitals, got None")
    missing = resolved_missing(study.model, study.missing)
    return replace(study, missing=missing, outliers=0.0)


#: How a region's intervals are made from its draws: ``confidence.shrinkage_region``'s
#: (the product's), or ``confidence.region``'s basic intervals.
REGIONS = {"basic": region, "shrinkage": shrinkage_region}

_Task = tuple[Study, int, int, float, str]


def _covered(task: _Task) -> Covered:
    """One executor task: run ``index`` of the study and its region (module docstring).
    Module level: a process pool runs it."""
    study, index, draws, level, intervals = task
    run = simulate(study)
    found = bootstrap_estimates(
        synthetic_bootstrap_study(study), run.estimate, bootstrap_seeds(draws, index)
    )
    model = study_model(study)
    made = REGIONS[intervals]
    confidence = made(run.estimate, found, level=level, model=model)
    # β* in the labelling nearest β̂ (its sign, its components' order): what the region
    # is of.
    star = model.align(run.beta_star, run.estimate)
    low, high = np.array(confidence.low), np.array(confidence.high)
    error = float(np.linalg.norm(star - run.estimate))
    return Covered(
        inside=error <= confidence.radius,
        coordinates=float(np.mean((low <= star) & (star <= high))),
        error=error,
        radius=confidence.radius,
        width=float(np.mean(high - low)),
    )


def coverage_runs(
    study: Study,
    *,
    runs: int,
    seed_base: int,
    draws: int,
    level: float = DEFAULT_LEVEL,
    intervals: str = "shrinkage",
    executor: Executor | None = None,
) -> Sequence[Covered]:
    """``runs`` independent runs of ``study`` (seeds ``seed_base`` … ``seed_base + runs −
    1``), each with its region at ``level`` from ``draws`` bootstrap draws seeded from its
    index (module docstring), its intervals made as ``intervals`` says (``REGIONS``), one
    task each on ``executor`` (default: this process).

    Returns
    -------
    sequence of Covered
        One per run, in the runs' order.
    """
    if intervals not in REGIONS:
        raise ValueError(f"intervals must be one of {sorted(REGIONS)}, got {intervals!r}")
    tasks = [(replace(study, seed=seed_base + i), i, draws, level, intervals) for i in range(runs)]
    chosen = executor if executor is not None else SerialExecutor()
    return chosen.map(_covered, tasks)
