"""The simulator is the exact model of the deployment (docs/ARCHITECTURE.md, "One round
protocol").

A real coordinator and real agents (processes, research ``--seed``): the in-process
simulation fed the same per-hospital records, the agents' seeds, the run's id and seed
reproduces the run's trajectory β⁰ … β^T bit for bit — for ``central`` (noise added by the
coordinator, calibrated on each round's count; the hospitals' sizes make the last rounds
smaller than m) and ``hospital`` (each agent's own scale and noise); and under a round
schedule that grows geometrically, whose rounds each have their own scale s_t, with the
reported estimate the weighted average of the last iterates, which the coordinator makes
and the simulation reproduces bit for bit. So are runs of the K-component models (gmmk,
lca: β of K·(d + 1) values, the model's options published, pinned by each agent). And
the forecast the coordinator computes after
``ldpem run create`` is exactly the mean (and the band, the 10% and 90%
``prediction.quantile``) of the fast path's final errors for the same study (the
distribution of ``ldpem simulate``'s, tests/common/test_fastsim.py) over the forecast's
seeds (the coordinator's default count).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ldpem.client.data import load_records
from ldpem.common.planning.fastsim import final_errors
from ldpem.common.planning.prediction import quantile
from ldpem.common.planning.simulator import EMResult, simulate_run
from ldpem.common.planning.study import Study, run_study
from ldpem.common.protocol import (
    FederatedStreams,
    holder_mechanism,
    public_budget,
    records_per_round,
)
from ldpem.common.wire import PublicParameters, ScheduleSpec, expected_round_count
from ldpem.processes import Processes, free_port, start_coordinator
from ldpem.server.forecast import FORECAST_SEEDS
from tests.fedkit import (
    AGENT_BUDGET,
    TOKENS,
    cli_create_run,
    settled,
    token_file,
    write_gmm_data,
    write_model_data,
)

pytestmark = pytest.mark.slow

#: Uneven hospitals: over 5 rounds the rounds hold 902, 901, 900, 899 and 899 records,
#: around m = ⌊4501/5⌋ = 900.
COUNTS = [2003, 1501, 997]
D, ROUNDS, RUN_SEED = 4, 5, 3
AGENT_SEEDS = [100 + i for i in range(len(COUNTS))]
#: A schedule that grows by 1.3 a round, reported as the average of the last 3 iterates.
SCHEDULE, FINAL = "geometric:1.3", "average:3"


def run_agents(
    procs: Processes,
    url: str,
    paths: list[Path],
    tmp_path: Path,
    *extra: str,
    model: str = "gmm",
    seeds: list[int] = AGENT_SEEDS,
) -> None:
    agents = [
        procs.start(
            f"agent{i}",
            "client",
            "--coordinator",
            url,
            "--token-file",
            str(token_file(tmp_path, TOKENS[i], f"agent{i}.token")),
            "--data",
            str(path),
            "--model",
            model,
            "--state",
            str(tmp_path / f"agent{i}"),
            *AGENT_BUDGET,
            "--seed",
            str(seeds[i]),
            "--wait",
            "10",
            "--give-up",
            "120",
            *extra,
        )
        for i, path in enumerate(paths)
    ]
    for process in agents:
        assert process.wait(180) == 0, procs.log(process)[-2000:]


def federated_and_simulated(
    procs: Processes, tmp_path: Path, mechanism: str, *agent_flags: str
) -> tuple[dict[str, Any], list[list[float]], list[list[float]]]:
    """Create and run a federated run; its trajectory and the simulated one."""
    created, federated, simulated, _ = federated_run(procs, tmp_path, mechanism, *agent_flags)
    return created, federated, [[float(v) for v in beta] for beta in simulated.betas]


def federated_run(
    procs: Processes,
    tmp_path: Path,
    mechanism: str,
    *agent_flags: str,
    schedule: ScheduleSpec = "equal",
    final: str = "last",
) -> tuple[dict[str, Any], list[list[float]], EMResult, str]:
    """Create and run a federated run (its ``schedule`` and ``final`` given only when not
    the defaults, as an older request would): the creation's answer, the trajectory, its
    simulation, and the coordinator's URL of the run."""
    paths, _ = write_gmm_data(tmp_path, COUNTS, D)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = tmp_path / "coordinator.sqlite"
    start_coordinator(procs, state=state, port=port, env={"LDPEM_TICK": "0.1"})
    later = {"schedule": schedule, "final": final} if (schedule, final) != ("equal", "last") else {}
    created = cli_create_run(
        tmp_path,
        url,
        COUNTS,
        d=D,
        rounds=ROUNDS,
        epsilon=1.0,
        mechanism=mechanism,
        seed=RUN_SEED,
        **later,
    )
    run_agents(procs, url, paths, tmp_path, *agent_flags)
    run_id = created["run_id"]
    assert httpx.get(f"{url}/v1/runs/{run_id}").json()["status"] == "finished"
    rounds = httpx.get(f"{url}/v1/runs/{run_id}/rounds").json()
    assert [r["count"] for r in rounds] == [
        sum(expected_round_count(c, ROUNDS, t, schedule) for c in COUNTS) for t in range(ROUNDS)
    ]
    federated: list[list[float]] = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    params = PublicParameters.model_validate(created["params"])
    simulated = simulate_run(
        params,
        holders=[load_records(p, "gmm") for p in paths],
        beta0=federated[0],
        streams=FederatedStreams(run_id=run_id, seeds=AGENT_SEEDS, run_seed=RUN_SEED),
    )
    # The forecast, computed in the background after run create: the run's summary.
    with httpx.Client(base_url=url) as client:
        created["settled"] = settled(client, run_id)
    return created, federated, simulated, f"{url}/v1/runs/{run_id}"


