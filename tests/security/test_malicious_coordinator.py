"""The real ``ldpem client`` process against a coordinator that LIES (docs/PRIVACY.md,
"Threat model"). A fake coordinator (FastAPI in a thread on 127.0.0.1) answers ``/v1/me``
and the round long-poll with hostile values and records every request and report.

Each test is one of the attacks the threat model lists:

* a refusal must not be a noise-free answer: two data sets differing in one record behave
  identically (exit status, reports, log), for parameters refused by validation and for a
  β inside the valid ranges that overflows one record's gradient;
* a parameter bound at the first contact (T, σ, s, η, …) and changed after a restart, or
  during the run, is refused before anything is sent; so is a round outside [0, T) and a
  second report for a round;
* two agents started from copies of one state directory send independent noise;
* no budget, no report;
* a reordered or appended file is charged against the same budget;
* extreme or non-finite parameters are refused before the records are read (the data file
  is not even a valid CSV: reading it would fail with another message).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI, Request, Response
from scipy.stats import chi2

from ldpem.client.data import load_records
from ldpem.client.ledger import Ledger
from ldpem.client.trust import agent_mechanism
from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms import LocalTruncation
from ldpem.common.models import get_model
from ldpem.common.planning.simulator import round_groups
from ldpem.common.protocol import partition_rng
from ldpem.common.protocol.rounds import holder_round
from ldpem.common.wire import PublicParameters
from tests.fedkit import TOKENS, live_server, process_manager, token_file
from tests.publickit import published_params

RUN = "run-under-attack"
TOKEN = TOKENS[0]
TOKEN_FILE = "hospital.token"
BUDGET = ["--epsilon", "1", "--delta", "1e-5"]


def public(
    model: str = "gmm", d: int = 3, n: int = 40, rounds: int = 2, **change: Any
) -> dict[str, Any]:
    fields = {"model": model, "d": d, "rounds": rounds, "records_per_round": n // rounds}
    return published_params(**{**fields, **change})


@dataclass
class Fake:
    """A coordinator that says what the test wants. ``betas[t]`` opens round t; after the
    last one the run finishes, or fails when ``stop`` is set (to end an agent mid-run)."""

    params: dict[str, Any]
    records: int = 40
    run_id: str = RUN
    betas: list[list[float]] = field(default_factory=lambda: [[0.5, -0.5, 0.25]] * 2)
    #: Raw /v1/me body, to send what pydantic would not produce (NaN, 1e400 …).
    raw_identity: str | None = None
    #: Per-round changes to the RoundInfo (hostile round numbers, params, run ids).
    round_change: dict[int, dict[str, Any]] = field(default_factory=dict)
    stop: bool = False
    #: Hold round 0 until this many agents poll for it (at most ``hold_seconds``): released
    #: together, no agent sees another's ledger entry first.
    hold_for: int = 0
    hold_seconds: float = 10.0
    requests: list[str] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)

    def identity(self) -> str:
        if self.raw_identity is not None:
            return self.raw_identity
        return json.dumps(
            {
                "run_id": self.run_id,
                "hospital": "h0",
                "records": self.records,
                "params": self.params,
            }
        )

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/me")
        def me() -> Response:
            self.requests.append("me")
            return Response(self.identity(), media_type="application/json")

        @app.get("/v1/runs/{run}/round")
        def round_(run: str, after: int = -1) -> Response:
            self.requests.append(f"round after {after}")
            t = after + 1
            deadline = time.monotonic() + self.hold_seconds
            while t == 0 and time.monotonic() < deadline:
                if self.requests.count("round after -1") >= self.hold_for:
                    break
                time.sleep(0.02)
            info: dict[str, Any] = {
                "run_id": self.run_id,
                "status": "running",
                "round": t,
                "beta": self.betas[min(t, len(self.betas) - 1)],
                "deadline": None,
                "params": self.params,
            }
            if t >= len(self.betas):
                info["status"] = "failed" if self.stop else "finished"
                info["reason"] = "stopped by the test" if self.stop else None
            info.update(self.round_change.get(t, {}))
            return Response(json.dumps(info), media_type="application/json")

        @app.post("/v1/runs/{run}/rounds/{t}/reports")
        async def report(run: str, t: int, request: Request) -> dict[str, Any]:
            body = json.loads(await request.body())
            self.requests.append(f"report {t}")
            self.reports.append(body)
            return {"run_id": run, "round": t, "hospital": "h0", "duplicate": False}

        return app


@pytest.fixture
def fake() -> Iterator[tuple[Fake, str]]:
    coordinator = Fake(public())
    with live_server(coordinator.app()) as url:
        yield coordinator, url


@dataclass
class Outcome:
    code: int
    log: str
    seconds: float
    reports: list[dict[str, Any]]

    def normalized(self) -> list[str]:
        """The log without timestamps (the only part allowed to differ)."""
        return [
            re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", "", line)
            for line in self.log.splitlines()
        ]


def agent_argv(url: str, model: str, budget: list[str], extra: tuple[str, ...]) -> list[str]:
    """``ldpem client`` with data ``records.csv``, state ``state`` and token file
    ``hospital.token``, all relative: two directories give identical command lines."""
    return [
        "client",
        "--coordinator",
        url,
        "--token-file",
        TOKEN_FILE,  # written by write_token in the agent's directory
        "--data",
        "records.csv",
        "--model",
        model,
        "--state",
        "state",
        "--wait",
        "1",
        "--give-up",
        "20",
        *budget,
        *extra,
    ]


def agent(
    directory: Path,
    fake: Fake,
    url: str,
    *extra: str,
    budget: list[str] = BUDGET,
    model: str = "gmm",
) -> Outcome:
    """Run ``ldpem client`` for ``model`` records in ``directory`` until it exits."""
    before = len(fake.reports)
    with process_manager(directory) as procs:
        started = time.monotonic()
        token_file(directory, TOKEN, TOKEN_FILE)
        process = procs.start(
            f"agent-{time.monotonic_ns()}", *agent_argv(url, model, budget, extra)
        )
        code = process.wait(120)
        seconds = time.monotonic() - started
        return Outcome(code, procs.log(process), seconds, fake.reports[before:])


def write_csv(directory: Path, x: np.ndarray, y: np.ndarray | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    columns = [f"x{j}" for j in range(x.shape[1])]
    table = x if y is None else np.column_stack([x, y])
    if y is not None:
        columns.append("y")
    lines = [",".join(columns)] + [",".join(repr(float(v)) for v in row) for row in table]
    path = directory / "records.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def gmm_data(n: int = 40, d: int = 3, seed: int = 1) -> np.ndarray:
    records, _ = get_model("gmm").generate(n, d, rng=np.random.default_rng(seed))
    return records.x.copy()


def mrm_data(n: int = 40, d: int = 3, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    records, _ = get_model("mrm").generate(n, d, rng=np.random.default_rng(seed))
    assert records.y is not None
    return records.x.copy(), records.y.copy()


def neighbours(tmp_path: Path, model: str, first: float, second: float) -> tuple[Path, Path]:
    """Two directories whose records.csv differ in record 0's first coordinate only."""
    directories = (tmp_path / "a", tmp_path / "b")
    for directory, value in zip(directories, (first, second), strict=True):
        if model == "gmm":
            x = gmm_data()
            x[0, :] = value
            write_csv(directory, x)
        else:
            x, y = mrm_data()
            x[0, 0] = value
            write_csv(directory, x, y)
    return directories


