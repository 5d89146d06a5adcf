"""`ldpem demo`: real processes on 127.0.0.1, the JSON contract, clean-up on every exit."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpem.cli import BLAS_THREAD_VARIABLES
from ldpem.commands.demo import print_summary
from ldpem.common.mechanisms import get_mechanism
from ldpem.common.models import get_model
from ldpem.common.planning.confidence import DEFAULT_LEVEL, least_draws
from ldpem.common.planning.study import Dataset
from ldpem.demo.runner import (
    DEMO_CONFIDENCE_DRAWS,
    DEMO_FORECAST_SEEDS,
    DEMO_SENSITIVITY_SEEDS,
    DemoConfig,
    _baselines,
    demo_hospital_sizes,
)


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (not this one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def in_sessions(sessions: set[int]) -> list[int]:
    """Pids of live processes in any of ``sessions`` (whatever their command line: a
    coordinator's pool workers and their fork server too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[4]) in sessions:
            found.append(int(entry.name))
    return found


def test_the_demo_bootstraps_with_enough_draws_to_be_calibrated() -> None:
    # Fewer draws than least_draws leave no order statistic at the interval's ends; the
    # coverage at B = least_draws is what test_confidence_calibration.py checks.
    assert DEMO_CONFIDENCE_DRAWS >= least_draws(DEFAULT_LEVEL) == 19


#: Runs ``ldpem`` with argv, then prints what BLAS read for its thread count when numpy
#: loaded, and whether numpy was loaded.
BLAS_PROBE = """
import os, sys
from ldpem.cli import BLAS_THREAD_VARIABLES, main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print([os.environ.get(name) for name in BLAS_THREAD_VARIABLES], "numpy" in sys.modules)
"""


@pytest.mark.parametrize(
    ("arguments", "given", "expected"),
    [
        (["demo", "--help"], {}, ["1", "1", "1"]),
        # A count the user set is kept.
        (["demo", "--help"], {"OPENBLAS_NUM_THREADS": "2"}, ["2", "1", "1"]),
        (["plan", "--help"], {}, [None, None, None]),
    ],
)
def test_the_demo_runs_one_blas_thread_in_each_of_its_processes(
    arguments: list[str], given: dict[str, str], expected: list[str | None]
) -> None:
    """BLAS reads its thread count once, when numpy loads: ``ldpem demo`` sets it before
    its parser imports numpy, and its forked and started children inherit it."""
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE, *arguments],
        env={**env, **given},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == f"{expected} True"


def test_hospital_sizes_are_unequal_and_cover_every_record() -> None:
    sizes = demo_hospital_sizes(10_000, 4, 10, np.random.default_rng(0))
    assert sum(sizes) == 10_000
    assert min(sizes) >= 20
    assert len(set(sizes)) == 4


def test_summary_table_has_the_hospital_level_row() -> None:
    result = {
        "rounds": 5,
        "model": "gmm",
        "n": 1000,
        "d": 3,
        "epsilon": 1.0,
        "mechanism": "local",
        "error": 0.9,
        "baselines": {"local-clip": 0.5, "none": 0.02, "hospital": 0.0456, "secagg": 0.0312},
        "trivial_error": 3.0,
        "hospitals": [],
        "seconds": 1.0,
        "workdir": "/tmp/x",
        "plot": None,
    }
    out = io.StringIO()
    print_summary(result, out)
    text = out.getvalue()
    row = next(line for line in text.splitlines() if "hospital-level DP, same trust" in line)
    assert row.split()[-1] == "0.046"
    row = next(line for line in text.splitlines() if "secure aggregation, default" in line)
    assert row.split()[-1] == "0.031"
    # The federated row names the run's mechanism by its registered label.
    assert f"federated, {get_mechanism('local').label} (ε=1)" in text
    out = io.StringIO()
    print_summary({**result, "mechanism": "hospital"}, out)
    assert f"federated, {get_mechanism('hospital').label} (ε=1)" in out.getvalue()
    out = io.StringIO()
    forecast = {"mean": 0.37, "low": 0.24, "high": 0.52, "seeds": 20}
    print_summary({**result, "forecast": forecast}, out)
    lines = out.getvalue().splitlines()
    row = next(line for line in lines if "its forecast" in line)
    # Right under the federated row it forecasts.
    assert lines[lines.index(row) - 1].strip().startswith("federated, ")
    assert row.split()[-3:] == ["0.370", "10–90%:", "0.240–0.520"]
    assert "(20 simulated runs)" in row
    # The coordinator's confidence radius beside the federated error.
    confidence = {"level": 0.9, "radius": 0.512, "draws": 99}
    out = io.StringIO()
    print_summary({**result, "confidence": confidence}, out)
    row = next(line for line in out.getvalue().splitlines() if "federated, " in line)
    assert row.endswith("0.900  90% confidence radius 0.512 (99 bootstrap draws)")
    out = io.StringIO()
    print_summary({**result, "confidence": {**confidence, "radius": None}}, out)
    assert "90% confidence radius unbounded (99" in out.getvalue()


def test_in_process_baselines_include_hospital_level() -> None:
    config = DemoConfig(hospitals=3, records=30_000, d=4, rounds=5)
    model = get_model("gmm")
    rng = np.random.default_rng(0)
    records, beta_star = model.generate(30_000, 4, snr=3.0, sigma=1.0, missing=0.0, rng=rng)
    data = Dataset(records, beta_star, (15_000, 9_000, 6_000))
    baselines = _baselines(config, data, np.array([1.0, 0.0, 0.0, 0.0]), 30_000**-1.1)
    assert set(baselines) == {"none", "local-clip", "hospital", "secagg"}
    # Hospital-level noise on 3 sums of ~2000 records: close to non-private, far below β = 0.
    assert baselines["hospital"]["error"] < 0.1 * float(np.linalg.norm(beta_star))
    assert len(baselines["hospital"]["errors"]) == 5
    # Noise shares (t_min = 2 of 3) on the masked sum: the central noise, as accurate.
    assert baselines["secagg"]["error"] < 0.1 * float(np.linalg.norm(beta_star))
    assert len(baselines["secagg"]["errors"]) == 5


