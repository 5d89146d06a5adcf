"""A real PostgreSQL server for the tests, from Debian's ``postgresql`` package.

``start_postgres`` answers with a running server or the reason there can be none:
  * the binaries are found under /usr/lib/postgresql/<version>/bin (highest version) or on
    PATH; when missing they are installed with ``apt-get install postgresql`` ONLY when
    running as root with CI=true or LDPEM_TEST_POSTGRES=1 (otherwise: the reason to skip);
  * ``initdb`` makes a cluster in a temporary directory with password (scram-sha-256)
    authentication for its superuser, and ``pg_ctl`` serves it on a Unix socket in that
    directory only (no TCP). PostgreSQL refuses to run as root: as root, the directory is
    given to the ``postgres`` user (or ``nobody``) and the commands run through ``runuser``.
``Postgres.stop`` stops the server (``pg_ctl stop -m fast``) and removes the directory.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PASSWORD", "USER", "Postgres", "start_postgres"]

USER = "ldpem_test"
#: The superuser's password in the throw-away cluster (a test value; never a real secret).
PASSWORD = "pw-Zq81-not-a-secret"
_PORT = 5433  # only names the socket file (.s.PGSQL.5433): no TCP listener is opened


@dataclass
class Postgres:
    root: Path
    bin: Path
    run_as: str | None

    @property
    def socket_dir(self) -> Path:
        return self.root

    def url(self, database: str = "postgres", *, user: str = USER) -> str:
        """A URL without password: libpq gets it from PGPASSWORD, a file or --password-file."""
        return f"postgresql://{user}@/{database}?host={self.socket_dir}&port={_PORT}"

    def conninfo(self) -> str:
        return (
            f"host={self.socket_dir} port={_PORT} user={USER} dbname=postgres password={PASSWORD}"
        )

    def command(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *args] if self.run_as else list(args)

    def stop(self) -> None:
        subprocess.run(
            self.command(
                str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop"
            ),
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _find_bin() -> Path | None:
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(re.sub(r"\D", "", p.parent.parent.name) or 0),
    )
    if versions:
        return versions[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _install() -> str | None:
    """Install Debian's postgresql with apt-get when allowed; the reason it cannot, or None."""
    allowed = os.environ.get("CI") == "true" or os.environ.get("LDPEM_TEST_POSTGRES") == "1"
    if not allowed:
        return (
            "PostgreSQL (initdb, pg_ctl) not installed; set LDPEM_TEST_POSTGRES=1 (as root) to "
            "install Debian's postgresql package, or install it yourself"
        )
    if os.geteuid() != 0:
        return "PostgreSQL not installed, and installing it with apt-get needs root"
    if shutil.which("apt-get") is None:
        return "PostgreSQL not installed, and there is no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "postgresql"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            return f"{' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}"
    return None


def start_postgres() -> Postgres | str:
    """A running throw-away server, or the reason none can be started here."""
    bin_dir = _find_bin()
    if bin_dir is None:
        reason = _install()
        if reason is not None:
            return reason
        bin_dir = _find_bin()
        if bin_dir is None:
            return "apt-get installed postgresql, but no initdb was found"
    run_as: str | None = None
    if os.geteuid() == 0:
        for name in ("postgres", "nobody"):
            try:
                pwd.getpwnam(name)
            except KeyError:
                continue
            run_as = name
            break
        if run_as is None or shutil.which("runuser") is None:
            return "running as root without a postgres/nobody user or runuser to drop to"
    # Short path: a Unix socket's path must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="ldpem-pg-", dir="/tmp"))
    postgres = Postgres(root, bin_dir, run_as)
    password_file = root / "pwfile"
    password_file.write_text(PASSWORD + "\n")
    if run_as is not None:
        user = pwd.getpwnam(run_as)
        os.chown(root, user.pw_uid, user.pw_gid)
        os.chown(password_file, user.pw_uid, user.pw_gid)
    data = root / "data"
    steps = [
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "--encoding=UTF8",
            "--no-sync",
        ],
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-c listen_addresses='' -k {root} -p {_PORT} -c fsync=off",
            "start",
        ],
    ]
    for step in steps:
        done = subprocess.run(
            postgres.command(*step), capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            log = root / "server.log"
            tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
            postgres.stop()
            return f"{Path(step[0]).name} exited {done.returncode}: {done.stderr[-800:]} {tail}"
    password_file.unlink()
    return postgres
