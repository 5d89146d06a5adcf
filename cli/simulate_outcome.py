"""The JSON object ``ldpem simulate --json`` prints (``outcome``) from a study's result: the
study's values as resolved, the mechanism's public parameters (per hospital and per round
where they differ), the noise-share figures, the split and the estimate with its errors
and confidence region. ``ldpem.commands.simulate`` reads the command line and prints it
(docs/schemas/simulate.schema.json documents every key)."""

from __future__ import annotations

import math
from typing import Any

from ldpem.common.core.secagg_quantize import modulus_bits
from ldpem.common.mechanisms import Mechanism, SecAggSkellam
from ldpem.common.planning.study import StudyResult
from ldpem.common.protocol import holder_records_per_round

__all__ = ["SPLITS", "outcome", "split_of"]


def _mechanism_fields(result: StudyResult) -> dict[str, Any]:
    """The mechanism's public parameters; with per-hospital mechanisms those of the one
    with the largest scale, plus each hospital's scale and noise std (of its one draw)."""
    mechanism: Mechanism = result.mechanism
    fields: dict[str, Any] = {"noise_std": mechanism.noise_std}
    holders = result.holder_mechanisms
    if holders:
        mechanism = max(holders, key=lambda m: float(getattr(m, "scale", 0.0)))
        fields["noise_std"] = mechanism.noise_std
        fields["holder_scales"] = [float(getattr(m, "scale", math.nan)) for m in holders]
        fields["holder_noise_stds"] = [m.noise_std for m in holders]
    declared = mechanism.declared_fields()
    for name in ("scale", "smoothing", "clip"):
        if name in declared:
            fields[name] = float(getattr(mechanism, name))
    plans = result.round_mechanisms
    if not holders and len({id(plan) for plan in plans}) > 1:
        # A schedule: each round's scale and noise (the fields above are round 0's).
        first = [plan.holders[0] for plan in plans]
        fields["round_noise_stds"] = [m.noise_std for m in first]
        if hasattr(first[0], "scale"):
            fields["round_scales"] = [float(getattr(m, "scale", math.nan)) for m in first]
    return fields


#: What the outcome repeats of the study, in this order: the study's values as given, but
#: for those its data resolved (``_RESOLVED``, read from the result).
_REPEATED = (
    "model",
    "mechanism",
    "n",
    "d",
    "epsilon",
    "delta",
    "rounds",
    "accounting",
    "reuse",
    "schedule",
    "final",
    "hospital_sizes",
    "records_per_round",
    "round_records",
    "seed",
    "sigma",
    "tau",
    "beta_bound",
    "outliers",
)
_RESOLVED = frozenset(
    {"n", "d", "delta", "hospital_sizes", "records_per_round", "round_records", "tau", "beta_bound"}
)


def _share_fields(result: StudyResult) -> dict[str, Any]:
    """For Skellam noise shares (docs/SECAGG.md): t_min, the grid γ, the share's mean λ_s,
    the modulus bits of the aggregation, c (colluders), the ε of the sum with exactly
    t_min − c honest shares and the fallback ε of one holder's share alone (each at the
    study's δ)."""
    mechanism = result.mechanism
    if not isinstance(mechanism, SecAggSkellam):
        return {}
    study = result.study
    participations = study.rounds if study.reuse else 1
    # The most records a round can sum: every holder's largest group (⌊n_k/T⌋ + 1 bounds it).
    most = sum(
        holder_records_per_round(n, study.rounds, reuse=study.reuse) + 1
        for n in result.hospital_sizes
    )
    d = result.parameter_dim
    bits = modulus_bits(
        records=most,
        holders=len(result.hospital_sizes),
        bound=mechanism.record_bound(d),
        grid=mechanism.grid,
        share_mean=mechanism.share_mean,
        d=d,
    )
    return {
        "secagg_topology": study.secagg_topology,
        # On the graph t_min is t_k and the mechanism's c is t_k − h (``shares_threshold``).
        "t_min": mechanism.t_min,
        "colluders": mechanism.colluders,
        "honest_shares": mechanism.noise_shares,
        "dropout": study.dropout,
        "grid": mechanism.grid,
        "share_mean": mechanism.share_mean,
        "modulus_bits": bits,
        "sum_epsilon": mechanism.epsilon(
            d, delta=result.delta, honest=mechanism.noise_shares, participations=participations
        ),
        "fallback_epsilon": mechanism.fallback_epsilon(
            d, delta=result.delta, participations=participations
        ),
    }


#: How each ``split_of`` is told in the summary.
SPLITS = {
    "given": "the sizes given",
    "random": "a random split; --hospitals-sizes fixes the sizes, as `ldpem plan` simulates them",
    "dealt": "as the records were dealt out",
}


def split_of(result: StudyResult) -> str:
    """How the records were split over the hospitals: "given" (--hospitals-sizes),
    "random" (--hospitals K: ``simulation.random_holder_sizes``), "dealt" (records already
    dealt out) or "one" (a single hospital)."""
    if result.study.sizes is not None:
        return "given"
    if len(result.hospital_sizes) == 1:
        return "one"
    return "random" if result.study.hospitals > 1 else "dealt"


def outcome(
    result: StudyResult,
    *,
    warning: str | None,
    seconds: float,
    confidence: dict[str, object] | None = None,
) -> dict[str, Any]:
    """The JSON object of ``ldpem simulate --json``: the study's values (model, mechanism,
    n, d, budget, rounds, schedule, final, hospital sizes, m and each round's m_t, τ, B,
    the mechanism's public parameters, and under a schedule each round's scale and noise),
    beta (the reported estimate), final_weights (of the last iterates it averages),
    beta_star, initial_error, errors (after each round) and error (the reported
    estimate's; the three null without β*), the warning (``planning.beta_zero_warning``),
    seconds, split (``split_of``) and the confidence region
    (``confidence.Confidence.summary``; None when not asked for)."""
    beta_star = result.beta_star
    repeated = {
        name: getattr(result if name in _RESOLVED else result.study, name) for name in _REPEATED
    }
    return {
        **repeated,
        "split": split_of(result),
        **_mechanism_fields(result),
        **_share_fields(result),
        "reporters": list(result.reporters),
        "skipped_rounds": list(result.skipped),
        "beta": [float(v) for v in result.beta],
        "final_weights": list(result.estimate_weights),
        "beta_star": None if beta_star is None else [float(v) for v in beta_star],
        "initial_error": result.initial_error,
        "errors": None if result.errors is None else list(result.errors),
        "error": result.final_error,
        "warning": warning,
        "seconds": seconds,
        "confidence": confidence,
    }
