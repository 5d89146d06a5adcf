"""The demo's floor does the demo's job: its mechanism's constants are the coordinator's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ldpem.common.wire import RunCreate, public_parameters
from ldpem.demo import DemoConfig, demo_hospital_sizes, demo_request


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
    # The request ``ldpem demo`` sends, and the parameters its coordinator derives from it.
    names = [f"h{i + 1}" for i in range(config.hospitals)]
    tokens = [f"token-{i:027d}" for i in range(config.hospitals)]
    params = public_parameters(RunCreate.model_validate(demo_request(config, sizes, names, tokens)))
    n, scale, smoothing, noise, shares = _demo_job(config.records)
    assert int(n) == config.records
    assert [int(s) for s in shares.split(",")] == sizes
    assert params.scale is not None and params.smoothing is not None
    assert float(scale) == pytest.approx(params.scale, rel=1e-12)
    assert float(smoothing) == pytest.approx(params.smoothing, rel=1e-12)
    assert float(noise) > 0
