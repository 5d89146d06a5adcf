"""The demo's floor does the demo's job: its mechanism's constants are the demo run's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.planning.study import Study, study_mechanisms
from ldpem.common.protocol import report_noise_std, study_beta_bound, study_delta, study_tau
from ldpem.demo.runner import DemoConfig, demo_hospital_sizes


def _demo_job(n: int) -> list[str]:
    """``benchmarks/_demo_floor.demo_job`` (the benchmarks are scripts, not a package)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "_demo_floor.py"
    spec = importlib.util.spec_from_file_location("_demo_floor", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    job: list[str] = module.demo_job(n)
    return job


def test_the_floor_truncates_at_the_scale_and_smoothing_the_demo_run_gets() -> None:
    config = DemoConfig(hospitals=3, records=200_000, rounds=10)
    sizes = demo_hospital_sizes(
        config.records, config.hospitals, config.rounds, np.random.default_rng(config.seed)
    )
    n, scale, smoothing, noise, shares = _demo_job(config.records)
    assert int(n) == config.records
    assert [int(s) for s in shares.split(",")] == sizes
    # The floor takes the demo agents' path (the coordinator's parameters of the demo's
    # request, then the agent's mechanism); the simulator builds the same study its own
    # way (``study_mechanisms``), and the two must agree.
    study = Study(n=config.records, d=config.d, rounds=config.rounds, epsilon=config.epsilon)
    bound = study_beta_bound(None, snr=study.snr, sigma=study.sigma)
    tau = study_tau(study.model, tau=None, beta_bound=bound, sigma=study.sigma, d=study.d)
    delta = study_delta(None, config.records)
    local = study_mechanisms(study, sizes, d=study.d, delta=delta, tau=tau)[0].holders[0]
    assert isinstance(local, LocalTruncation)
    assert float(scale) == pytest.approx(local.scale, rel=1e-12)
    assert float(smoothing) == pytest.approx(local.smoothing, rel=1e-12)
    assert float(noise) == pytest.approx(report_noise_std(local), rel=1e-12)
