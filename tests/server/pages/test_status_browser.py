"""The status page opened in a real headless Chromium: of a running run, and of a real run
(coordinator and agents as processes) that finished with a hospital missing round 0.

Chromium is Debian's ``chromium`` package. When it is missing the test installs it with
apt-get, but only as root and with CI=true or LDPEM_TEST_BROWSER=1; otherwise it is skipped
with the reason in pytest's summary. The running run's page is opened with ``?token=`` (the
coordinator answers with a redirect that sets the read cookie, as for an operator's
browser); the DOM after rendering must hold the plots with ticks, the round timeline and
the hospital table. Each test saves a screenshot under its tmp_path (docs/status-page.png,
docs/status-page-degraded.png, docs/status-page-secagg.png and
docs/status-page-secagg-degraded.png are four).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ldpem.processes import Processes
from ldpem.server.app import create_app
from ldpem.server.forecast import FORECAST_SEEDS
from tests.cli.test_secagg_lost_holder import secagg_run_of_four
from tests.fedkit import live_server, settings
from tests.server.opkit import READ, late_hospital_run, start_run

pytestmark = pytest.mark.browser

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _find() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _find()
    if found is not None:
        return found
    wanted = os.environ.get("CI") == "true" or os.environ.get("LDPEM_TEST_BROWSER") == "1"
    if not wanted:
        pytest.skip("chromium is not installed; CI=true or LDPEM_TEST_BROWSER=1 installs it")
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it with apt-get needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-2000:]}"
    found = _find()
    assert found is not None, "apt-get installed chromium but no chromium binary is on PATH"
    return found


def _browse(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _dom(chromium: str, tmp_path: Path, page: str) -> str:
    """The DOM of ``page`` once Chromium has run its scripts (``--dump-dom``)."""
    dumped = _browse(chromium, tmp_path / "profile-dom", "--dump-dom", page)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    return dumped.stdout


def _health(dom: str, label: str, text: str) -> re.Match[str]:
    """The page's health line: ``label`` (Healthy, Degraded, …) and the regex ``text``."""
    state = label.lower()
    health = re.search(
        rf'<div id="health" class="health {state}"><strong>{label}</strong>: {text}</div>', dom
    )
    assert health is not None, dom[:2000]
    return health


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A live coordinator (private status) with a run in round 3: h2 is late in it (the
    deadline passed short of quorum and was extended)."""
    # The coordinator's default forecast seeds: this page is the docs' screenshot.
    settings_ = settings(
        tmp_path, public_status=False, read_token=READ, forecast_seeds=FORECAST_SEEDS
    )
    app = create_app(settings_)
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        study = start_run(client, rounds=8, forecast=True, round_deadline=1.0)
        for t in range(3):
            study.round(t, range(3))
        study.round(3, [0, 1])
        deadline = time.monotonic() + 30
        while True:  # the tick extends round 3 once its 1 s deadline passed
            rounds = client.get(
                f"/v1/runs/{study.run_id}/rounds", headers={"Authorization": f"Bearer {READ}"}
            ).json()
            if rounds[-1]["deadline"] - rounds[-1]["opened_at"] > 1.5:
                break
            assert time.monotonic() < deadline, rounds[-1]
            time.sleep(0.1)
        yield url, study.run_id


def test_running_run_page_renders_in_chromium(
    chromium: str, running: tuple[str, str], tmp_path: Path
) -> None:
    url, run_id = running
    page = f"{url}/runs/{run_id}?token={READ}"
    dom = _dom(chromium, tmp_path, page)
    assert f"<title>run {run_id}</title>" in dom, dom[:500]
    # The redirect dropped the token from the address; the cookie opened the page.
    assert READ not in dom
    for chart in ("beta", "steps", "accuracy", "timeline"):
        svg = re.search(rf'<svg id="{chart}".*?</svg>', dom, re.S)
        assert svg is not None, f"no {chart} plot"
        ticks = re.findall(r'<g class="tick[^"]*">.*?<text[^>]*>([^<]+)</text>', svg.group(0))
        assert len(ticks) >= 2, f"{chart}: ticks {ticks}"
    steps = re.search(r'<svg id="steps".*?</svg>', dom, re.S)
    assert steps is not None
    assert "forecast error (mean)" in steps.group(0) and "forecast 10–90%" in steps.group(0)
    assert "β = 0 error" in steps.group(0)
    timeline = re.search(r'<svg id="timeline".*?</svg>', dom, re.S)
    assert timeline is not None
    assert len(re.findall(r'<g class="round">', timeline.group(0))) == 4
    assert re.search(r'<table id="rounds">.*late: h2', dom, re.S)
    hospitals = re.search(r'<table id="hospitals">.*?</table>', dom, re.S)
    assert hospitals is not None
    rows = re.findall(r"<tr class=\"(\w*)\"><td>(h\d)</td>", hospitals.group(0))
    assert rows == [("reported", "h0"), ("reported", "h1"), ("late", "h2")]
    assert 'id="health" class="health degraded"' in dom and "late in round t = 3: h2" in dom

    _screenshot(chromium, page, tmp_path, "status-page.png", "LDPEM_SCREENSHOT_OUT")


@pytest.mark.slow
def test_a_run_finished_with_missing_rounds_renders_degraded_in_chromium(
    chromium: str, procs: Processes, tmp_path: Path
) -> None:
    """The run of tests/server/test_late_hospital.py: h2 started after round 0 closed."""
    run = late_hospital_run(procs, tmp_path)
    page = f"{run.url}/runs/{run.run_id}"  # the coordinator runs with --public-status
    dom = _dom(chromium, tmp_path, page)
    _health(dom, "Degraded", r"finished with missing rounds: h2 reported [1-3] of 4")
    row = re.search(r'<tr class="closed"><td class="num">0</td>.*?</tr>', dom, re.S)
    assert row is not None and '<span class="missing">missing: h2</span>' in row.group(0)
    _screenshot(
        chromium, page, tmp_path, "status-page-degraded.png", "LDPEM_DEGRADED_SCREENSHOT_OUT"
    )


@pytest.mark.slow
def test_a_healthy_secagg_run_renders_healthy_in_chromium(
    chromium: str, procs: Processes, tmp_path: Path
) -> None:
    """A real secagg run of four agents, t_min = 3: Healthy, every round's sum of all four
    (8e54e94: "Degraded … reported 0 of 4", every round "0/4 (quorum 4)")."""
    run = secagg_run_of_four(procs, tmp_path, kill=None)
    page = f"{run.url}/runs/{run.run_id}"
    dom = _dom(chromium, tmp_path, page)
    _health(dom, "Healthy", r"finished all 4 rounds")
    assert dom.count("4/4 survivors (t_min 3)") == 4
    table = re.search(r'<table id="secagg">.*?</table>', dom, re.S)
    assert table is not None and table.group(0).count("all 4") == 4 * 6
    _screenshot(chromium, page, tmp_path, "status-page-secagg.png", "LDPEM_SECAGG_SCREENSHOT_OUT")


@pytest.mark.slow
def test_a_secagg_run_with_a_lost_holder_renders_degraded_in_chromium(
    chromium: str, procs: Processes, tmp_path: Path
) -> None:
    """The run of tests/cli/test_secagg_lost_holder.py: h3 SIGKILLed after round 1."""
    run = secagg_run_of_four(procs, tmp_path, kill="h3")
    page = f"{run.url}/runs/{run.run_id}"
    dom = _dom(chromium, tmp_path, page)
    # h3 is lost at round 2's advertise step, or (if it advertised before the signal
    # landed, on a busy machine) at its shares step: tests/cli/test_secagg_lost_holder.py.
    health = _health(
        dom,
        "Degraded",
        r"finished with missing rounds: h3 reported 2 of 4; lost: h3 \(did not "
        r"(advertise|share) keys in round 2\)",
    )
    step = {"advertise": "advertise", "share": "shares"}[health.group(1)]
    row = re.search(r'<tr class="closed"><td class="num">2</td>.*?</tr>', dom, re.S)
    assert row is not None and f"lost: h3 (did not {health.group(1)} keys)" in row.group(0)
    assert f"{step} at its deadline without h3" in dom
    _screenshot(
        chromium,
        page,
        tmp_path,
        "status-page-secagg-degraded.png",
        "LDPEM_SECAGG_DEGRADED_SCREENSHOT_OUT",
    )


def _screenshot(chromium: str, page: str, tmp_path: Path, name: str, out: str) -> None:
    """A screenshot of ``page`` as ``tmp_path/name``, copied to the path in the environment
    variable ``out`` when it is set (how the docs' screenshots are made)."""
    shot = tmp_path / name
    taken = _browse(
        chromium,
        tmp_path / "profile-shot",
        f"--screenshot={shot}",
        "--window-size=1100,2400",
        "--hide-scrollbars",
        page,
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    if os.environ.get(out):
        shutil.copy(shot, os.environ[out])
