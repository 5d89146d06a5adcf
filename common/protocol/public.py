"""The public parameters of a run, derived from its request and the study defaults: what
the coordinator publishes and every agent checks (``wire.public_parameters`` wraps it)."""

from __future__ import annotations

from typing import Any

from ldpem.common.calibration import smoothing_precision
from ldpem.common.mechanisms import get_mechanism
from ldpem.common.protocol.construction import public_scale
from ldpem.common.protocol.defaults import (
    records_per_round,
    study_beta_bound,
    study_delta,
    study_t_min,
    study_tau,
)
from ldpem.common.protocol.parameters import RunRequest

__all__ = ["derive_public_values"]


def derive_public_values(request: RunRequest) -> dict[str, Any]:
    """The public parameters of a run (the fields of ``wire.PublicParameters``) from its
    request and the study defaults."""
    sizes = [h.records for h in request.hospitals]
    m = records_per_round(sizes, request.rounds)
    delta = study_delta(request.delta, sum(sizes))
    bound = study_beta_bound(request.beta_bound, snr=request.snr, sigma=request.sigma)
    tau = study_tau(
        request.model, tau=request.tau, beta_bound=bound, sigma=request.sigma, d=request.d
    )
    kind = get_mechanism(request.mechanism)
    scale: float | None = None
    smoothing: float | None = None
    clip: float | None = None
    if kind.needs == "scale":
        # A mechanism whose holders take their own scale publishes one only when the
        # operator fixed one s for all.
        scale = request.scale
        if scale is None and not kind.per_holder_scale:
            scale = public_scale(
                request.mechanism,
                d=request.d,
                records_per_round=m,
                epsilon=request.epsilon,
                delta=delta,
                tau=tau,
                zeta=request.zeta,
            )
        smoothing = smoothing_precision(request.d, request.zeta)
    elif kind.needs == "clip":
        clip = request.clip
    # Only noise shares need t_min: how many honest holders make the noise.
    t_min = None
    if kind.noise_site == "shares":
        t_min = study_t_min(request.t_min, len(request.hospitals))
    return {
        "model": request.model,
        "d": request.d,
        "sigma": request.sigma,
        "rounds": request.rounds,
        "eta": request.eta,
        "mechanism": request.mechanism,
        "epsilon": request.epsilon,
        "delta": delta,
        "accounting": request.accounting,
        "tau": tau,
        "zeta": request.zeta,
        "scale": scale,
        "smoothing": smoothing,
        "clip": clip,
        "records_per_round": m,
        "t_min": t_min,
    }
