"""A Docker engine and the test images, made here without any image registry.

``start_engine`` answers with a running engine or the reason there can be none:
  * missing tools (dockerd, docker, docker-compose, debootstrap) are installed as root with
    apt-get from Debian's docker.io, docker-compose and debootstrap packages;
  * an engine that already answers ``docker info`` is used as it is; otherwise ``dockerd``
    is started in the background (log in the work folder), first as configured by
    default, then with the vfs storage driver and no iptables, and stopped afterwards.
``base_image`` builds ``ldpem-test-base``: a debootstrap of Debian bookworm (minbase with
python3, pip, venv, ca-certificates) from the host's apt mirror, ``docker import``-ed;
kept between runs. ``ca_base_image`` derives ``ldpem-test-base-ca`` from it with the
host's CA bundle, for pip behind an intercepting proxy: a test-only layer, the project's
Dockerfile has no such step.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BASE_IMAGE",
    "CA_BASE_IMAGE",
    "Engine",
    "base_image",
    "ca_base_image",
    "debian_mirror",
    "docker",
    "start_engine",
]

BASE_IMAGE = "ldpem-test-base"
CA_BASE_IMAGE = "ldpem-test-base-ca"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_PACKAGES = ("docker.io", "docker-compose", "debootstrap")
_TOOLS = ("dockerd", "docker", "docker-compose", "debootstrap")


@dataclass
class Engine:
    """A usable engine; ``process`` is the dockerd this harness started (stopped by
    ``stop``), None for an engine that was already running."""

    process: subprocess.Popen[bytes] | None
    log: Path | None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def docker(
    *args: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``docker ARGS``, output captured as text."""
    # The legacy builder: docker-compose v1 uses it too, and it needs no buildx plugin.
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"docker {' '.join(args)} exited {result.returncode}: {result.stderr[-3000:]}"
        )
    return result


def _answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return docker("info", timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _install(log: Path) -> str | None:
    """Install the missing tools with apt-get; the reason it cannot, or None."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if not missing:
        return None
    if os.geteuid() != 0:
        return f"{', '.join(missing)} missing, and installing them needs root"
    if shutil.which("apt-get") is None:
        return f"{', '.join(missing)} missing, and there is no apt-get to install them"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("ab") as out:
        for command in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", *_PACKAGES],
        ):
            code = subprocess.run(command, stdout=out, stderr=out, env=env, timeout=900).returncode
            if code != 0:
                return f"{' '.join(command)} exited {code} (log: {log})"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    return f"still missing after apt-get: {', '.join(missing)}" if missing else None


def start_engine(workdir: Path) -> Engine | str:
    """A running engine, or the reason none can be started here."""
    workdir.mkdir(parents=True, exist_ok=True)
    reason = _install(workdir / "apt.log")  # docker-compose and debootstrap are needed too
    if reason is not None:
        return reason
    if _answers():  # already running, or started by the package's own service
        return Engine(None, None)
    attempts: tuple[list[str], ...] = ([], ["--storage-driver=vfs", "--iptables=false"])
    for number, extra in enumerate(attempts):
        log = workdir / f"dockerd-{number}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["dockerd", *extra], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if _answers():
                return Engine(process, log)
            time.sleep(1)
        Engine(process, log).stop()
    tail = (workdir / "dockerd-0.log").read_text(errors="replace")[-1500:]
    return f"dockerd did not start (logs in {workdir}): {tail}"


def debian_mirror() -> str:
    """The host's Debian mirror (not the security archive), from apt's sources."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^(?:URIs:|deb)\s+(\S+)", text, re.MULTILINE):
            url = match.group(1)
            if re.search(r"/debian/?$", url):
                return url
    return "http://deb.debian.org/debian"


def _has_image(name: str) -> bool:
    return docker("image", "inspect", name, timeout=60, check=False).returncode == 0


def base_image(workdir: Path) -> str:
    """``ldpem-test-base``, made by debootstrap and ``docker import`` unless it exists."""
    if _has_image(BASE_IMAGE):
        return BASE_IMAGE
    workdir.mkdir(parents=True, exist_ok=True)
    rootfs = Path(tempfile.mkdtemp(prefix="ldpem-rootfs-", dir="/var/tmp"))
    try:
        with (workdir / "debootstrap.log").open("wb") as out:
            subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    "--include=python3,python3-pip,python3-venv,ca-certificates",
                    "bookworm",
                    str(rootfs),
                    debian_mirror(),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=1200,
            )
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", BASE_IMAGE],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr[-2000:]}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return BASE_IMAGE


def ca_base_image(workdir: Path) -> str:
    """``ldpem-test-base-ca``: the base image trusting the host's CA bundle (for pip)."""
    base = base_image(workdir)
    context = workdir / "ca-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copyfile(HOST_CA_BUNDLE, context / "host-ca.crt")
    target = "/usr/local/share/ldpem-test/host-ca.crt"
    (context / "Dockerfile").write_text(
        f"FROM {base}\n"
        f"COPY host-ca.crt {target}\n"
        f"ENV PIP_CERT={target} SSL_CERT_FILE={target} REQUESTS_CA_BUNDLE={target}\n"
    )
    docker("build", "-q", "-t", CA_BASE_IMAGE, str(context), timeout=600)
    return CA_BASE_IMAGE
