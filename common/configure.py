"""Build a calibrated mechanism from a privacy budget and the round's public parameters.

This is where calibration (scale, smoothing) and accounting (noise for a budget) meet the
mechanisms; both the simulator and the federated run go through it.
"""

from __future__ import annotations

from ldpem.common._validation import check_count, check_open_unit, check_positive
from ldpem.common.accounting import DEFAULT_ACCOUNTING, noise_std_for
from ldpem.common.calibration import (
    DEFAULT_ZETA,
    central_scale,
    local_scale,
    round_epsilon_tilde,
    smoothing_precision,
    truncation_sensitivity,
)
from ldpem.common.mechanisms import (
    MECHANISM_NAMES,
    CentralClipped,
    CentralTruncation,
    HospitalTruncation,
    LocalClipped,
    LocalTruncation,
    Mechanism,
    NoPrivacy,
)

__all__ = [
    "holder_records_per_round",
    "hospital_scale",
    "local_noise_std",
    "make_mechanism",
    "public_scale",
]


def public_scale(
    mechanism: str,
    *,
    d: int,
    records_per_round: int,
    epsilon: float,
    delta: float,
    tau: float,
    participations: int = 1,
    zeta: float = DEFAULT_ZETA,
) -> float:
    """The truncation scale s of Algorithm 2 for the ``local``, ``central`` or ``hospital``
    mechanism. ``hospital`` uses the central rule with m = ``records_per_round`` the
    records ONE holder reports per round (``holder_records_per_round``), so each holder
    has its own scale, computable from the run's public values and its enrolled count."""
    if mechanism not in ("local", "central", "hospital"):
        raise ValueError(
            f"mechanism must be 'local', 'central' or 'hospital' for a scale, got {mechanism!r}"
        )
    eps_tilde = round_epsilon_tilde(epsilon, delta, participations)
    scale_fn = local_scale if mechanism == "local" else central_scale
    return scale_fn(records=records_per_round, tau=tau, eps_tilde=eps_tilde, d=d, zeta=zeta)


def holder_records_per_round(records: int, rounds: int, *, reuse: bool = False) -> int:
    """m_k, the records a holder with ``records`` records reports in its smallest round:
    ⌊records/rounds⌋ partitioned (at least 1), all of them with ``reuse``."""
    records = check_count("records", records)
    rounds = check_count("rounds", rounds)
    return records if reuse else max(1, records // rounds)


def hospital_scale(
    *,
    records: int,
    rounds: int,
    d: int,
    epsilon: float,
    delta: float,
    tau: float,
    zeta: float = DEFAULT_ZETA,
) -> float:
    """The scale s_k of a holder enrolled with ``records`` records in a partitioned run of
    the ``hospital`` mechanism: Algorithm 2's central rule with m_k = ⌊records/rounds⌋, at
    the run's public (ε, δ). The holder and the coordinator both compute it from public
    values and the enrolled count, so it need not be sent (docs/HOSPITAL.md)."""
    return public_scale(
        "hospital",
        d=d,
        records_per_round=holder_records_per_round(records, rounds),
        epsilon=epsilon,
        delta=delta,
        tau=tau,
        zeta=zeta,
    )


def local_noise_std(
    *,
    scale: float,
    smoothing: float,
    d: int,
    epsilon: float,
    delta: float,
    participations: int = 1,
    accounting: str = DEFAULT_ACCOUNTING,
) -> float:
    """σ of each local report of T(·) at scale s so that ``participations`` reports of one
    record are together (ε, δ)-DP. A data holder computes this itself from its own budget.

    It is also the σ of the hospital-level mechanism's one draw on a holder's sum: replacing
    one record moves that sum by at most as much as it moves the record's own report."""
    return noise_std_for(
        epsilon=epsilon,
        delta=delta,
        sensitivity=truncation_sensitivity(scale, d, smoothing=smoothing),
        participations=participations,
        accounting=accounting,
    )


def make_mechanism(
    name: str,
    *,
    d: int,
    records_per_round: int,
    epsilon: float | None = None,
    delta: float | None = None,
    participations: int = 1,
    tau: float | None = None,
    zeta: float = DEFAULT_ZETA,
    clip: float = 1.0,
    accounting: str = DEFAULT_ACCOUNTING,
    scale: float | None = None,
) -> Mechanism:
    """A mechanism calibrated so that each record, over its ``participations`` rounds, is
    (ε, δ)-DP under ``accounting``.

    ``records_per_round`` is m, the number of records averaged in one round (it sets s in
    Algorithm 2 and the sensitivity of the central average); for ``hospital`` it is m_k,
    the records of ONE holder per round, and the mechanism is that holder's.
    ``scale`` overrides s.
    """
    if name not in MECHANISM_NAMES:
        raise ValueError(f"mechanism must be one of {MECHANISM_NAMES}, got {name!r}")
    d = check_count("d", d)
    records_per_round = check_count("records_per_round", records_per_round)
    if name == "none":
        return NoPrivacy()
    if epsilon is None or delta is None:
        raise ValueError(f"mechanism {name!r} needs epsilon and delta")
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)

    def noise(sensitivity: float) -> float:
        return noise_std_for(
            epsilon=epsilon,
            delta=delta,
            sensitivity=sensitivity,
            participations=participations,
            accounting=accounting,
        )

    if name in ("local-clip", "central-clip"):
        clip = check_positive("clip", clip)
        if name == "local-clip":
            return LocalClipped(clip=clip, noise_std=noise(2.0 * clip))
        return CentralClipped(clip=clip, noise_std=noise(2.0 * clip / records_per_round))

    if scale is None:
        if tau is None:
            raise ValueError(f"mechanism {name!r} needs tau (or an explicit scale)")
        scale = public_scale(
            name,
            d=d,
            records_per_round=records_per_round,
            epsilon=epsilon,
            delta=delta,
            tau=tau,
            participations=participations,
            zeta=zeta,
        )
    smoothing = smoothing_precision(d, zeta)
    if name in ("local", "hospital"):
        kind = LocalTruncation if name == "local" else HospitalTruncation
        return kind(
            scale=scale,
            smoothing=smoothing,
            noise_std=local_noise_std(
                scale=scale,
                smoothing=smoothing,
                d=d,
                epsilon=epsilon,
                delta=delta,
                participations=participations,
                accounting=accounting,
            ),
        )
    sensitivity = truncation_sensitivity(scale, d, smoothing=smoothing) / records_per_round
    return CentralTruncation(scale=scale, smoothing=smoothing, noise_std=noise(sensitivity))