def _demo(workdir: Path, *, rounds: int) -> list[str]:
    """The command line of a demo of 3 hospitals, 30 000 records, in ``workdir``."""
    return [
        sys.executable,
        "-m",
        "ldpem",
        "demo",
        "--hospitals",
        "3",
        "--records",
        "30000",
        "--rounds",
        str(rounds),
        "--workdir",
        str(workdir),
    ]


def _demo_json(argv: list[str]) -> dict[str, Any]:
    """The payload ``argv --json`` prints; the demo must exit 0 within 4 minutes."""
    result = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stderr
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    payload = _demo_json(_demo(workdir, rounds=5))
    assert len(payload["errors"]) == 5
    assert len(payload["beta"]) == 10
    assert payload["error"] == payload["errors"][-1]
    # ‖β*‖ = 3; the local-DP estimate at n = 3·10⁴ must beat β = 0 clearly.
    assert payload["error"] < 0.8 * payload["trivial_error"]
    assert payload["baselines"]["none"] < 0.1
    assert math.isfinite(payload["baselines"]["local-clip"])
    hospitals = payload["hospitals"]
    assert [h["name"] for h in hospitals] == ["h1", "h2", "h3"]
    assert sum(h["records"] for h in hospitals) == 30_000
    for h in hospitals:
        assert h["rounds_reported"] == 5
        assert h["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)
    assert payload["seconds"] > 0
    # The coordinator's forecast, from the demo's seeds, with its band.
    forecast = payload["forecast"]
    assert forecast["seeds"] == DEMO_FORECAST_SEEDS
    assert forecast["mean"] == payload["expected_error"]
    assert forecast["low"] <= forecast["mean"] <= forecast["high"]
    # No what-ifs at half and twice the SNR: the demo prints none (DEMO_SENSITIVITY_SEEDS).
    assert DEMO_SENSITIVITY_SEEDS == 0 and forecast["sensitivity"] == []
    # The coordinator's confidence region of the estimate, from the demo's draws.
    confidence = payload["confidence"]
    assert confidence["draws"] == DEMO_CONFIDENCE_DRAWS and confidence["radius"] > 0
    assert len(confidence["low"]) == len(confidence["high"]) == 10
    assert json.loads((workdir / "result.json").read_text())["confidence"] == confidence
    assert (workdir / "convergence.svg").stat().st_size > 1000
    assert processes_mentioning(str(workdir)) == []


def test_a_mixture_demo_runs_end_to_end_with_its_options(tmp_path: Path) -> None:
    # gmmk with K = 2 on d = 3: the run publishes the options, each forked agent pins them
    # (--components 2), and β has K·(d + 1) = 8 values in the run and in the baselines.
    workdir = tmp_path / "demo"
    argv = [sys.executable, "-m", "ldpem", "demo", "--model", "gmmk", "--components", "2"]
    argv += ["--d", "3", "--hospitals", "2", "--records", "4000", "--rounds", "3"]
    payload = _demo_json([*argv, "--workdir", str(workdir)])
    assert len(payload["beta"]) == len(payload["beta_star"]) == 8
    assert len(payload["errors"]) == 3
    assert all(len(errors) == 3 for errors in payload["baseline_errors"].values())
    assert [h["rounds_reported"] for h in payload["hospitals"]] == [3, 3]
    assert processes_mentioning(str(workdir)) == []


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    demo = subprocess.Popen(
        _demo(workdir, rounds=200),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell that runs this suite in the background starts it with SIGINT ignored, and
        # children inherit that; give the demo the disposition a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (workdir / "hospital-3" / "state").exists():
                break
            assert demo.poll() is None, demo.communicate()[1]
            time.sleep(0.1)
        children = set(processes_mentioning(str(workdir))) - {demo.pid}
        assert len(children) >= 4
        # Each child leads a session of its own, with what it started.
        sessions = {os.getsid(pid) for pid in children} - {os.getsid(demo.pid)}
        assert len(sessions) >= 4
        demo.send_signal(signal.SIGINT)
        _, stderr = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert processes_mentioning(str(workdir)) == []
    assert in_sessions(sessions) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--records", "10"],
            "--records must be at least 80 for 4 hospitals and 10 rounds, got 10",
        ),
        (["--epsilon", "0"], "--epsilon must be > 0, got 0.0"),
        (["--hospitals", "0"], "--hospitals must be at least 1, got 0"),
        (
            ["--model", "gmmk", "--components", "11"],
            "components must be an integer in [2, 10] for model gmmk, got 11",
        ),
        (["--components", "3"], "model gmm has no option components (its options: none)"),
    ],
)
def test_bad_arguments_are_one_line_errors(arguments: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ldpem", "demo", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"ldpem demo: error: {message}"
    assert "Traceback" not in result.stderr


def test_the_demo_leaves_its_heap_out_of_the_exit_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Once the summary is printed, the demo's heap is frozen: the interpreter's exit does
    # not walk it again (docs/PERFORMANCE.md, "The demo's CPU, fourth pass").
    import argparse
    import gc

    from ldpem.commands import demo as command

    monkeypatch.setattr(command, "run_demo", lambda config, main, quiet: {"ran": True})
    monkeypatch.setattr(command, "from_options", lambda kind, args, **given: None)
    gc.unfreeze()
    try:
        assert command.handle(argparse.Namespace(json=True, main=None)) == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