TIMES: dict[str, tuple[float, float]] = {}


def indistinguishable(a: Outcome, b: Outcome) -> None:
    assert a.code == b.code
    assert a.normalized() == b.normalized()
    assert len(a.reports) == len(b.reports)
    for x, y in zip(a.reports, b.reports, strict=True):
        assert {k: v for k, v in x.items() if k != "total"} == {
            k: v for k, v in y.items() if k != "total"
        }
        assert all(math.isfinite(v) for v in x["total"] + y["total"])


# --- 1. a refusal is a noise-free answer --------------------------------------------------
@pytest.mark.parametrize(
    ("case", "model", "change", "beta", "values"),
    [
        # β = (2.38e304, 0, 0) asks "is some age > 87?": x0²·β0 overflows iff |x0| > 86.9.
        ("mrm-beta-2.38e304", "mrm", {}, [2.38e304, 0.0, 0.0], (86.9, 87.1)),
        # σ = 1e-170: σ² underflows to 0 and 0/0 appears iff some y is exactly 0.
        ("gmm-sigma-1e-170", "gmm", {"sigma": 1e-170}, [0.5, -0.5, 0.25], (0.3, 0.0)),
    ],
)
def test_overflow_questions_are_refused_identically_for_neighbouring_data(
    tmp_path: Path,
    case: str,
    model: str,
    change: dict[str, Any],
    beta: list[float],
    values: tuple[float, float],
) -> None:
    first, second = neighbours(tmp_path, model, *values)
    coordinator = Fake(public(model, **change), betas=[beta] * 2)
    with live_server(coordinator.app()) as url:
        a = agent(first, coordinator, url, model=model)
        b = agent(second, coordinator, url, model=model)
    TIMES[case] = (a.seconds, b.seconds)
    print(f"{case}: exit {a.code}/{b.code}, {a.seconds:.2f} s / {b.seconds:.2f} s")
    indistinguishable(a, b)
    assert a.code == 2 and a.reports == []
    assert "refusing" in a.log and "Traceback" not in a.log