def run_study_of(
    model: str, mechanism: str, counts: list[int], d: int, rounds: int, **more: Any
) -> Study:
    """The study of a run at ε = 1 of hospitals holding ``counts`` records (``more``: the
    study's other fields), which ``ldpem simulate`` runs."""
    return Study(
        model=model,
        mechanism=mechanism,
        n=sum(counts),
        d=d,
        epsilon=1.0,
        rounds=rounds,
        sizes=tuple(counts),
        **more,
    )


def simulate_figures(
    mechanism: str, seeds: range, *, schedule: str = "equal", final: str = "last"
) -> tuple[float, float, float]:
    """The mean final error of the run's study on the fast path (the distribution of
    ``ldpem simulate``'s, tests/common/test_fastsim.py) over ``seeds``, and the 10% and
    90% quantiles of those errors."""
    study = run_study_of("gmm", mechanism, COUNTS, D, ROUNDS, schedule=schedule, final=final)
    errors = list(final_errors(study, seeds))
    return float(np.mean(errors)), quantile(errors, 0.1), quantile(errors, 0.9)


def forecast_figures(created: dict[str, Any]) -> tuple[tuple[float, float, float], range]:
    """The forecast's mean and band, and its seeds."""
    summary = created["settled"]
    forecast = summary["forecast"]
    assert forecast["seeds"] == FORECAST_SEEDS and summary["expected_error"] == forecast["mean"]
    seeds = range(forecast["first_seed"], forecast["first_seed"] + forecast["seeds"])
    return (forecast["mean"], forecast["low"], forecast["high"]), seeds


def test_central_run_is_its_simulation_bit_for_bit(procs: Processes, tmp_path: Path) -> None:
    # Central: the agents' sums carry no noise (hence --allow-weaker); the coordinator's
    # noise, drawn from the run's seed, is calibrated on each round's count.
    created, federated, simulated = federated_and_simulated(
        procs, tmp_path, "central", "--allow-weaker"
    )
    assert min(
        sum(expected_round_count(c, ROUNDS, t) for c in COUNTS) for t in range(ROUNDS)
    ) < records_per_round(COUNTS, ROUNDS)
    assert len(federated) == ROUNDS + 1
    assert federated == simulated
    figures, seeds = forecast_figures(created)
    assert figures == simulate_figures("central", seeds)


def test_hospital_run_is_its_simulation_bit_for_bit(procs: Processes, tmp_path: Path) -> None:
    created, federated, simulated = federated_and_simulated(procs, tmp_path, "hospital")
    assert len(federated) == ROUNDS + 1
    assert federated == simulated
    figures, seeds = forecast_figures(created)
    assert figures == simulate_figures("hospital", seeds)


