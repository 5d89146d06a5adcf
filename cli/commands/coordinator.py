"""ldpem coordinator: serve the federated run (FastAPI + uvicorn).

    ldpem coordinator init DIR [--self-signed HOST [--with-localhost]]
    ldpem coordinator [--host H] [--port P] [--state FILE] [--config FILE]
                      [--tls-cert PEM --tls-key PEM] [--admin-token-file FILE]
                      [--read-token-file FILE | --public-status] [--log-format json]

Start with "ldpem coordinator init DIR": it writes DIR/admin.token and DIR/read.token
(mode 600) and prints the command that starts the coordinator. With --self-signed HOST it
also writes a private CA (DIR/ca.pem, sent to every hospital for --ca-cert) and a
certificate for HOST signed by it (DIR/server.pem, DIR/server.key), for trials and
internal networks; a certificate from your own CA goes in --tls-cert/--tls-key instead.

The admin token is read from LDPEM_ADMIN_TOKEN, from --admin-token-file, or from
<state>.admin-token; when none exists, one is generated and written there (mode 600).
The read token (status pages, read API, /metrics) comes from LDPEM_READ_TOKEN,
--read-token-file or <state>.read-token, generated there like the admin token.
--public-status (LDPEM_PUBLIC_STATUS=1) serves run state to anyone who can reach the port
instead. A token or key file that group or others can read is refused (chmod 600 FILE).
Create runs with "ldpem run create".

One coordinator per state: before anything else it locks <state>.lock (flock, released
when it exits, even by SIGKILL), and a second coordinator on the same state exits at once
with one line naming the first one's pid and port.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import logging
import os
import re
import secrets
import shlex
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from ldpem.common.core.errors import UserError
from ldpem.common.infra.locks import LockHeld, hold_lock
from ldpem.logsetup import setup_logging
from ldpem.options import ActionSpec, add_actions
from ldpem.secretfiles import check_private, read_secret, write_secret

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate, GeneralName

    from ldpem.server.settings import Settings

__all__ = ["add_arguments", "resolve_admin_token", "resolve_token"]

#: What "init" writes into its directory.
ADMIN_TOKEN = "admin.token"
READ_TOKEN = "read.token"
CA_CERT = "ca.pem"
SERVER_CERT = "server.pem"
SERVER_KEY = "server.key"
STATE = "coordinator.sqlite"
#: Seconds an idle connection is kept open (uvicorn's default is 5). An agent's requests
#: come seconds apart (a secagg holder's nine a round, with its computation in between);
#: at 5 s most of them opened a new connection on a loaded machine. The agent's link drops
#: its idle connections earlier (client/link.py, KEEPALIVE_EXPIRY), so that it never reuses
#: one the coordinator is closing.
KEEP_ALIVE = 75
#: The port of the command "init" prints with TLS (without: the coordinator's default).
TLS_PORT = 8443
#: Validity of the self-signed certificates: a trial's length, renewed by a new init.
CERT_DAYS = 365
#: A DNS name: dot-separated labels of letters, digits and inner hyphens.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_WHAT = {ADMIN_TOKEN: "admin token", READ_TOKEN: "read token", SERVER_KEY: "TLS private key"}


NAME = "coordinator"
HELP = "run the coordinator service (first: ldpem coordinator init DIR)"
EXAMPLES = (
    "ldpem coordinator init coord --self-signed coord.example",
    "ldpem coordinator --host 0.0.0.0 --port 8443 --state coord/coordinator.sqlite "
    "--admin-token-file coord/admin.token --read-token-file coord/read.token "
    "--tls-cert coord/server.pem --tls-key coord/server.key",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default: 8765)")
    parser.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="SQLite state file; restart on the same file to continue (default: "
        "ldpem-coordinator.sqlite)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="settings file, TOML or JSON (default: none; docs/FEDERATED.md lists the settings)",
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        metavar="PEM",
        help="certificate chain: serve HTTPS (default: plain HTTP)",
    )
    parser.add_argument(
        "--tls-key",
        type=Path,
        metavar="PEM",
        help="private key of --tls-cert, mode 600 (default: none)",
    )
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help="file holding the admin token, mode 600 (default: <state>.admin-token, "
        "generated when missing)",
    )
    parser.add_argument(
        "--read-token-file",
        type=Path,
        metavar="FILE",
        help="file holding the read token for status pages, read API and /metrics, mode 600 "
        "(default: <state>.read-token, generated when missing)",
    )
    parser.add_argument(
        "--public-status",
        action="store_true",
        default=None,
        help="serve status pages, the read API and /metrics without a token",
    )
    parser.add_argument(
        "--log-level",
        help="least severe level logged: debug, info, warning or error (default: info)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="text, or json: one object a line (default: text)",
    )
    parser.set_defaults(handler=run)
    # Not required: without an action, the command runs the coordinator itself.
    add_actions(
        parser,
        ActionSpec(
            "init",
            init_coordinator,
            help="write the tokens (and a self-signed certificate) for a new coordinator",
            description=(
                "Write DIR/admin.token and DIR/read.token (random, mode 600) and print the "
                "command that starts the coordinator with them. With --self-signed HOST, also "
                "write a private CA (DIR/ca.pem: send it to every hospital, whose agents verify "
                "the coordinator with --ca-cert ca.pem) and a certificate for HOST signed by it "
                f"(DIR/server.pem, DIR/server.key), valid {CERT_DAYS} days. That is for trials "
                "and internal networks: the CA's own key is not kept, so nothing else can be "
                "signed with it. A certificate from your organisation's CA (or a public one) "
                "goes in --tls-cert/--tls-key instead, and agents then need no --ca-cert. "
                "Nothing that exists is overwritten."
            ),
            example_lines=(
                "ldpem coordinator init coord --self-signed coord.example",
                "ldpem coordinator init coord --self-signed 127.0.0.1",
            ),
            options=_init_options,
        ),
        required=False,
    )


def _init_options(init: argparse.ArgumentParser) -> None:
    init.add_argument(
        "dir", type=Path, metavar="DIR", help="directory to write to, created mode 700"
    )
    init.add_argument(
        "--self-signed",
        metavar="HOST",
        help="also make a private CA and a TLS certificate for HOST, the name or IP address "
        "the hospitals connect to (default: no certificate)",
    )
    init.add_argument(
        "--with-localhost",
        action="store_true",
        help="the certificate is also valid for 127.0.0.1 and localhost (reaching the "
        "coordinator from its own machine)",
    )


# --- init ------------------------------------------------------------------------------
def _subject_names(host: str, with_localhost: bool) -> list[GeneralName]:
    """The certificate's subject alternative names: HOST (an IP address or a DNS name)."""
    from cryptography import x509

    names: list[str] = [host]
    if with_localhost:
        names += [n for n in ("127.0.0.1", "localhost") if n != host]
    out: list[GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            if not _HOSTNAME.fullmatch(name):
                raise UserError(
                    f"--self-signed: {name!r} is neither an IP address nor a host name"
                ) from None
            out.append(x509.DNSName(name.lower()))
    return out


def _certificate(
    subject: str,
    key: EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: EllipticCurvePrivateKey,
    names: list[GeneralName] | None,
) -> Certificate:
    """A certificate for ``key``: a CA's (``names`` None) or a TLS server's for ``names``,
    with the extensions strict verifiers (Python 3.13's default) require."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    is_ca = names is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # An hour back: a hospital whose clock is a little behind still accepts it.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not is_ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
        )
    )
    if names is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def self_signed(host: str, *, with_localhost: bool = False) -> tuple[bytes, bytes, bytes]:
    """PEM of a new private CA's certificate, of a server certificate for ``host`` signed
    by it, and of the server's private key. The CA's key is dropped here."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    names = _subject_names(host, with_localhost)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = f"ldpem private CA for {host}"
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, None)
    key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(host, key, ca_name, ca_key, names)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pem = serialization.Encoding.PEM
    return ca.public_bytes(pem), server.public_bytes(pem), key_pem


