"""The round protocol's own functions: study defaults, the holder's mechanism (the same as
the study's at the same budget, its noise from the holder's own budget), the aggregate
and the M-step."""

from __future__ import annotations

import numpy as np
import pytest

from ldpem.common import protocol
from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms import CentralTruncation
from ldpem.common.planning.study import Study, study_values
from ldpem.common.protocol import make_mechanism
from ldpem.common.wire import PublicParameters, RunCreate, public_parameters


def test_study_defaults() -> None:
    assert protocol.study_delta(None, 2000) == 2000.0**-1.1
    assert protocol.study_delta(None, 1) == protocol.DELTA_MAX  # 1^-1.1 = 1 is no δ
    assert protocol.study_delta(1e-7, 2000) == 1e-7
    assert protocol.study_delta(0.9, 2000) == protocol.DELTA_MAX
    assert protocol.study_beta_bound(None, snr=3.0, sigma=2.0) == 6.0
    assert protocol.study_beta_bound(1.5, snr=3.0, sigma=2.0) == 1.5
    assert protocol.study_tau("gmm", tau=None, beta_bound=3.0, sigma=1.0, d=9) == 2.0
    assert protocol.study_tau("gmm", tau=0.7, beta_bound=3.0, sigma=1.0, d=9) == 0.7
    assert protocol.records_per_round([1003, 1003, 1003], 4) == 752
    assert protocol.records_per_round([3, 3], 10) == 1
    assert protocol.records_per_round([30, 70], 10, reuse=True) == 100
    beta0 = protocol.initial_beta(5, 2.0, np.random.default_rng(0))
    assert float(np.linalg.norm(beta0)) == pytest.approx(2.0, rel=1e-12)
    assert np.array_equal(protocol.run_start(7, 5, 2.0), protocol.run_start(7, 5, 2.0))


def _params(mechanism: str, **change: object) -> PublicParameters:
    request = RunCreate.model_validate(
        {
            "model": "gmm",
            "d": 4,
            "sigma": 1.0,
            "rounds": 5,
            "mechanism": mechanism,
            "hospitals": [{"name": "a", "records": 500}, {"name": "b", "records": 1500}],
            **change,
        }
    )
    return public_parameters(request)


@pytest.mark.parametrize("mechanism", ["local", "hospital", "local-clip"])
def test_a_holder_at_the_studys_budget_runs_the_studys_mechanism(mechanism: str) -> None:
    # The agent's function and the simulator's agree where they describe the same holder.
    params = _params(mechanism)
    for records in (500, 1500):
        m = records // 5 if mechanism == "hospital" else params.records_per_round
        study = make_mechanism(
            mechanism,
            d=4,
            records_per_round=m,
            epsilon=params.epsilon,
            delta=params.delta,
            tau=params.tau,
            clip=1.0,
        )
        holder = protocol.holder_mechanism(
            params,
            records=records,
            budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
        )
        assert repr(holder) == repr(study)


def test_holder_noise_comes_from_the_holders_own_budget() -> None:
    params = _params("local")
    run = protocol.holder_mechanism(
        params,
        records=500,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
    )
    strict = protocol.holder_mechanism(
        params,
        records=500,
        budget=Budget(epsilon=params.epsilon / 2, delta=params.delta, accounting="exact"),
    )
    assert strict.noise_std > run.noise_std
    assert (
        protocol.holder_noise_std(
            params,
            500,
            budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
        )
        == run.noise_std
    )
    central = protocol.holder_mechanism(
        _params("central"), records=500, budget=Budget(epsilon=1.0, delta=1e-6, accounting="exact")
    )
    assert isinstance(central, CentralTruncation) and central.noise_std == 0.0


def test_the_aggregate_does_not_depend_on_the_reports_order() -> None:
    rng = np.random.default_rng(4)
    totals = [rng.standard_normal(3) * 10.0**e for e in (-8, 0, 8, 3, -3)]
    counts = [1, 2, 3, 4, 5]
    first, count = protocol.aggregate(totals, counts)
    for order in ([4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        again, _ = protocol.aggregate([totals[i] for i in order], [counts[i] for i in order])
        assert np.array_equal(again, first)
    assert count == 15
    assert np.array_equal(protocol.aggregate([[1e308], [1e308]], [1, 1])[0], [np.inf])


def test_m_step_with_and_without_central_noise() -> None:
    step = protocol.m_step([1.0, 2.0], [[4.0, -2.0], [2.0, -4.0]], [2, 1], eta=0.5)
    assert step.beta.tolist() == [2.0, 1.0] and step.count == 3 and step.noise is None
    noise = protocol.CentralNoise(sensitivity=3.0, epsilon=1.0, delta=1e-6)
    noisy = protocol.m_step(
        [1.0, 2.0], [[4.0, -2.0]], [2], eta=1.0, central=noise, rng=np.random.default_rng(1)
    )
    expected = np.random.default_rng(1).normal(0.0, noise.std(2), 2)
    assert noisy.noise is not None and np.array_equal(noisy.noise, expected)
    assert np.array_equal(noisy.beta, np.array([1.0, 2.0]) + (np.array([2.0, -1.0]) + expected))
    with pytest.raises(ValueError, match="needs a generator"):
        protocol.m_step([1.0], [[1.0]], [1], eta=1.0, central=noise)


@pytest.mark.parametrize("name", ["local", "hospital", "local-clip", "central", "secagg", "none"])
def test_a_study_builds_the_mechanism_the_agent_builds(name: str) -> None:
    # run_study's hospitals run what an agent of the same public values runs (issue 42).
    study = Study(mechanism=name, n=3000, d=4, rounds=5, hospitals=3)
    values = study_values(study, (600, 1000, 1400), d=4, delta=1e-6, tau=1.9)
    budget = protocol.public_budget(values)
    for records in (600, 1400):
        agent = protocol.holder_mechanism(values, records=records, budget=budget)
        assert protocol.study_mechanism(values, records=records, budget=budget) == agent


def test_only_a_study_builds_a_mechanism_of_no_federated_run() -> None:
    study = Study(mechanism="central-clip", n=3000, d=4, rounds=5, hospitals=3)
    values = study_values(study, (600, 1000, 1400), d=4, delta=1e-6, tau=1.9)
    budget = protocol.public_budget(values)
    with pytest.raises(ValueError, match="not one of a federated run"):
        protocol.holder_mechanism(values, records=600, budget=budget)
    built = protocol.study_mechanism(values, records=600, budget=budget)
    assert built.name == "central-clip" and built.noise_std == 0.0  # the aggregator's noise
    assert protocol.central_noise(values) is not None