@pytest.mark.parametrize(
    ("case", "model", "beta", "values"),
    [
        # Inside the ranges (|β| = BETA_MAX): x0·x0·β0 = 1e310 overflows for one record only.
        ("mrm-beta-1e100", "mrm", [1e100, 0.0, 0.0], (0.5, 1e105)),
        # GMM: ⟨β, y⟩ = inf − inf = NaN for the record holding ±1e300 in two coordinates.
        ("gmm-nan-gradient", "gmm", [5e99, 5e99, 0.0], (0.5, 1e300)),
    ],
)
def test_an_overflow_inside_the_valid_ranges_still_reports(
    tmp_path: Path, case: str, model: str, beta: list[float], values: tuple[float, float]
) -> None:
    first, second = neighbours(tmp_path, model, *values)
    if model == "gmm":  # the second coordinate of record 0 opposite to the first: inf − inf
        for directory, value in zip((first, second), values, strict=True):
            x = gmm_data()
            x[0, 0], x[0, 1] = value, -value
            write_csv(directory, x)
    coordinator = Fake(public(model), betas=[beta] * 2)
    with live_server(coordinator.app()) as url:
        a = agent(first, coordinator, url, model=model)
        b = agent(second, coordinator, url, model=model)
    TIMES[case] = (a.seconds, b.seconds)
    print(f"{case}: exit {a.code}/{b.code}, {a.seconds:.2f} s / {b.seconds:.2f} s")
    assert a.code == 0, a.log[-2000:]
    indistinguishable(a, b)
    assert [r["round"] for r in a.reports] == [0, 1]


