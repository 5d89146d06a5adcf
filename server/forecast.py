"""The accuracy a run should expect, from the simulator, stated when the run is created.

Synthetic data of the run's model, d, σ and the forecast's SNR, split over holders with the
enrolled record counts (scaled down proportionally above ``max_records``, which only makes
the forecast pessimistic), run through ``run_gradient_em`` with the mechanism each agent
builds at the run's published budget: the mean final error over ``seeds`` seeds.
"""

from __future__ import annotations

import itertools

import numpy as np

from ldpem.common.configure import local_noise_std, make_mechanism
from ldpem.common.mechanisms import LocalTruncation, Mechanism, NoPrivacy
from ldpem.common.models import get_model
from ldpem.common.simulation import run_gradient_em
from ldpem.common.wire import PublicParameters, RunCreate

__all__ = ["forecast_error", "run_mechanism"]


def run_mechanism(params: PublicParameters) -> Mechanism:
    """The mechanism an agent whose budget is the run's (ε, δ) uses, with the public s/C."""
    if params.mechanism == "none":
        return NoPrivacy()
    if params.mechanism == "local":
        assert params.scale is not None and params.smoothing is not None
        return LocalTruncation(
            scale=params.scale,
            smoothing=params.smoothing,
            noise_std=local_noise_std(
                scale=params.scale,
                smoothing=params.smoothing,
                d=params.d,
                epsilon=params.epsilon,
                delta=params.delta,
                accounting=params.accounting,
            ),
        )
    return make_mechanism(
        params.mechanism,
        d=params.d,
        records_per_round=params.records_per_round,
        epsilon=params.epsilon,
        delta=params.delta,
        tau=params.tau,
        zeta=params.zeta,
        clip=params.clip if params.clip is not None else 1.0,
        accounting=params.accounting,
        scale=params.scale,
    )


def forecast_error(
    request: RunCreate, params: PublicParameters, *, seeds: int = 4, max_records: int = 200_000
) -> float:
    """Mean final estimation error of the simulated run over ``seeds`` seeds."""
    model = get_model(params.model)
    counts = np.array([h.records for h in request.hospitals], dtype=np.float64)
    factor = min(1.0, max_records / counts.sum())
    sizes = [max(params.rounds, int(c * factor)) for c in counts]
    mechanism = run_mechanism(params)
    errors = []
    for seed in range(seeds):
        rng = np.random.default_rng([0xF0CA57, seed])
        records, beta_star = model.generate(
            sum(sizes),
            params.d,
            snr=request.snr,
            sigma=params.sigma,
            missing=request.missing,
            rng=rng,
        )
        bounds = np.cumsum([0, *sizes])
        holders = [records.take(slice(int(a), int(b))) for a, b in itertools.pairwise(bounds)]
        start = rng.standard_normal(params.d)
        beta0 = start / np.linalg.norm(start) * params.sigma
        result = run_gradient_em(
            model=model,
            holders=holders,
            sigma=params.sigma,
            mechanism=mechanism,
            rounds=params.rounds,
            beta0=beta0,
            rng=rng,
            eta=params.eta,
            beta_star=beta_star,
        )
        errors.append(result.errors[-1])
    return float(np.mean(errors))
