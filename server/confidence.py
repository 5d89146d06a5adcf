"""A finished run's confidence region, computed by the coordinator in the background.

When a run finishes, the coordinator reruns its pipeline by parametric bootstrap
(``ldpem.common.planning.confidence``) as a derived result (``ldpem.server.background``, kind
``"confidence"``): the run's study is the one its forecast simulates (the public
parameters and the enrolled record counts, ``forecast.run_problem``), at full size, drawn
at the run's released estimate β̂. It reads only β̂ and public values: post-processing, no
privacy cost (docs/PRIVACY.md). ``run status`` shows ``"confidence"`` pending until it is
stored, then the region (``wire.ConfidenceRegion``); a bootstrap that failed is stored as
its one-line reason, so it is not tried again and the run shows no region.

The study assumes what a bootstrap must: the model holds (for mrm and rmc, covariates
as its generator draws them; for rmc, the request's share of missing covariates, 0.1 by
default), every hospital reports every round at the run's published budget.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

import numpy as np

from ldpem.common.planning.confidence import (
    DEFAULT_DRAWS,
    DEFAULT_LEVEL,
    RegionDraws,
    resolved_missing,
    study_region,
)
from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.study import Study
from ldpem.common.wire import ConfidenceRegion, PublicParameters, RunCreate
from ldpem.server.forecast import ForecastOptions, run_problem
from ldpem.server.store import RunRow, Store

__all__ = [
    "CONFIDENCE",
    "ConfidenceJob",
    "ConfidenceOptions",
    "confidence_due",
    "federated_study",
    "stored_region",
]

log = logging.getLogger("ldpem.server")

#: The derived result's kind (``Background``, ``Store.put_derived``).
CONFIDENCE = "confidence"


@dataclass(frozen=True)
class ConfidenceOptions:
    """How the coordinator bootstraps a finished run (``Settings.confidence_*``): B draws
    (0: no region) at ``level``."""

    draws: int = DEFAULT_DRAWS
    level: float = DEFAULT_LEVEL


def federated_study(request: RunCreate, params: PublicParameters) -> Study:
    """The study a bootstrap draw of this run runs: its forecast's problem at full size
    with the run's mechanism, the share of missing covariates resolved."""
    problem = run_problem(request, params)
    study = problem.study(params.mechanism, 0)
    missing = resolved_missing(study.model, study.missing)
    return replace(study, missing=missing, beta_bound=problem.resolved_bound)


@dataclass(frozen=True)
class ConfidenceJob:
    """The confidence region of one finished run as a background job: ``compute``
    bootstraps (seconds, on the forecast's executor: local processes or its Dask
    scheduler), ``save`` stores the region, ``failed`` stores why there is none."""

    store: Store
    run_id: str
    request: RunCreate
    params: PublicParameters
    estimate: tuple[float, ...]
    options: ConfidenceOptions
    executor: ForecastOptions

    def compute(self) -> ConfidenceRegion:
        study = federated_study(self.request, self.params)
        with make_executor(self.executor.scheduler, workers=self.executor.workers) as executor:
            region = study_region(
                study,
                np.array(self.estimate, dtype=np.float64),
                RegionDraws(level=self.options.level, draws=self.options.draws),
                executor=executor,
            )
        return ConfidenceRegion.model_validate(region.summary())

    def save(self, region: ConfidenceRegion) -> None:
        self.store.put_derived(self.run_id, CONFIDENCE, region.model_dump_json())
        log.info(
            "run %s: %g%% confidence radius %s (%d bootstrap draws)",
            self.run_id,
            100 * region.level,
            "unbounded" if region.radius is None else f"{region.radius:.4g}",
            region.draws,
            extra={"run": self.run_id},
        )

    def failed(self, error: Exception) -> None:
        reason = f"no confidence region: {error}"
        self.store.put_derived(self.run_id, CONFIDENCE, json.dumps({"failed": reason}))


def stored_region(store: Store, run_id: str) -> ConfidenceRegion | None:
    """The run's stored region; None before it is stored, or when it failed."""
    body = store.derived(run_id, CONFIDENCE)
    if body is None or "failed" in json.loads(body):
        return None
    return ConfidenceRegion.model_validate_json(body)


def confidence_due(store: Store, run: RunRow, options: ConfidenceOptions) -> bool:
    """Whether ``run`` finished and its region is wanted but neither stored nor failed."""
    return (
        options.draws > 0 and run.status == "finished" and store.derived(run.id, CONFIDENCE) is None
    )
