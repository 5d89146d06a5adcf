"""Run creation: public parameters, start, accuracy forecast, enrolment and round 0."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
import uuid
from collections.abc import Callable

from ldpem.common.errors import UserError
from ldpem.common.planning import BEAT_FRACTION
from ldpem.common.protocol import run_start
from ldpem.common.wire import Forecast, HospitalToken, RunCreate, RunCreated
from ldpem.server.forecast import ForecastOptions, forecast_warning, run_forecast
from ldpem.server.policy import usable_parameters
from ldpem.server.refusals import Conflict, Invalid
from ldpem.server.store import HospitalRow, RunRow, Store

__all__ = ["check_tokens_free", "create_run", "hash_token"]

log = logging.getLogger("ldpem.server")


def hash_token(token: str) -> str:
    """SHA-256 of a bearer token (tokens are 256-bit random, so a fast hash suffices)."""
    return hashlib.sha256(token.encode()).hexdigest()


async def create_run(
    store: Store,
    request: RunCreate,
    *,
    forecast_options: ForecastOptions,
    clock: Callable[[], float],
) -> RunCreated:
    """Create the run of ``request``: its public parameters (or Invalid), start, accuracy
    forecast (simulated from a worker thread as ``forecast_options`` say), tokens and
    round 0, committed in a worker thread."""
    params = usable_parameters(request)
    check_tokens_free(store, request)
    seed = request.seed if request.seed is not None else secrets.randbits(62)
    if request.beta0 is not None:
        beta0 = [float(v) for v in request.beta0]
    else:
        start = run_start(seed, request.d, request.sigma, model=request.model)
        beta0 = [float(v) for v in start]
    trivial = request.snr * request.sigma
    if not math.isfinite(trivial):
        raise Invalid("snr × sigma overflows float64: the run is out of range")
    forecast: Forecast | None = None
    warning: str | None = None
    if request.forecast:
        try:
            forecast = await asyncio.to_thread(
                run_forecast,
                request,
                params,
                seeds=forecast_options.seeds,
                max_records=forecast_options.max_records,
                workers=forecast_options.workers,
                scheduler=forecast_options.scheduler,
            )
            warning = forecast_warning(forecast, BEAT_FRACTION)
        except UserError as error:  # the forecast's Dask scheduler: the run goes on
            log.warning("accuracy forecast skipped: %s", error)
            warning = f"no accuracy forecast: {error}"
        except (ValueError, ArithmeticError) as error:
            log.exception("accuracy forecast failed")
            warning = f"no accuracy forecast: the simulation failed ({error})"
    expected = None if forecast is None else forecast.mean
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
        expected_error=expected,
        trivial_error=trivial,
        warning=warning,
        reason=None,
        forecast=None if forecast is None else forecast.model_dump_json(),
    )

    def insert() -> None:
        with store.transaction():
            # Checked again in the transaction: another run may have taken a token since.
            check_tokens_free(store, request)
            store.insert_run(run, hospitals)
            store.insert_round(run_id, 0, beta0, now, now + request.round_deadline)

    await asyncio.to_thread(insert)
    log.info(
        "run %s created: %s, d=%d, %d rounds, mechanism %s, %d hospitals, expected error %s",
        run_id,
        request.model,
        request.d,
        request.rounds,
        request.mechanism,
        len(hospitals),
        "n/a"
        if forecast is None
        else f"{forecast.mean:.4g} (10-90%: {forecast.low:.4g}-{forecast.high:.4g}, "
        f"{forecast.seeds} seeds)",
        extra={"run": run_id},
    )
    if warning:
        log.warning("run %s: %s", run_id, warning, extra={"run": run_id})
    return RunCreated(
        run_id=run_id,
        params=params,
        tokens=tokens,
        expected_error=expected,
        trivial_error=trivial,
        warning=warning,
        forecast=forecast,
    )


def check_tokens_free(store: Store, request: RunCreate) -> None:
    """Conflict when a token the request brings is enrolled already."""
    for h in request.hospitals:
        if h.token is not None and store.hospital_by_token_hash(hash_token(h.token)):
            raise Conflict(f"the token of hospital {h.name} is already in use")