@pytest.mark.parametrize(
    ("mechanism", "agent_flags"),
    [("local", ()), ("central", ("--allow-weaker",)), ("hospital", ())],
)
def test_a_geometric_schedule_with_averaging_is_its_simulation_bit_for_bit(
    procs: Processes, tmp_path: Path, mechanism: str, agent_flags: tuple[str, ...]
) -> None:
    # The rounds grow by 1.3 (each with its own scale s_t: published per round for local
    # and central, each agent's own for hospital); the coordinator reports the average of
    # the last 3 iterates, weighted by inverse noise variance and sign-aligned.
    created, federated, simulated, run_url = federated_run(
        procs, tmp_path, mechanism, *agent_flags, schedule=SCHEDULE, final=FINAL
    )
    params = PublicParameters.model_validate(created["params"])
    assert params.schedule == SCHEDULE and params.final == FINAL
    assert (params.scales is not None) == (mechanism != "hospital")
    sizes = [expected_round_count(COUNTS[0], ROUNDS, t, SCHEDULE) for t in range(ROUNDS)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    assert federated == [[float(v) for v in beta] for beta in simulated.betas]
    # The reported estimate is the simulation's, bit for bit, and not the last iterate.
    assert simulated.final is not None and len(simulated.final.weights) == 3
    summary = httpx.get(run_url).json()
    trajectory = httpx.get(f"{run_url}/trajectory").json()
    estimate = [float(v) for v in simulated.beta]
    assert summary["beta"] == trajectory["estimate"] == estimate != federated[-1]
    assert trajectory["weights"] == list(simulated.final.weights)
    figures, seeds = forecast_figures(created)
    assert figures == simulate_figures(mechanism, seeds, schedule=SCHEDULE, final=FINAL)


#: Small mixture runs: a few hundred records each, so that each test takes a few seconds.
MIXTURE_COUNTS = [300, 260, 240]
MIXTURE_D, MIXTURE_ROUNDS = 3, 3


@pytest.mark.parametrize(
    ("model", "components", "mechanism"),
    [("gmmk", 3, "local"), ("lca", 2, "hospital")],
)
def test_a_mixture_run_is_its_simulation_bit_for_bit(
    procs: Processes, tmp_path: Path, model: str, components: int, mechanism: str
) -> None:
    # β has K·(d + 1) values: the coordinator's checks, each agent's β, its report, the
    # mechanism's bound and calibration, and the simulation all size it so; each agent
    # pins the run's K (--components).
    options = {"components": components}
    counts, d, rounds = MIXTURE_COUNTS, MIXTURE_D, MIXTURE_ROUNDS
    seeds = AGENT_SEEDS[: len(counts)]
    paths, _ = write_model_data(tmp_path, counts, d, model=model, model_options=options)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    start_coordinator(procs, state=tmp_path / "c.sqlite", port=port, env={"LDPEM_TICK": "0.1"})
    created = cli_create_run(
        tmp_path,
        url,
        counts,
        model=model,
        model_options=options,
        d=d,
        rounds=rounds,
        epsilon=1.0,
        mechanism=mechanism,
        seed=RUN_SEED,
        # The forecast simulates the run's problem, options included (gmmk only: time).
        forecast=model == "gmmk",
    )
    params = PublicParameters.model_validate(created["params"])
    size = components * (d + 1)
    assert params.model_options == options
    run_agents(
        procs, url, paths, tmp_path, "--components", str(components), model=model, seeds=seeds
    )
    run_id = created["run_id"]
    assert httpx.get(f"{url}/v1/runs/{run_id}").json()["status"] == "finished"
    federated = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    assert len(federated) == rounds + 1 and {len(beta) for beta in federated} == {size}
    simulated = simulate_run(
        params,
        holders=[load_records(p, model) for p in paths],
        beta0=federated[0],
        streams=FederatedStreams(run_id=run_id, seeds=seeds, run_seed=RUN_SEED),
    )
    assert federated == [[float(v) for v in beta] for beta in simulated.betas]
    # ldpem simulate's study of the same run publishes the same values: its mechanisms'
    # σ_r (sized for K·(d + 1) coordinates) are the run's, so the two are one model.
    study = run_study_of(model, mechanism, counts, d, rounds, model_options=tuple(options.items()))
    result = run_study(study)
    assert result.parameter_dim == size
    assert [m.noise_std for m in result.round_mechanisms[0].holders] == [
        m.noise_std for m in _run_mechanisms(params, counts)
    ]
    assert result.delta == params.delta and result.tau == params.tau
    if model == "gmmk":
        with httpx.Client(base_url=url) as client:
            created["settled"] = settled(client, run_id)
        figures, forecast_seeds = forecast_figures(created)
        errors = list(final_errors(study, forecast_seeds))
        assert figures == (
            float(np.mean(errors)),
            quantile(errors, 0.1),
            quantile(errors, 0.9),
        )


def _run_mechanisms(params: PublicParameters, counts: list[int]) -> list[Any]:
    """Each hospital's mechanism of round 0 at the run's published budget, as its agent
    builds it (``protocol.holder_mechanism``)."""
    budget = public_budget(params)
    return [holder_mechanism(params, records=c, budget=budget, t=0) for c in counts]
