"""Run creation: public parameters, start, enrolment and round 0; the accuracy forecast as a
background job (``ForecastJob``, run by ``ldpem.server.background``)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ldpem.common.core.errors import UserError
from ldpem.common.planning.plan import BEAT_FRACTION
from ldpem.common.protocol import configured_model, run_start
from ldpem.common.wire import Forecast, HospitalToken, PublicParameters, RunCreate, RunCreated
from ldpem.server.forecast import ForecastOptions, forecast_warning, run_forecast
from ldpem.server.policy import usable_parameters
from ldpem.server.refusals import Conflict, Invalid
from ldpem.server.store import HospitalRow, RunRow, Store

__all__ = [
    "FORECAST",
    "ForecastJob",
    "check_tokens_free",
    "create_run",
    "forecast_due",
    "hash_token",
]

#: The kind of the forecast among a run's derived results (``RunSummary.pending``).
FORECAST = "forecast"

log = logging.getLogger("ldpem.server")


def hash_token(token: str) -> str:
    """SHA-256 of a bearer token (tokens are 256-bit random, so a fast hash suffices)."""
    return hashlib.sha256(token.encode()).hexdigest()


async def create_run(store: Store, request: RunCreate, *, clock: Callable[[], float]) -> RunCreated:
    """Create the run of ``request``: its public parameters (or Invalid), start, tokens and
    round 0, committed in a worker thread. Its forecast is not made here: the coordinator
    computes it in the background (``forecast_job``), so this returns at once."""
    params = usable_parameters(request)
    check_tokens_free(store, request)
    seed = request.seed if request.seed is not None else secrets.randbits(62)
    if request.beta0 is not None:
        beta0 = [float(v) for v in request.beta0]
    else:
        start = run_start(seed, request.d, request.sigma, model=configured_model(request))
        beta0 = [float(v) for v in start]
    # The error of the estimate that ignores the data, as the plan reads it (a mixture's is
    # not snr·σ: docs/MATH.md §7, "The trivial estimate"), in a worker thread: a mixture's
    # averages seeded starts, seconds for a large d.
    _, trivial = await asyncio.to_thread(
        configured_model(request).trivial_estimate,
        request.d,
        snr=request.snr,
        sigma=request.sigma,
    )
    if not math.isfinite(trivial):
        raise Invalid("snr × sigma overflows float64: the run is out of range")
    run_id = uuid.uuid4().hex[:12]
    tokens: list[HospitalToken] = []
    hospitals: list[HospitalRow] = []
    for h in request.hospitals:
        token = h.token
        if token is None:
            token = secrets.token_urlsafe(32)
            tokens.append(HospitalToken(name=h.name, token=token))
        hospitals.append(
            HospitalRow(run_id=run_id, name=h.name, records=h.records, token_hash=hash_token(token))
        )
    # Tokens are never stored: the request is saved without them.
    stored_request = request.model_copy(
        update={
            "hospitals": [h.model_copy(update={"token": None}) for h in request.hospitals],
            "seed": seed,
        }
    )
    quorum = request.quorum if request.quorum is not None else len(request.hospitals)
    now = clock()
    run = RunRow(
        id=run_id,
        request=stored_request.model_dump_json(),
        params=params.model_dump_json(),
        status="running",
        current_round=0,
        beta=beta0,
        quorum=quorum,
        seed=seed,
        created_at=now,
        expected_error=None,
        trivial_error=trivial,
        warning=None,
        reason=None,
        forecast=None,
    )

    def insert() -> None:
        with store.transaction():
            # Checked again in the transaction: another run may have taken a token since.
            check_tokens_free(store, request)
            store.insert_run(run, hospitals)
            store.insert_round(run_id, 0, beta0, now, now + request.round_deadline)

    await asyncio.to_thread(insert)
    log.info(
        "run %s created: %s, d=%d, %d rounds, mechanism %s, %d hospitals%s",
        run_id,
        request.model,
        request.d,
        request.rounds,
        request.mechanism,
        len(hospitals),
        ", forecast pending" if request.forecast else "",
        extra={"run": run_id},
    )
    return RunCreated(
        run_id=run_id,
        params=params,
        tokens=tokens,
        expected_error=None,
        trivial_error=trivial,
        warning=None,
        forecast=None,
        pending=[FORECAST] if request.forecast else [],
    )


@dataclass(frozen=True)
class ForecastJob:
    """The forecast of one run as a background job (``ldpem.server.background``):
    ``compute`` simulates (seconds), ``save`` stores the forecast, its mean and warning,
    ``failed`` stores why there is none."""

    store: Store
    run_id: str
    request: RunCreate
    params: PublicParameters
    options: ForecastOptions

    def compute(self) -> Forecast | None:
        return run_forecast(self.request, self.params, self.options)

    def save(self, forecast: Forecast | None) -> None:
        warning = forecast_warning(forecast, BEAT_FRACTION)
        self.store.set_forecast(
            self.run_id,
            forecast=None if forecast is None else forecast.model_dump_json(),
            expected_error=None if forecast is None else forecast.mean,
            warning=warning,
        )
        run = self.run_id
        if forecast is not None:
            log.info(
                "run %s forecast: expected error %.4g (10-90%%: %.4g-%.4g, %d seeds)",
                run,
                forecast.mean,
                forecast.low,
                forecast.high,
                forecast.seeds,
                extra={"run": run},
            )
        if warning:
            log.warning("run %s: %s", run, warning, extra={"run": run})

    def failed(self, error: Exception) -> None:
        if isinstance(error, UserError):  # the forecast's Dask scheduler: the run goes on
            warning = f"no accuracy forecast: {error}"
        else:
            warning = f"no accuracy forecast: the simulation failed ({error})"
        self.store.set_forecast(self.run_id, forecast=None, expected_error=None, warning=warning)


def forecast_due(run: RunRow) -> bool:
    """Whether the run asked for a forecast that was neither stored nor given up on (a
    coordinator stopped while computing it): ``resume`` submits it again."""
    try:
        request = RunCreate.model_validate_json(run.request)
    except ValueError:  # a state file older than the request it would need: no forecast
        return False
    return request.forecast and run.forecast is None and run.warning is None


def check_tokens_free(store: Store, request: RunCreate) -> None:
    """Conflict when a token the request brings is enrolled already."""
    for h in request.hospitals:
        if h.token is not None and store.hospital_by_token_hash(hash_token(h.token)):
            raise Conflict(f"the token of hospital {h.name} is already in use")
