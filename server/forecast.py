"""The accuracy a run should expect, from the simulator, stated when the run is created.

The run's public parameters and enrolled counts become a ``planning.Problem`` (the same
planning code as ``ldpem plan``): synthetic data of the run's model, d, σ and the request's
SNR, split over holders with the enrolled record counts (scaled down proportionally above
``max_records``, which only makes the forecast pessimistic), run with the mechanism each
agent builds at the run's published budget: the mean final error over ``seeds`` seeds,
which is the mean of ``ldpem simulate``'s final errors for seeds 0..seeds−1 with the run's
hospital sizes (tests/cli/test_simulate_equals_federated.py). A run's schedule and final
estimate are the study's too, so the forecast is the error of the estimate it reports.
"""

from __future__ import annotations

import numpy as np

from ldpem.common.planning import Problem, final_errors
from ldpem.common.wire import PublicParameters, RunCreate

__all__ = ["forecast_error", "run_problem"]


def run_problem(request: RunCreate, params: PublicParameters) -> Problem:
    """The planning problem of a run: its public parameters and enrolled counts."""
    return Problem(
        model=params.model,
        d=params.d,
        sizes=tuple(h.records for h in request.hospitals),
        sigma=params.sigma,
        epsilon=params.epsilon,
        delta=params.delta,
        rounds=params.rounds,
        snr=request.snr,
        tau=params.tau,
        zeta=params.zeta,
        accounting=params.accounting,
        missing=request.missing,
        clip=params.clip if params.clip is not None else 1.0,
        eta=params.eta,
        # Only a scale the operator fixed: otherwise the study's own rule, recomputed for
        # the (possibly scaled-down) simulated sizes, gives the published s at full size
        # (each round's s_t under a schedule).
        scale=request.scale,
        schedule=params.schedule if isinstance(params.schedule, str) else tuple(params.schedule),
        final=params.final,
    )


def forecast_error(
    request: RunCreate, params: PublicParameters, *, seeds: int = 4, max_records: int = 200_000
) -> float:
    """Mean final estimation error of the simulated run over ``seeds`` seeds."""
    problem = run_problem(request, params)
    errors = final_errors(problem, params.mechanism, seeds, max_records=max_records)
    return float(np.mean(errors))