# --- 2. a record reports once: bound parameters -------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [("rounds", 4), ("sigma", 2.0), ("scale", 0.7), ("eta", 0.5), ("records_per_round", 13)],
)
def test_a_parameter_changed_after_a_restart_is_refused_before_sending(
    tmp_path: Path, name: str, value: Any
) -> None:
    write_csv(tmp_path, gmm_data())
    coordinator = Fake(public(), betas=[[0.5, -0.5, 0.25]], stop=True)
    with live_server(coordinator.app()) as url:
        first = agent(tmp_path, coordinator, url, "--seed", "3")
        assert first.code == 2 and "stopped by the test" in first.log
        assert [r["round"] for r in first.reports] == [0]
        coordinator.params = public(**{"records_per_round": 20, name: value})
        coordinator.betas = [[0.5, -0.5, 0.25]] * 4
        coordinator.stop = False
        seen = len(coordinator.requests)
        again = agent(tmp_path, coordinator, url, "--seed", "3")
    assert again.code == 2
    assert f"run {RUN} changed since this agent first took part: params.{name} was" in again.log
    assert again.reports == []
    assert coordinator.requests[seen:] == ["me"]  # not even a poll


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"params": public(rounds=4, records_per_round=20)},
            "changed its parameters during the run: rounds was 2",
        ),
        ({"round": 2}, "opened round 2 of a run of 2 rounds"),
        ({"round": -1}, "opened round -1 of a run of 2 rounds"),
        ({"run_id": "another-run"}, "answered for run 'another-run'"),
        ({"beta": [0.5, 0.5]}, "beta with 2 entries for a run whose beta has 3"),
        ({"beta": [1e101, 0.0, 0.0]}, "must be finite and at most 1e+100"),
    ],
)
def test_a_hostile_round_is_refused_and_nothing_is_sent(
    fake: tuple[Fake, str], tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    coordinator, url = fake
    write_csv(tmp_path, gmm_data())
    coordinator.round_change = {0: change}
    outcome = agent(tmp_path, coordinator, url)
    assert outcome.code == 2, outcome.log[-2000:]
    assert message in outcome.log
    assert outcome.reports == []


#: A gmmk run of K = 2 on d = 3: β has 2·(3 + 1) = 8 values.
MIXTURE_BETA = [0.5, -0.5, 0.25, 0.1, -0.2, 0.3, 0.0, 0.1]


@pytest.mark.parametrize(
    ("published", "round_change", "message"),
    [
        # Another K than the hospital pinned (--components 2), at the first contact.
        (
            {"components": 4},
            {},
            "fits model gmmk with components = 4, but this agent consents "
            "to components = 2 (--components); refusing",
        ),
        # K changed during the run: the round's parameters are not the bound ones.
        (
            {"components": 2},
            {"params": {"components": 3}},
            "changed its parameters during the run: model_options",
        ),
        # A β of d values, the size of another model's: refused, never padded or cut.
        (
            {"components": 2},
            {"beta": [0.5, -0.5, 0.25]},
            "beta with 3 entries for a run whose beta has 8",
        ),
    ],
)
def test_a_lying_coordinator_of_a_mixture_is_refused_and_nothing_is_sent(
    tmp_path: Path, published: dict[str, int], round_change: dict[str, Any], message: str
) -> None:
    write_csv(tmp_path, gmm_data())  # gmmk reads the same covariates
    params = public("gmmk", model_options=published)
    coordinator = Fake(params, betas=[MIXTURE_BETA] * 2)
    if "params" in round_change:
        changed = public("gmmk", model_options=round_change["params"])
        round_change = {"params": changed}
    coordinator.round_change = {0: round_change}
    with live_server(coordinator.app()) as url:
        outcome = agent(tmp_path, coordinator, url, "--components", "2", model="gmmk")
    assert outcome.code == 2, outcome.log[-2000:]
    assert message in outcome.log
    assert outcome.reports == []
    assert "Traceback" not in outcome.log


def test_another_k_after_a_restart_is_refused_even_when_the_agent_pins_it_anew(
    tmp_path: Path,
) -> None:
    # The hospital restarts its agent with --components 3 after the coordinator switched
    # the run to K = 3: the pin agrees, but the run's binding in the ledger holds K = 2.
    write_csv(tmp_path, gmm_data())
    params = public("gmmk", model_options={"components": 2})
    coordinator = Fake(params, betas=[MIXTURE_BETA], stop=True)
    with live_server(coordinator.app()) as url:
        first = agent(tmp_path, coordinator, url, "--components", "2", model="gmmk")
        assert first.code == 2 and "stopped by the test" in first.log, first.log[-2000:]
        assert [r["round"] for r in first.reports] == [0]
        coordinator.params = public("gmmk", model_options={"components": 3})
        coordinator.betas = [[0.1] * 12] * 2
        coordinator.stop = False
        again = agent(tmp_path, coordinator, url, "--components", "3", model="gmmk")
    assert again.code == 2
    assert (
        f"run {RUN} changed since this agent first took part: params.model_options.components "
        "was 2, now 3" in again.log
    )
    assert again.reports == []


def test_a_second_report_for_a_round_at_another_beta_is_refused(
    fake: tuple[Fake, str], tmp_path: Path
) -> None:
    coordinator, url = fake
    write_csv(tmp_path, gmm_data())
    coordinator.betas, coordinator.stop = [[0.5, -0.5, 0.25]], True
    assert agent(tmp_path, coordinator, url).code == 2
    coordinator.betas = [[0.1, 0.1, 0.1], [0.5, -0.5, 0.25]]
    again = agent(tmp_path, coordinator, url)
    assert again.code == 2
    assert "round 0 of run run-under-attack was already reported at a different beta" in again.log
    assert len(coordinator.reports) == 1


# --- 3. fresh noise: copies of a state directory ------------------------------------------
def test_copies_of_one_state_directory_send_independent_noise(tmp_path: Path) -> None:
    """The residual of the two reports' difference against the noiseless difference is
    N(0, 2·m_t·σ_r²) per coordinate: χ² with T·d degrees of freedom, not 0."""
    d, n, rounds = 10, 60, 5
    first, second = tmp_path / "a", tmp_path / "b"
    x = gmm_data(n, d)
    write_csv(first, x)
    x2 = x.copy()
    x2[0] = 4.0  # the neighbouring data set: one record replaced
    write_csv(second, x2)
    ledger = Ledger(first / "state")  # the state directory the attacker copies (or restores)
    seed = ledger.seed()
    ledger.close()
    shutil.copytree(first / "state", second / "state")
    betas = [list(np.linspace(-1.0, 1.0, d))] * rounds
    params = public(d=d, n=n, rounds=rounds)
    coordinator = Fake(params, records=n, betas=betas)
    with live_server(coordinator.app()) as url:
        a = agent(first, coordinator, url)
        b = agent(second, coordinator, url)
    assert (a.code, b.code) == (0, 0), a.log[-2000:] + b.log[-2000:]
    public_params = PublicParameters.model_validate(params)
    mechanism, _ = agent_mechanism(
        public_params, budget=Budget(epsilon=1.0, delta=1e-5, accounting="exact")
    )
    assert isinstance(mechanism, LocalTruncation)
    noiseless = LocalTruncation(scale=mechanism.scale, smoothing=mechanism.smoothing, noise_std=0.0)
    z = []
    model = get_model("gmm")
    exact = []
    for path in (first, second):
        records = load_records(path / "records.csv", "gmm")
        groups = round_groups(records, rounds, reuse=False, rng=partition_rng(seed, RUN))
        exact.append(
            [
                holder_round(
                    model=model,
                    beta=np.array(betas[t]),
                    records=groups[t],
                    sigma=1.0,
                    mechanism=noiseless,
                    rng=np.random.default_rng(0),
                ).total
                for t in range(rounds)
            ]
        )
    for t in range(rounds):
        m = a.reports[t]["count"]
        assert b.reports[t]["count"] == m
        residual = (np.array(a.reports[t]["total"]) - np.array(b.reports[t]["total"])) - (
            exact[0][t] - exact[1][t]
        )
        z.extend(residual / (mechanism.noise_std * math.sqrt(2 * m)))
    statistic = float(np.sum(np.square(z)))
    dof = rounds * d
    print(f"copied state: sum z^2 = {statistic:.1f} on {dof} degrees of freedom")
    assert np.min(np.abs(z)) > 0.0
    assert chi2.ppf(1e-6, dof) < statistic < chi2.ppf(1 - 1e-6, dof)


# --- 4. the budget is the hospital's own ---------------------------------------------------
def test_no_budget_no_report(fake: tuple[Fake, str], tmp_path: Path) -> None:
    coordinator, url = fake
    write_csv(tmp_path, gmm_data())
    outcome = agent(tmp_path, coordinator, url, budget=[])
    assert outcome.code == 2
    assert "the following arguments are required: --epsilon, --delta" in outcome.log
    assert coordinator.requests == [] and outcome.reports == []


# --- 5. the budget belongs to the state directory, not to a file hash ---------------------
@pytest.mark.parametrize("change", ["reversed", "appended"])
def test_a_reordered_or_appended_file_is_charged_against_the_same_budget(
    tmp_path: Path, change: str
) -> None:
    x = gmm_data()
    write_csv(tmp_path, x)
    coordinator = Fake(public())
    with live_server(coordinator.app()) as url:
        assert agent(tmp_path, coordinator, url).code == 0
        changed = x[::-1] if change == "reversed" else np.vstack([x, gmm_data(1, seed=9)])
        write_csv(tmp_path, changed)
        second = Fake(public(n=len(changed)), records=len(changed), run_id="second-run")
        with live_server(second.app()) as url2:
            again = agent(tmp_path, second, url2)
        # A disjoint population may be declared, and then has a budget of its own.
        third = Fake(public(n=len(changed)), records=len(changed), run_id="third-run")
        with live_server(third.app()) as url3:
            other = agent(tmp_path, third, url3, "--dataset", "other-population")
    assert again.code == 2
    assert "records changed since the last run; charged against the same budget" in again.log
    assert re.search(r"would spend epsilon 1\.\d+ .* over this agent's budget of 1", again.log)
    assert other.code == 0 and len(other.reports) == 2
    ledger = Ledger(tmp_path / "state")
    try:
        spent = ledger.spent_epsilon("default", delta=1e-5, accounting="exact")
        assert spent == pytest.approx(1.0, rel=1e-9)
        assert ledger.spent_epsilon("other-population", delta=1e-5, accounting="exact") == (
            pytest.approx(1.0, rel=1e-9)
        )
    finally:
        ledger.close()


# --- 6. extreme parameters: refused whatever the records ----------------------------------
def _raw(**change: str) -> str:
    params = json.dumps(public())
    for name, text in change.items():
        params = re.sub(rf'"{name}": [^,}}]+', f'"{name}": {text}', params)
    return json.dumps({"run_id": RUN, "hospital": "h0", "records": 40, "params": "P"}).replace(
        '"P"', params
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_raw(scale="1e300"), "scale = 1e+300, which must be a finite number in [1e-100, 1e+100]"),
        (_raw(sigma="1e-170"), "sigma = 1e-170"),
        (_raw(sigma="1e300"), "sigma = 1e+300"),
        (_raw(sigma="NaN"), "invalid answer to GET /me: params.sigma: Input should be a finite"),
        (_raw(sigma='"Infinity"'), "invalid answer to GET /me: params.sigma: Input should be a"),
        (_raw(scale='"1e400"'), "invalid answer to GET /me: params.scale: Input should be a"),
        (_raw(mechanism='"local-clip"', clip="1e300"), "clip = 1e+300"),
        (_raw(rounds="0"), "rounds must be an integer >= 1, got 0"),
        (_raw(rounds="100"), "records = 40, which must be an integer in [rounds = 100"),
        (_raw(d="0"), "d = 0"),
        (_raw(d="200000"), "d = 200000"),
        (_raw(smoothing="3.0"), "smoothing = 3.0, which must be sqrt(log(p/zeta))"),
        (_raw(zeta="0.99"), "zeta = 0.99"),
        (_raw(eta="1e9"), "eta = 1000000000.0"),
        (_raw(records_per_round="0"), "records_per_round = 0"),
        (_raw(epsilon="1e-300"), "epsilon = 1e-300"),
        (_raw(delta="0.9"), "delta = 0.9"),
        (_raw(model='"svm"'), "invalid answer to GET /me: params.model"),
        ('{"run_id": 1}', "invalid answer to GET /me"),
        ("not json", "invalid answer to GET /me"),
    ],
)
def test_extreme_parameters_are_refused_whatever_the_records(
    fake: tuple[Fake, str], tmp_path: Path, raw: str, message: str
) -> None:
    coordinator, url = fake
    first, second = neighbours(tmp_path, "gmm", 0.5, 1e300)
    coordinator.raw_identity = raw
    a = agent(first, coordinator, url)
    b = agent(second, coordinator, url)
    indistinguishable(a, b)
    assert a.code == 2
    assert message in a.log, a.log[-1000:]
    assert "Traceback" not in a.log
    assert coordinator.requests == ["me", "me"] and a.reports == []


