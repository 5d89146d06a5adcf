"""``ldpem coordinator``: serve the federated run (FastAPI + uvicorn).

    ldpem coordinator [--host H] [--port P] [--state FILE] [--config FILE]
                      [--tls-cert PEM --tls-key PEM] [--admin-token-file FILE]
                      [--read-token-file FILE | --public-status] [--log-format json]

The admin token is read from ``LDPEM_ADMIN_TOKEN``, from ``--admin-token-file``, or from
``<state>.admin-token``; when none exists, one is generated and written there (mode 0600).
Create runs with ``ldpem run create`` (or ``POST /v1/runs`` with the admin token).

Run state (status pages, the read API, /metrics) is private: it needs the read token or
the admin token. The read token comes from ``LDPEM_READ_TOKEN``, ``--read-token-file`` or
``<state>.read-token``, generated there like the admin token when none exists.
``--public-status`` (``LDPEM_PUBLIC_STATUS=1``) serves run state to anyone who can reach
the port instead.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any

from ldpem.common.errors import UserError
from ldpem.logsetup import setup_logging

__all__ = ["register", "resolve_admin_token", "resolve_token"]


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "coordinator",
        help="run the coordinator service",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8765)")
    parser.add_argument(
        "--state", type=Path, help="SQLite state file (default ldpem-coordinator.sqlite)"
    )
    parser.add_argument("--config", type=Path, help="settings file (TOML or JSON)")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate: serve HTTPS")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument("--admin-token-file", type=Path, help="file holding the admin token")
    parser.add_argument(
        "--read-token-file", type=Path, help="file holding the read token (status, metrics)"
    )
    parser.add_argument(
        "--public-status",
        action="store_true",
        default=None,
        help="serve status pages, the read API and /metrics without a token",
    )
    parser.add_argument("--log-level", help="debug, info, warning, error (default info)")
    parser.add_argument(
        "--log-format", choices=("text", "json"), help="text (default) or json: one object a line"
    )
    parser.set_defaults(handler=run)


def resolve_admin_token(
    token: str, token_file: Path | None, state: Path
) -> tuple[str, Path | None]:
    """The admin token, and the file it was written to when it had to be generated."""
    return resolve_token(token, token_file, state, kind="admin")


def resolve_token(
    token: str, token_file: Path | None, state: Path, *, kind: str
) -> tuple[str, Path | None]:
    """The ``kind`` ("admin" or "read") token: ``token`` if set, else the content of
    ``token_file`` or ``<state>.<kind>-token``; when neither exists, a new one is written
    to the latter (mode 0600). Returns it and the file it was written to, if generated."""
    if token:
        return token, None
    path = token_file if token_file is not None else Path(f"{state}.{kind}-token")
    if path.exists():
        try:
            value = path.read_text().strip()
        except OSError as error:
            raise UserError(f"{path}: cannot read the {kind} token ({error.strerror})") from None
        if len(value) < 16:
            raise UserError(f"{path}: the {kind} token must be at least 16 characters")
        return value, None
    if token_file is not None:
        raise UserError(f"{token_file}: no such file")
    value = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise UserError(f"{path}: cannot write the {kind} token ({error.strerror})") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        # No partial state: an empty token file would make the next start refuse it.
        path.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write the {kind} token ({error.strerror})") from None
    return value, path


def _state_files(state: Path) -> list[Path]:
    return [state, *(Path(f"{state}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ldpem.server.app import create_app
    from ldpem.server.settings import load_settings

    settings = load_settings(
        args.config,
        host=args.host,
        port=args.port,
        state=args.state,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        admin_token_file=args.admin_token_file,
        read_token_file=args.read_token_file,
        public_status=args.public_status,
        log_level=args.log_level,
        log_format=args.log_format,
    )
    try:
        setup_logging(settings.log_level, settings.log_format)
    except ValueError as error:
        raise UserError(f"--log-level/--log-format: {error}") from None
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise UserError("--tls-cert and --tls-key go together")
    for path in (settings.tls_cert, settings.tls_key):
        if path is not None and not path.is_file():
            raise UserError(f"{path}: no such file")
    fresh = [path for path in _state_files(settings.state) if not path.exists()]
    token, written = resolve_admin_token(
        settings.admin_token, settings.admin_token_file, settings.state
    )
    generated = [] if written is None else [written]
    update: dict[str, object] = {"admin_token": token}
    if not settings.public_status:
        try:
            read, read_written = resolve_token(
                settings.read_token, settings.read_token_file, settings.state, kind="read"
            )
        except UserError:
            for path in generated:
                path.unlink(missing_ok=True)
            raise
        update["read_token"] = read
        generated += [] if read_written is None else [read_written]
    settings = settings.model_copy(update=update)
    log = logging.getLogger("ldpem.server")
    for path in generated:
        log.info("token generated and written to %s", path)
    log.info(
        "run state (status pages, read API, /metrics) is %s",
        "PUBLIC (--public-status)" if settings.public_status else "private: read or admin token",
    )
    scheme = "https" if settings.tls_cert else "http"
    log.info(
        "coordinator on %s://%s:%d, state %s", scheme, settings.host, settings.port, settings.state
    )
    try:
        app = create_app(settings)
    except sqlite3.Error as error:
        # Disk full, read-only directory, not a database: one line, and nothing left
        # behind that this start created.
        for path in [*fresh, *generated]:
            with contextlib.suppress(OSError):  # a read-only directory: nothing was created
                path.unlink(missing_ok=True)
        raise UserError(f"{settings.state}: cannot open the coordinator state ({error})") from None
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # uvicorn's loggers go to the handler of setup_logging (text or JSON, tokens
        # redacted from the access log) instead of uvicorn's own.
        log_config=None,
        ssl_certfile=str(settings.tls_cert) if settings.tls_cert else None,
        ssl_keyfile=str(settings.tls_key) if settings.tls_key else None,
        timeout_graceful_shutdown=2,
    )
    return 0
