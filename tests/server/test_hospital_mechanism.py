"""The coordinator and the agent under the hospital-level mechanism."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpem.client.agent import AgentError
from ldpem.client.trust import agent_mechanism
from ldpem.common.core.accounting import Budget
from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import HospitalTruncation
from ldpem.common.protocol import local_noise_std, public_scale
from ldpem.common.wire import ReportIn, RunCreate, expected_round_count, public_parameters
from ldpem.server.coordinator import Coordinator, record_bound, run_noise_std
from ldpem.server.refusals import Invalid
from ldpem.server.store import Store
from tests.fedkit import ADMIN, run_request

ROUNDS, D = 5, 2
SIZES = [500, 2000, 50]


def request(**change: Any) -> RunCreate:
    values = run_request(records=100, rounds=ROUNDS, d=D, mechanism="hospital", **change)
    for h, size in zip(values["hospitals"], SIZES, strict=True):
        h["records"] = size
    return RunCreate.model_validate(values)


def test_public_parameters_leave_each_holder_its_own_scale() -> None:
    params = public_parameters(request())
    assert params.mechanism == "hospital"
    assert params.scale is None and params.smoothing is not None
    bounds = [record_bound(params, size) for size in SIZES]
    # s_k ∝ √m_k: the bound grows with the holder's size.
    assert bounds[1] / bounds[0] == pytest.approx(math.sqrt(400 / 100), rel=1e-12)
    scale = public_scale(
        "hospital",
        d=D,
        records_per_round=2000 // ROUNDS,
        epsilon=params.epsilon,
        delta=params.delta,
        tau=params.tau,
        zeta=params.zeta,
    )
    assert bounds[1] == pytest.approx(scale * truncation_bound(params.smoothing))
    # An operator may fix one s for every holder.
    fixed = public_parameters(request(scale=0.5))
    assert (
        record_bound(fixed, 50)
        == record_bound(fixed, 2000)
        == 0.5 * truncation_bound(fixed.smoothing or 1.0)
    )


def test_agent_computes_its_scale_and_its_noise_from_its_own_budget() -> None:
    params = public_parameters(request())
    mechanism, mu = agent_mechanism(
        params, budget=Budget(epsilon=0.5, delta=1e-7, accounting="exact"), records=2000
    )
    assert isinstance(mechanism, HospitalTruncation)
    assert params.smoothing is not None
    # The scale follows from the run's public values and the enrolled count, not the budget.
    assert mechanism.scale * truncation_bound(params.smoothing) == pytest.approx(
        record_bound(params, 2000)
    )
    assert mechanism.noise_std == local_noise_std(
        scale=mechanism.scale,
        smoothing=params.smoothing,
        d=D,
        budget=Budget(epsilon=0.5, delta=1e-7, accounting="exact"),
    )
    # A stricter agent than the run adds more noise than the run's own calibration.
    assert mechanism.noise_std > run_noise_std(params, 2000)
    assert mu == pytest.approx(mechanism.sensitivity(D) / mechanism.noise_std)
    with pytest.raises(AgentError, match="enrolled record count"):
        agent_mechanism(params, budget=Budget(epsilon=1.0, delta=1e-6, accounting="exact"))
    # β_s is the agent's own √(log(d/ζ)), whatever is published (check_public refuses a
    # published value that differs, before any record is read).
    lying = params.model_copy(update={"smoothing": 50.0})
    own, _ = agent_mechanism(
        lying, budget=Budget(epsilon=0.5, delta=1e-7, accounting="exact"), records=2000
    )
    assert isinstance(own, HospitalTruncation)
    assert own.smoothing == params.smoothing == smoothing_precision(D, params.zeta)


def _submit(
    coordinator: Coordinator, run_id: str, i: int, total: list[float], noise: float
) -> None:
    hospital = next(h for h in coordinator.store.hospitals(run_id) if h.name == f"h{i}")
    body = ReportIn(
        hospital=f"h{i}",
        round=0,
        mechanism="hospital",
        count=expected_round_count(SIZES[i], ROUNDS, 0),
        total=total,
        noise_std=noise,
    )
    asyncio.run(coordinator.submit_report(run_id, 0, hospital, body))


def test_range_check_uses_the_holders_bound_and_one_draw(tmp_path: Path) -> None:
    coordinator = Coordinator(Store(tmp_path / "state.sqlite"), admin_token=ADMIN)
    run_id = asyncio.run(coordinator.create_run(request(beta0=[1.0, -1.0]))).run_id
    params = coordinator.round_info(run_id).params
    i, size = 1, SIZES[1]
    count = expected_round_count(size, ROUNDS, 0)
    noise = run_noise_std(params, size)
    # One draw on the sum: the margin is range_sigmas·σ, not range_sigmas·√count·σ.
    limit = count * record_bound(params, size) + coordinator.range_sigmas * noise
    with pytest.raises(Invalid, match="outside the range an honest client"):
        _submit(coordinator, run_id, i, [limit * 1.001, 0.0], noise)
    with pytest.raises(Invalid, match="needs noise_std > 0"):
        _submit(coordinator, run_id, i, [0.0, 0.0], 0.0)
    with pytest.raises(Invalid, match="exceeds"):
        _submit(coordinator, run_id, i, [0.0, 0.0], noise * coordinator.max_noise_factor * 1.01)
    _submit(coordinator, run_id, i, [limit * 0.999, 0.0], noise)
    assert coordinator.rounds(run_id)[0].reporters == ["h1"]


def test_honest_reports_fall_inside_the_range(tmp_path: Path) -> None:
    """Reports an agent actually produces (extreme records, many seeds) are all accepted."""
    coordinator = Coordinator(Store(tmp_path / "state.sqlite"), admin_token=ADMIN)
    params = public_parameters(request())
    for i, size in enumerate(SIZES):
        mechanism, _ = agent_mechanism(
            params,
            budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
            records=size,
        )
        count = expected_round_count(size, ROUNDS, 0)
        gradients = np.full((count, D), 1e300)
        rng = np.random.default_rng(i)
        worst = max(float(np.max(np.abs(mechanism.holder_sum(gradients, rng)))) for _ in range(200))
        limit = count * record_bound(params, size) + coordinator.range_sigmas * (
            mechanism.noise_std
        )
        assert worst <= limit