def test_a_file_that_does_not_load_stops_the_agent_before_it_contacts_anyone(
    fake: tuple[Fake, str], tmp_path: Path
) -> None:
    """Whatever the coordinator would say: it is never asked."""
    coordinator, url = fake
    (tmp_path / "records.csv").write_text("x0,x1,x2\n1,2,3\nnot,a,number\n")
    outcome = agent(tmp_path, coordinator, url)
    assert outcome.code == 2
    assert "records.csv line 3, column 'x0': not a number" in outcome.log
    assert outcome.log.count("\n") == 1 and "Traceback" not in outcome.log
    assert coordinator.requests == [] and outcome.reports == []


# --- 7. the model is the agent's own ------------------------------------------------------
MODELS = ("gmm", "mrm", "rmc")


def model_neighbours(tmp_path: Path, model: str) -> dict[str, Path]:
    """Directories of records.csv for ``model`` (40 records, d = 3): complete, one blank
    covariate, and (for models with a response) one blank response, in record 0."""
    files: dict[str, Path] = {}
    if model == "gmm":
        x, y = gmm_data(), None
    else:
        x, y = mrm_data()
    kinds = ["complete", "blank covariate"] + ([] if y is None else ["blank response"])
    for kind in kinds:
        directory = tmp_path / model / kind.replace(" ", "-")
        write_csv(directory, x, y)
        lines = (directory / "records.csv").read_text().splitlines()
        cells = lines[1].split(",")
        if kind == "blank covariate":
            cells[0] = ""
        elif kind == "blank response":
            cells[-1] = ""
        lines[1] = ",".join(cells)
        (directory / "records.csv").write_text("\n".join(lines) + "\n")
        files[kind] = directory
    return files


