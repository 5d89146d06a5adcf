"""The public parameters of a run, derived from its request and the study defaults: what
the coordinator publishes and every agent checks (``wire.public_parameters`` wraps it)."""

from __future__ import annotations

from typing import Any

from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.mechanisms import get_mechanism
from ldpem.common.protocol.construction import published_scales
from ldpem.common.protocol.defaults import (
    configured_model,
    parameter_size,
    records_per_round,
    study_beta_bound,
    study_colluders,
    study_delta,
    study_t_min,
    study_tau,
)
from ldpem.common.protocol.estimate import check_final, check_noise_shares
from ldpem.common.protocol.parameters import RunRequest
from ldpem.common.protocol.schedule import round_sizes

__all__ = ["GIVEN_START", "derive_public_values"]

#: The start rule a run publishes when its operator gave β⁰ (``beta0``) instead.
GIVEN_START = "given"


def derive_public_values(request: RunRequest) -> dict[str, Any]:
    """The public parameters of a run (the fields of ``wire.PublicParameters``) from its
    request and the study defaults.

    The truncation scale follows Algorithm 2's rule with the records per round: one s for
    equal rounds (m = ⌊Σ records / T⌋, as without a schedule), or under another schedule
    one s_t per round (``scales``) from that round's m_t, when no s is fixed for all
    (an operator's ``scale``, or a mechanism whose holders take their own).
    ValueError when a hospital's records leave a round of the schedule empty, ``final``
    is not one of the run's, or noise shares (secure aggregation) would run under a
    schedule other than ``equal`` or a ``final`` other than ``last``."""
    sizes = [h.records for h in request.hospitals]
    for size in sizes:
        round_sizes(size, request.rounds, request.schedule)
    check_final(request.final, request.rounds)
    check_noise_shares(request.mechanism, request.schedule, request.final)
    model = configured_model(request)
    # The mechanisms bound and calibrate β's p coordinates (K·(d + 1) for a mixture).
    size = parameter_size(request)
    m = records_per_round(sizes, request.rounds)
    delta = study_delta(request.delta, sum(sizes))
    bound = study_beta_bound(request.beta_bound, snr=request.snr, sigma=request.sigma)
    tau = study_tau(model, tau=request.tau, beta_bound=bound, sigma=request.sigma, d=request.d)
    kind = get_mechanism(request.mechanism)
    scale: float | None = None
    scales: list[float] | None = None
    smoothing: float | None = None
    clip: float | None = None
    if kind.needs == "scale":
        # A mechanism whose holders take their own scale publishes one only when the
        # operator fixed one s for all.
        scale = request.scale
        if scale is None:
            scale, per_round = published_scales(request, records=sum(sizes), delta=delta, tau=tau)
            scales = None if per_round is None else list(per_round)
        smoothing = smoothing_precision(size, request.zeta)
    elif kind.needs == "clip":
        clip = request.clip
    # Only noise shares need t_min: how many honest holders make the noise.
    t_min = colluders = None
    if kind.noise_site == "shares":
        t_min = study_t_min(request.t_min, len(request.hospitals))
        # On the graph t_min is t_k and c may exceed 2·t_min − K (wire.public_parameters).
        if request.secagg_topology == "mesh":
            colluders = study_colluders(request.colluders, len(request.hospitals), t_min)
    return {
        "model": request.model,
        "model_options": dict(request.model_options),
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
        "schedule": request.schedule,
        "scales": scales,
        "final": request.final,
        "t_min": t_min,
        # β⁰ by the model's public rule, or the operator's (server/runs.py).
        "start": model.start_rule if request.beta0 is None else GIVEN_START,
        "colluders": colluders,
    }
