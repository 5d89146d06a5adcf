"""The accuracy a run should expect, stated when the run is created, and its warnings.

The run's public parameters and enrolled counts become a ``prediction.Problem`` (the same
prediction as ``ldpem plan``): synthetic data of the run's model, d, σ and the request's
assumed SNR, split over holders with the enrolled record counts (scaled down
proportionally above ``max_records``, which only makes the forecast pessimistic), run
with the mechanism each agent builds at the run's published budget. The forecast is the
mean and 10–90% predictive band of the final errors of ``FORECAST_SEEDS`` simulated runs
on the fast path (``ldpem.common.planning.fastsim``: the distribution of ``ldpem simulate``'s final
error for the run's study with its hospital sizes, tests/common/test_fastsim.py), with
seeds drawn from the problem (``prediction.first_seed``), and the mean at half and twice
the assumed SNR, because the SNR is an assumption the number rests on (unless the
coordinator is told to simulate none: ``ForecastOptions.sensitivity_seeds``). The coordinator
computes it in the background after ``run create`` (``ldpem.server.background``). A
run's schedule and final estimate are the study's too, so the forecast is the error of
the estimate it reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.prediction import SENSITIVITY_SEEDS, Prediction, Problem, outlooks
from ldpem.common.wire import ErrorBand, Forecast, PublicParameters, RunCreate

__all__ = [
    "DEFAULT_FORECAST",
    "DEFAULT_MAX_RECORDS",
    "FORECAST_SEEDS",
    "ForecastOptions",
    "forecast_warning",
    "run_forecast",
    "run_problem",
]

#: Records simulated by the forecast at most, by default (larger runs are scaled down).
DEFAULT_MAX_RECORDS = 200_000
#: Simulated runs behind the forecast's band at the assumed SNR, by default: the band then
#: covers 80% ± 2.8% of new runs (``ldpem.common.planning.prediction``); the bands at half and twice
#: the SNR, only compared with β = 0, take ``SENSITIVITY_SEEDS``.
FORECAST_SEEDS = 200


@dataclass(frozen=True)
class ForecastOptions:
    """How the coordinator forecasts a run (``Settings.forecast_*``)."""

    #: Simulated runs at the assumed SNR.
    seeds: int = FORECAST_SEEDS
    #: Simulated runs at each of half and twice the assumed SNR (at most ``seeds``; 0: no
    #: what-ifs, the forecast's ``sensitivity`` empty and its warning about the assumed
    #: SNR not checked).
    sensitivity_seeds: int = SENSITIVITY_SEEDS
    #: Records simulated at most (larger runs are scaled down).
    max_records: int = DEFAULT_MAX_RECORDS
    #: Local processes of the simulations (None: this machine's cores; 1: serial).
    workers: int | None = None
    #: A Dask distributed scheduler's address that runs the simulations instead
    #: (``common.planning.executor.make_executor``); the numbers are the same.
    scheduler: str | None = None


#: A forecast with every option at its default.
DEFAULT_FORECAST = ForecastOptions()


def run_problem(request: RunCreate, params: PublicParameters) -> Problem:
    """The planning problem of a run: its public parameters and enrolled counts."""
    return Problem(
        model=params.model,
        d=params.d,
        model_options=tuple(sorted(params.model_options.items())),
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
        # A run of noise shares publishes its t_min and c (on the graph: t_k, derived
        # again from c, δ and h by the study); its forecast simulates those.
        **_shares(params),
    )


def _shares(params: PublicParameters) -> dict[str, Any]:
    """The study's noise-share values of a run: t_min and c on the mesh; on the SecAgg+
    graph or expander c, δ and h, from which the study derives t_k (T) as the run did."""
    if params.graph is None:
        return {"t_min": params.t_min, "colluders": params.colluders}
    return {
        "colluders": params.colluders,
        "secagg_topology": params.graph.topology,
        "dropout_share": params.graph.dropout_share,
        "min_honest_shares": params.graph.min_honest_shares,
    }


def _band(prediction: Prediction) -> ErrorBand:
    finite = prediction.mean < float("inf")
    return ErrorBand(
        snr=prediction.problem.snr,
        trivial_error=prediction.problem.trivial_error,
        mean=prediction.mean if finite else None,
        low=prediction.low if finite else None,
        high=prediction.high if finite else None,
    )


def run_forecast(
    request: RunCreate,
    params: PublicParameters,
    options: ForecastOptions = DEFAULT_FORECAST,
) -> Forecast | None:
    """The forecast of a run (module docstring), ``options.seeds`` simulated runs on
    ``options.workers`` processes (default: this machine's cores) or on the Dask cluster of
    ``options.scheduler``; None when its simulated runs diverge. UserError when the
    scheduler cannot be reached."""
    problem = run_problem(request, params)
    with make_executor(options.scheduler, workers=options.workers) as executor:
        (outlook,) = outlooks(
            problem,
            [params.mechanism],
            seeds=options.seeds,
            sensitivity_seeds=options.sensitivity_seeds,
            max_records=options.max_records,
            executor=executor,
        )
    main = _band(outlook.prediction)
    if main.mean is None:
        return None
    return Forecast(
        **main.model_dump(),
        seeds=outlook.prediction.seeds,
        first_seed=outlook.prediction.first_seed,
        records=outlook.prediction.problem.n,
        sensitivity=[_band(p) for p in outlook.sensitivity],
    )


def forecast_warning(forecast: Forecast | None, beat_fraction: float) -> str | None:
    """What ``run create`` warns about: a forecast whose mean is not below
    ``beat_fraction`` of the trivial estimate's error (the planner's criterion; β = 0, or
    for a K-component model the better of β = 0 and its public start, docs/MATH.md §7),
    and a forecast that would be worse than the trivial estimate at half the assumed SNR.
    None: nothing to warn about."""
    if forecast is None:
        return "the simulated run diverges: expect no useful estimate"
    found = []
    assert forecast.mean is not None and forecast.low is not None and forecast.high is not None
    band = f"10–90% of {forecast.seeds} simulated runs: {forecast.low:.3g}–{forecast.high:.3g}"
    if forecast.mean > beat_fraction * forecast.trivial_error:
        # The same criterion as `ldpem plan`: the run starts at a random β of norm σ,
        # already about ‖β*‖ away, so only a clearly lower error shows learning.
        found.append(
            f"expected error {forecast.mean:.3g} ({band}) is not below half the error of "
            f"the trivial estimate ({forecast.trivial_error:.3g} at snr {forecast.snr:g}): "
            "the estimate will probably be no better than the trivial estimate; more "
            "records, a larger epsilon, fewer rounds or another mechanism are needed (see "
            "`ldpem plan`)"
        )
    lower = [b for b in forecast.sensitivity if b.snr < forecast.snr]
    half = min(lower, key=lambda b: b.snr, default=None)
    if half is not None and (half.mean is None or half.mean > half.trivial_error):
        expected = "diverges" if half.mean is None else f"is {half.mean:.3g}"
        found.append(
            f"the forecast rests on the assumed snr {forecast.snr:g}: at snr {half.snr:g} "
            f"the expected error {expected}, worse than the trivial estimate "
            f"({half.trivial_error:.3g}); "
            f"check the assumed ‖β*‖/σ before trusting the forecast {forecast.mean:.3g}"
        )
    return "; ".join(found) or None