@pytest.mark.parametrize(
    ("own", "announced"), [(a, b) for a in MODELS for b in MODELS if a != b], ids=str
)
def test_a_coordinator_naming_another_model_learns_nothing_from_the_records(
    tmp_path: Path, own: str, announced: str
) -> None:
    """The run is ``own``'s (the agent's --model); the coordinator announces ``announced``.
    Complete, blank-covariate and blank-response files give the same (exit, reports)."""
    coordinator = Fake(public(announced))
    outcomes: dict[str, Outcome] = {}
    with live_server(coordinator.app()) as url:
        for kind, directory in model_neighbours(tmp_path, own).items():
            outcomes[kind] = agent(directory, coordinator, url, model=own)
    seen = {kind: (o.code, len(o.reports)) for kind, o in outcomes.items()}
    assert set(seen.values()) == {(2, 0)}, seen
    for outcome in outcomes.values():
        assert outcome.log.count("\n") == 1 and "Traceback" not in outcome.log
    assert f"fits model {announced}, but this agent holds records for model {own}" in (
        outcomes["complete"].log
    )


# --- 8. one agent per state directory -----------------------------------------------------
def test_two_agents_on_one_state_directory_released_together_report_once(
    tmp_path: Path,
) -> None:
    """The fake holds round 0 until both agents poll for it (or 10 s pass): without the
    lock both would pass the budget check on an empty ledger. The first agent's lock stops
    the second with one line before it reads a record or sends."""
    write_csv(tmp_path, gmm_data())
    token_file(tmp_path, TOKEN, TOKEN_FILE)
    coordinator = Fake(public(), hold_for=2)
    with live_server(coordinator.app()) as url, process_manager(tmp_path) as procs:
        processes = [procs.start(f"twin{k}", *agent_argv(url, "gmm", BUDGET, ())) for k in range(2)]
        codes = sorted(process.wait(120) for process in processes)
        logs = [procs.log(process) for process in processes]
    assert codes == [0, 2], logs
    loser = next(log for log, process in zip(logs, processes, strict=True) if process.returncode)
    assert loser.count("\n") == 1 and "Traceback" not in loser, loser
    assert "another agent" in loser and "is using this state directory" in loser
    assert [r["round"] for r in coordinator.reports] == [0, 1]  # one agent, once a round
    ledger = Ledger(tmp_path / "state")
    try:
        assert ledger.spent_epsilon("default", delta=1e-5, accounting="exact") == (
            pytest.approx(1.0, rel=1e-9)
        )
    finally:
        ledger.close()