def _start_command(directory: Path, tls: bool) -> list[str]:
    def at(name: str) -> str:
        return str(directory / name)

    command = ["ldpem", "coordinator"]
    if tls:
        command += ["--host", "0.0.0.0", "--port", str(TLS_PORT)]
    command += ["--state", at(STATE)]
    command += ["--admin-token-file", at(ADMIN_TOKEN), "--read-token-file", at(READ_TOKEN)]
    if tls:
        command += ["--tls-cert", at(SERVER_CERT), "--tls-key", at(SERVER_KEY)]
    return command


def init_coordinator(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    if args.with_localhost and args.self_signed is None:
        raise UserError("--with-localhost goes with --self-signed HOST")
    files: dict[str, str | bytes] = {
        ADMIN_TOKEN: secrets.token_urlsafe(32) + "\n",
        READ_TOKEN: secrets.token_urlsafe(32) + "\n",
    }
    if args.self_signed is not None:
        ca, server, key = self_signed(args.self_signed, with_localhost=args.with_localhost)
        files |= {CA_CERT: ca, SERVER_CERT: server, SERVER_KEY: key}
    # All or nothing: refuse before writing if any file exists (a token in use, a key).
    existing = [directory / name for name in files if (directory / name).exists()]
    if existing:
        raise UserError(
            f"{existing[0]}: exists, and ldpem coordinator init never overwrites (a "
            f"coordinator or the hospitals may be using it): init into a new folder "
            f"(ldpem coordinator init NEW_DIR ...), or remove {directory} first if nothing uses it"
        )
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{directory}: cannot create ({error.strerror})") from None
    for name, content in files.items():
        write_secret(directory / name, content, _WHAT.get(name, "certificate"))
    for name in files:
        print(f"wrote {directory / name}")
    print("next, start the coordinator (it keeps running):")
    print("  " + shlex.join(_start_command(directory, args.self_signed is not None)))
    if args.self_signed is None:
        print(
            "that serves plain HTTP on 127.0.0.1; to serve the hospitals' machines add "
            "--host 0.0.0.0 --tls-cert CERT.pem --tls-key KEY.pem (a certificate from your "
            "CA), or run init again in a new DIR with --self-signed HOST"
        )
    else:
        print(
            f"send {directory / CA_CERT} to every hospital (agents: --ca-cert ca.pem); "
            "with a certificate from your own CA instead, pass it and its key as "
            "--tls-cert/--tls-key and agents need no --ca-cert"
        )
    return 0


# --- serve -----------------------------------------------------------------------------
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
    if path.exists() or token_file is not None:
        value = read_secret(path, f"{kind} token")
        if len(value) < 16:
            raise UserError(f"{path}: the {kind} token must be at least 16 characters")
        return value, None
    value = secrets.token_urlsafe(32)
    write_secret(path, value + "\n", f"{kind} token")
    return value, path


#: The settings a command-line flag of the same name overrides (``load_settings``).
_SETTING_FLAGS = (
    "host",
    "port",
    "state",
    "tls_cert",
    "tls_key",
    "admin_token_file",
    "read_token_file",
    "public_status",
    "log_level",
    "log_format",
)


def _state_files(state: Path) -> list[Path]:
    return [state, *(Path(f"{state}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]


def lock_path(state: Path) -> Path:
    """The file a coordinator holds locked while it serves ``state``: ``<state>.lock``."""
    return Path(f"{state}.lock")


def lock_state(state: Path, port: int) -> int:
    """An exclusive lock on ``state`` for this process's lifetime (``common/infra/locks.py``,
    the agent's lock too), taken before anything reads or writes the state: two
    coordinators on one state would each take reports and hold rounds open the other
    never sees. UserError, one line, naming the holder's pid and port when it is held."""
    path = lock_path(state)
    created = not path.exists()
    try:
        return hold_lock(path, port=str(port))
    except LockHeld as held:
        pid, its_port = held.holder.get("pid", "?"), held.holder.get("port", "?")
        raise UserError(
            f"{state}: another coordinator (pid {pid}, port {its_port}) serves this state; "
            "one coordinator per state file: stop that one first, or give this one "
            "another --state"
        ) from None
    except OSError as error:
        if created:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        raise UserError(
            f"{state}: cannot open the coordinator state (its lock file {path}: {error.strerror})"
        ) from None


def run(args: argparse.Namespace) -> int:
    from ldpem.server.settings import load_settings

    flags = {name: getattr(args, name) for name in _SETTING_FLAGS}
    settings = load_settings(args.config, **flags)
    created = not lock_path(settings.state).exists()
    lock = lock_state(settings.state, settings.port)
    try:
        return _serve(settings)
    finally:
        if created and not settings.state.exists():  # a start that failed leaves nothing
            with contextlib.suppress(OSError):
                lock_path(settings.state).unlink()
        os.close(lock)  # the lock is released with its descriptor


def _serve(settings: Settings) -> int:
    """Serve ``settings`` once this process holds the state's lock."""
    import uvicorn

    from ldpem.server.app import create_app
    from ldpem.server.heap import tune_collector

    try:
        setup_logging(settings.log_level, settings.log_format)
    except ValueError as error:
        raise UserError(f"--log-level/--log-format: {error}") from None
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise UserError("--tls-cert and --tls-key go together")
    for path in (settings.tls_cert, settings.tls_key):
        if path is not None and not path.is_file():
            raise UserError(f"{path}: no such file")
    if settings.tls_key is not None:
        check_private(settings.tls_key, "TLS private key")
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
    # Every object alive now lives as long as the process: out of the collector's walks.
    tune_collector()
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
        timeout_keep_alive=KEEP_ALIVE,
    )
    return 0
