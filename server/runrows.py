"""A stored run row decoded: the run by id, its public parameters, its request and its
forecast. Both sides of the coordinator read runs this way: the write side (the round
machine, secure aggregation, the coordinator) and the read side (``queries.py``)."""

from __future__ import annotations

from functools import lru_cache

from ldpem.common.wire import Forecast, PublicParameters, RunCreate
from ldpem.server.refusals import NotFound, shown_run
from ldpem.server.store import RunRow, Store

__all__ = ["forecast_of", "get_run", "params_of", "request_of"]


def get_run(store: Store, run_id: str) -> RunRow:
    """The run ``run_id``; NotFound when there is none."""
    run = store.get_run(run_id)
    if run is None:
        raise NotFound(f"no run {shown_run(run_id)}")
    return run


def params_of(run: RunRow) -> PublicParameters:
    return _parsed_params(run.params)


def request_of(run: RunRow) -> RunCreate:
    return _parsed_request(run.request)


def forecast_of(run: RunRow) -> Forecast | None:
    """The run's stored forecast; None before it was computed."""
    return None if run.forecast is None else _parsed_forecast(run.forecast)


# A run's stored parameters and request never change, and their models are frozen, so one
# parse serves every report: parsing a request that enrols 1,000 hospitals on each report
# made a round O(hospitals²) (docs/perf/HISTORY.md, section 10).
@lru_cache(maxsize=256)
def _parsed_params(text: str) -> PublicParameters:
    return PublicParameters.model_validate_json(text)


@lru_cache(maxsize=256)
def _parsed_request(text: str) -> RunCreate:
    return RunCreate.model_validate_json(text)


@lru_cache(maxsize=256)
def _parsed_forecast(text: str) -> Forecast:
    return Forecast.model_validate_json(text)
