"""What the coordinator states about a run's accuracy, on the wire: the forecast before it
(what ``run create`` answers and a run's summary keeps; ``ldpem.server.forecast`` makes it
from ``ldpem.common.planning.prediction``) and the confidence region after it (what ``run
status`` shows once the coordinator's parametric bootstrap,
``ldpem.common.planning.confidence``, is done)."""

from __future__ import annotations

from ldpem.common.wire.base import Schema

__all__ = ["ConfidenceRegion", "ErrorBand", "Forecast"]


class ErrorBand(Schema):
    """Final errors of simulated runs at one ‖β*‖/σ: their mean and 10–90% band
    (``ldpem.common.planning.prediction``); None where the simulated runs diverge."""

    snr: float
    #: The error of β = 0 at that SNR: ‖β*‖ = snr·σ.
    trivial_error: float
    mean: float | None
    low: float | None
    high: float | None


class Forecast(ErrorBand):
    """The accuracy forecast a coordinator states when it creates a run: at the request's
    assumed ‖β*‖/σ, and in ``sensitivity`` at half and twice it (the same run: its public
    parameters stay those of the assumed SNR)."""

    #: Simulated runs behind each band, with seeds first_seed, first_seed + 1, …
    seeds: int
    first_seed: int
    #: Records simulated (the run's, scaled down in proportion above the coordinator's
    #: forecast_max_records).
    records: int
    sensitivity: list[ErrorBand]


class ConfidenceRegion(Schema):
    """A region at ``level`` around the run's reported estimate β̂ (d): coordinate j's
    interval [low[j], high[j]] and the radius r of ‖β − β̂‖₂ ≤ r (up to sign for the
    symmetric models), from ``draws`` bootstrap runs (``method``). An end or radius is
    None where the draws diverged (unbounded)."""

    level: float
    low: list[float | None]
    high: list[float | None]
    radius: float | None
    draws: int
    method: str
