"""docker-compose.yml for real: build the image, ``docker-compose up``, a federated run;
then the image's layers hold no source, and the README's reset command removes the
coordinator's state and the records but spares the hospitals' ledgers.

The engine and the base image come from ``engine.py`` (no registry needed). Skipped, with
the reason printed, only where no Docker engine can be started; any later problem fails.
Phase timings are printed to stderr (and kept in the work folder's ``timings.txt``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from ldpem.cli import main as ldpem_main
from ldpem.common.models import get_model
from ldpem.processes import free_port
from tests.deploy import engine

pytestmark = pytest.mark.compose

ROOT = Path(__file__).resolve().parents[2]
WORKDIR = Path(os.environ.get("LDPEM_COMPOSE_WORKDIR", "/var/tmp/ldpem-compose-test"))
IMAGE = "ldpem-test:latest"
RUN_TIMEOUT = 600.0
_FINAL = re.compile(
    r"final error ([0-9.]+) after (\d+) rounds \(trivial error of beta = 0: ([0-9.]+)"
)


_config: list[pytest.Config] = []


def _say(message: str) -> None:
    """Shown on the terminal even under pytest's (fd-level) output capture."""
    line = f"[compose test] {message}"
    capture = _config[0].pluginmanager.getplugin("capturemanager") if _config else None
    if capture is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(line, file=sys.stderr, flush=True)


