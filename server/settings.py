"""Coordinator settings: defaults < config file (--config, TOML or JSON) < environment
(``LDPEM_*``) < command-line flags."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ldpem.common.core.errors import UserError
from ldpem.common.planning.confidence import DEFAULT_DRAWS, DEFAULT_LEVEL, least_draws
from ldpem.common.planning.prediction import SENSITIVITY_SEEDS
from ldpem.server.forecast import DEFAULT_MAX_RECORDS, FORECAST_SEEDS

__all__ = ["Settings", "load_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LDPEM_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    #: SQLite state file.
    state: Path = Path("ldpem-coordinator.sqlite")
    #: Admin bearer token; when empty, one is generated and written next to the state file.
    admin_token: str = ""
    admin_token_file: Path | None = None
    #: Read bearer token: status pages, read API and /metrics. When empty, one is generated
    #: and written next to the state file (``<state>.read-token``), like the admin token.
    read_token: str = ""
    read_token_file: Path | None = None
    #: Serve the status pages, read API and /metrics to anyone who can reach the port.
    public_status: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Largest accepted request body in bytes.
    max_body: int = Field(default=1 << 20, ge=1024)
    #: Longest long-poll a client may ask for, in seconds. Agents ask up to 300 s for a
    #: secure-aggregation step's answer (``client.secagg.STEP_WAIT``): a lower cap makes
    #: every survivor of a step that waits for its deadline re-ask each max_wait seconds.
    max_wait: float = Field(default=300.0, gt=0)
    #: How often round deadlines are checked, in seconds.
    tick: float = Field(default=0.5, gt=0)
    #: Seconds a report waits for others to share its durable commit (group commit).
    commit_window: float = Field(default=0.002, ge=0, le=1)
    #: Simulated runs behind the band of the accuracy forecast made (in the background)
    #: when a run is created, at the assumed SNR (``ldpem.server.forecast``; 10 at half
    #: and twice it; fewer than 20 make a band of little use).
    forecast_seeds: int = Field(default=FORECAST_SEEDS, ge=1, le=1000)
    #: Simulated runs behind the forecast's what-ifs at half and twice the assumed SNR,
    #: each (at most forecast_seeds; 0: none, and ``run create``'s warning that half the
    #: SNR would do no better than β = 0 is not checked).
    forecast_sensitivity_seeds: int = Field(default=SENSITIVITY_SEEDS, ge=0, le=1000)
    #: Records simulated by the forecast at most (larger runs are scaled down).
    forecast_max_records: int = Field(default=DEFAULT_MAX_RECORDS, ge=1000)
    #: Processes the forecast simulates on (default: this machine's cores; 1: serial).
    forecast_workers: int | None = Field(default=None, ge=1)
    #: The forecast's simulations run on this Dask distributed cluster
    #: (``tcp://HOST:8786``, needs ``ldpem[dask]``) instead of local processes.
    forecast_scheduler: str | None = Field(default=None, pattern=r"^(tcp|tls)://\S+$")
    #: Parametric bootstrap draws behind a finished run's confidence region (0: none;
    #: otherwise at least 19 at level 0.9: ``common.planning.confidence.least_draws``). They run
    #: where the forecast's simulations run (forecast_workers, forecast_scheduler).
    confidence_draws: int = Field(default=DEFAULT_DRAWS, ge=0, le=100_000)
    #: The confidence region's level.
    confidence_level: float = Field(default=DEFAULT_LEVEL, gt=0, lt=1)
    #: Multiple k of √count·σ_r allowed beyond count·bound in the honest-range check.
    range_sigmas: float = Field(default=10.0, gt=0)
    #: Largest σ_r accepted, as a multiple of the σ_r of the run's own budget.
    max_noise_factor: float = Field(default=10.0, ge=1)
    log_level: str = "info"
    #: ``text`` or ``json`` (one JSON object per line; see ldpem.common.infra.logs).
    log_format: Literal["text", "json"] = "text"

    @model_validator(mode="after")
    def _enough_draws(self) -> Settings:
        least = least_draws(self.confidence_level)
        if 0 < self.confidence_draws < least:
            raise ValueError(
                f"confidence_draws must be 0 or >= {least} at confidence_level "
                f"{self.confidence_level:g}, got {self.confidence_draws}"
            )
        return self


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Settings from ``config`` (TOML or JSON) and the environment, then ``overrides``
    (those that are not None)."""
    values: dict[str, Any] = {}
    if config is not None:
        try:
            text = config.read_text()
        except OSError as error:
            raise UserError(f"{config}: cannot read config ({error.strerror})") from None
        try:
            loaded = json.loads(text) if config.suffix == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as error:
            raise UserError(f"{config}: not valid {config.suffix or 'TOML'} ({error})") from None
        if not isinstance(loaded, dict):
            raise UserError(f"{config}: expected a table of settings")
        values.update(loaded.get("coordinator", loaded))
    # The environment overrides the file: drop file values whose variable is set.
    values = {k: v for k, v in values.items() if f"LDPEM_{k}".upper() not in os.environ}
    values.update({k: v for k, v in overrides.items() if v is not None})
    merged = values
    try:
        return Settings(**merged)
    except ValueError as error:
        raise UserError(f"coordinator settings: {error}".replace("\n", " ")) from None