@dataclass
class Project:
    name: str
    env: dict[str, str]
    port: int
    timings: dict[str, float] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "-p", self.name, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def checked(self, *args: str, timeout: float = 900) -> str:
        result = self.compose(*args, timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(
                f"docker-compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result.stdout

    def container(self, service: str) -> str:
        return self.checked("ps", "-q", service).strip()

    def state(self, service: str) -> tuple[str, int, str]:
        """(status, exit code, health) of the service's container."""
        fmt = "{{.State.Status}} {{.State.ExitCode}} "
        fmt += "{{if .State.Health}}{{.State.Health.Status}}{{end}}"
        out = engine.docker("inspect", "-f", fmt, self.container(service)).stdout.split()
        return out[0], int(out[1]), out[2] if len(out) > 2 else ""

    def timed(self, phase: str, start: float) -> None:
        self.timings[phase] = time.monotonic() - start
        _say(f"{phase}: {self.timings[phase]:.1f} s")


@pytest.fixture(scope="module")
def project(pytestconfig: pytest.Config) -> Iterator[Project]:
    _config[:] = [pytestconfig]
    start = time.monotonic()
    started = engine.start_engine(WORKDIR)
    if isinstance(started, str):
        reason = f"no Docker engine can be started here: {started}"
        _say(f"SKIPPED: {reason}")
        pytest.skip(reason)
    env = {
        **os.environ,
        "LDPEM_IMAGE": IMAGE,
        "LDPEM_PORT": str(free_port()),
        "DOCKER_BUILDKIT": "0",
        "COMPOSE_DOCKER_CLI_BUILD": "0",
    }
    project = Project(f"ldpem-test-{os.getpid()}", env, int(env["LDPEM_PORT"]))
    project.timed("engine", start)
    try:
        start = time.monotonic()
        env["LDPEM_BASE_IMAGE"] = engine.ca_base_image(WORKDIR)
        project.timed("base image (debootstrap + import, cached)", start)
        start = time.monotonic()
        project.checked("build", timeout=1500)
        project.timed("project image build (cached layers)", start)
        yield project
    finally:
        project.compose("down", "-v", "--remove-orphans", timeout=300)
        (WORKDIR / "timings.txt").write_text(
            "".join(f"{k}: {v:.1f} s\n" for k, v in project.timings.items())
        )
        started.stop()


def _study_beta_star(tmp_path: Path) -> tuple[list[float], str]:
    """β* of the compose file's study, generated here from the same ``ldpem generate``
    options as hospital-a's, independently of the containers."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service = compose["services"]["hospital-a"]
    words = shlex.split(service["command"][0].replace("$$LDPEM_PART", "1"))
    generate = words[1 : words.index("&&")]
    out = tmp_path / "records.npy"
    beta_file = tmp_path / "beta_star.json"
    options = dict(zip(generate[1::2], generate[2::2], strict=True))
    options.update({"--out": str(out), "--beta-star-out": str(beta_file)})
    argv = ["generate", *[word for pair in options.items() for word in pair]]
    assert ldpem_main(argv) == 0
    return json.loads(beta_file.read_text())["beta_star"], options["--model"]


def test_compose_up_runs_a_federated_run_to_a_small_error(project: Project, tmp_path: Path) -> None:
    start = time.monotonic()
    project.checked("up", "-d", timeout=600)
    deadline = time.monotonic() + RUN_TIMEOUT
    while project.state("watch")[0] != "exited":
        assert time.monotonic() < deadline, (
            "the run did not end in time:\n" + project.checked("logs", "--no-color")[-6000:]
        )
        time.sleep(2)
    project.timed("docker-compose up to the end of the run", start)
    logs = project.checked("logs", "--no-color")
    (WORKDIR / "compose.log").write_text(logs)
    tail = logs[-6000:]

    states = {s: project.state(s) for s in ("coordinator", "run", "watch")}
    hospitals = [f"hospital-{x}" for x in "abc"]
    states.update({h: project.state(h) for h in hospitals})
    assert states["coordinator"][0] == "running" and states["coordinator"][2] == "healthy", tail
    for service in ("run", "watch", *hospitals):
        assert states[service][:2] == ("exited", 0), f"{service}: {states[service]}\n{tail}"
    for hospital in hospitals:
        assert re.search(rf"{hospital}_1 +\| .*round 9: report accepted", logs), tail

    final = _FINAL.search(logs)
    assert final is not None, tail
    error, rounds, trivial = float(final[1]), int(final[2]), float(final[3])
    assert rounds == 10
    assert error < 0.5 * trivial, final[0]

    # The same from the host, through the published port, against β* generated here.
    base = f"http://127.0.0.1:{project.port}"
    runs = httpx.get(f"{base}/v1/runs", timeout=10).json()
    assert [r["status"] for r in runs] == ["finished"]
    beta_star, model = _study_beta_star(tmp_path)
    assert float(np.linalg.norm(beta_star)) == pytest.approx(trivial, abs=1e-4)
    host_error = get_model(model).error(np.array(runs[0]["beta"]), np.array(beta_star))
    assert host_error == pytest.approx(error, abs=1e-4)
    page = httpx.get(f"{base}/runs/{runs[0]['run_id']}", timeout=10)
    assert page.status_code == 200 and "finished" in page.text
    _say(f"final error {error:.4f} (trivial {trivial:.4f}); {final[0]}")


#: Files of the checkout that must not be in any layer of the image (the build stage's
#: /src, our wheel, the compose and test files). Other wheels are the base image's own
#: (Debian's python3-venv keeps pip's and setuptools' in /usr/share/python-wheels).
_SOURCE_ONLY = re.compile(
    r"(^|/)(src/pyproject\.toml|docker-compose\.yml|test_compose\.py|test\.lock"
    r"|ldpem-[^/]*\.whl)$"
)


def _layer_names(image_tar: Path) -> list[str]:
    """Every path in every layer of a ``docker save`` archive (the legacy layout's
    <id>/layer.tar and the OCI layout's blobs alike: whatever member is itself a tar)."""
    names: list[str] = []
    with tarfile.open(image_tar) as archive:
        for member in archive:
            if not member.isfile():
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            try:
                with tarfile.open(fileobj=handle) as layer:
                    names.extend(layer.getnames())
            except tarfile.ReadError:
                continue  # a manifest or a config, not a layer
    return names


def test_the_image_keeps_no_source(project: Project) -> None:
    saved = WORKDIR / "image.tar"
    try:
        engine.docker("save", "-o", str(saved), IMAGE, timeout=900)
        names = _layer_names(saved)
    finally:
        saved.unlink(missing_ok=True)
    installed = [n for n in names if re.search(r"site-packages/ldpem/__init__\.py$", n)]
    assert installed, "the scan found no installed package: it saw no layer"
    leftovers = sorted({n for n in names if _SOURCE_ONLY.search(n)})
    assert leftovers == [], leftovers


def test_the_readme_reset_spares_the_ledgers(project: Project) -> None:
    """After the run (the first test): the README's reset (``down``, then ``docker volume
    rm`` of the volumes labelled ldpem.reset=true; here only this project's) leaves the
    ledger volumes only, and the hospitals' ledgers in them."""
    project.checked("down", timeout=300)
    label = f"label=com.docker.compose.project={project.name}"
    listed = engine.docker("volume", "ls", "-q", "--filter", label).stdout.split()
    reset = engine.docker(
        "volume", "ls", "-q", "--filter", "label=ldpem.reset=true", "--filter", label
    ).stdout.split()
    assert reset and set(reset) < set(listed)
    engine.docker("volume", "rm", *reset)
    kept = set(engine.docker("volume", "ls", "-q", "--filter", label).stdout.split())
    # <project>_<volume>: the project's name has no underscore, the volumes' neither.
    # docker-compose v1 also creates the unused profile's volume (hospital-d-ledger).
    short = {name.rsplit("_", 1)[-1]: name for name in kept}
    hospitals = {f"hospital-{x}-ledger" for x in "abc"}
    assert hospitals <= set(short) <= hospitals | {"hospital-d-ledger"}, kept
    for volume in sorted(short[name] for name in hospitals):
        listing = engine.docker(
            "run", "--rm", "-v", f"{volume}:/state", "--entrypoint", "ls", IMAGE, "/state/agent"
        ).stdout.split()
        assert "ledger.sqlite" in listing, (volume, listing)
