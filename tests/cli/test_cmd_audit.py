"""`ldpem audit`: JSON contract, exit codes, one-line errors; the agent's construction."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from ldpem.cli import main
from ldpem.client import trust
from ldpem.commands.audit import agent_built, audited, run_audit
from ldpem.common import protocol
from ldpem.common.mechanisms import CentralTruncation, Mechanism, mechanism_names
from ldpem.common.models import get_model
from ldpem.common.wire import PublicParameters
from tests.cli.clikit import refused_from_the_shell


def test_json_results_for_the_local_mechanism(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "audit",
            "--mechanism",
            "local",
            "--draws",
            "100000",
            "--holder-draws",
            "2000",
            "--delta",
            "1e-3",
            "--json",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    assert payload["passed"] is True
    rows = payload["results"]
    assert {(r["accounting"], r["built_by"], r["path"]) for r in rows} == {
        (accounting, built_by, path)
        for accounting in ("exact", "paper")
        for built_by in ("simulator", "agent")
        for path in ("mechanism", "holder_round")
    }
    assert payload["simulator_only"] == []
    for row in rows:
        assert row["mechanism"] == "local"
        assert row["claimed_epsilon"] == 1.0
        assert 0.0 <= row["lower_bound"] <= 1.0
        assert row["passed"] is True
        # The holder path, and every path of the agent's construction, measure the noise
        # against an independently computed σ.
        measured = row["path"] == "holder_round" or row["built_by"] == "agent"
        assert (row["reference_noise_std"] is not None) == measured
        if measured:
            assert row["noise_std_ratio"][1] >= 0.98


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["audit", "--mechanism", "central-clip", "--accounting", "paper", "--draws", "1000"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "central-clip" in out and "pass" in out
    assert "central-clip: built by the simulator only" in out


def test_every_mechanism_a_run_can_publish_is_audited_as_the_agent_builds_it() -> None:
    federated = set(mechanism_names(federated=True)) - {"none", "secagg"}
    assert set(agent_built()) == federated & set(audited())
    # Left out: one no run can publish, and one whose guarantee is a sum of t_min shares.
    assert set(audited()) - set(agent_built()) == {"central-clip", "secagg"}
    assert federated <= set(audited())


#: Small enough for a few seconds (the candidate search dominates, hence d = 1), large
#: enough that the noise check sees a factor 2 (±6% at 300 reports per input); seeded.
SMALL: dict[str, Any] = {
    "mechanisms": agent_built(),
    "accountings": ("exact",),
    "epsilon": 1.0,
    "delta": 1e-3,
    "draws": 10_000,
    "holder_draws": 300,
    "model_name": "gmm",
    "d": 1,
    "records_per_round": 1000,
    "seed": 0,
}


@pytest.mark.parametrize("model", ["gmmk", "lca"])
def test_the_audit_passes_a_mixture_with_every_mechanism(model: str) -> None:
    """Issue 44: a mixture's report has p = K·(d + 1) coordinates, and every mechanism is
    built, audited and checked against its declarations for p (K = 2, d = 1: p = 4), by
    the simulator and, for the agent's mechanisms, by the agent's own construction from a
    run that carries the options."""
    rows = run_audit(
        **{
            **SMALL,
            "mechanisms": audited(),
            "accountings": ("exact", "paper"),
            "model_name": model,
            "model_options": (("components", 2),),
        }
    )
    assert {(r["mechanism"], r["accounting"]) for r in rows} == {
        (name, accounting) for name in audited() for accounting in ("exact", "paper")
    }
    assert {r["mechanism"] for r in rows if r["built_by"] == "agent"} == set(agent_built())
    failed = [(r["mechanism"], r["accounting"], r["path"]) for r in rows if not r["passed"]]
    assert failed == []
    local = next(r for r in rows if r["mechanism"] == "local" and r["path"] == "holder_round")
    tau = get_model(model, {"components": 2}).default_tau(beta_bound=3.0, sigma=1.0, d=1)
    built = protocol.make_mechanism(
        "local", d=4, records_per_round=1000, epsilon=1.0, delta=1e-3, tau=tau
    )
    # Declared for p = 4 coordinates, not for the records' d = 1.
    assert local["declared_sensitivity"] == built.sensitivity(4)
    assert 0 < local["pair_distance"] <= built.sensitivity(4) * (1 + 1e-9)


def test_the_audit_refuses_an_option_its_model_does_not_declare_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["audit", "--model", "gmm", "--components", "3", "--draws", "1000"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "ldpem audit: error: model gmm has no option components (its options: none)"
    ]


def plant_on_the_agents_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the mechanism the agent builds, and only that one: half the noise std where the
    agent adds noise; for central, where the coordinator adds it, twice the truncation
    scale, so the coordinator's σ_r (from the published scale) covers half the distance
    between two records' contributions."""
    real = protocol.holder_mechanism  # what ldpem.client.trust imported
    assert trust.agent_mechanism.__globals__["holder_mechanism"] is real

    def broken(params: PublicParameters, **kwargs: Any) -> Mechanism:
        mechanism: Mechanism = real(params, **kwargs)
        if mechanism.is_local:
            return mechanism.with_noise(mechanism.noise_std / 2)
        assert isinstance(mechanism, CentralTruncation) and mechanism.noise_std == 0.0
        return dataclasses.replace(mechanism, scale=2 * mechanism.scale)

    monkeypatch.setattr("ldpem.client.trust.holder_mechanism", broken)


def test_the_agents_construction_passes_when_honest() -> None:
    rows = run_audit(**SMALL)
    assert {r["mechanism"] for r in rows if r["built_by"] == "agent"} == set(SMALL["mechanisms"])
    failed = [(r["mechanism"], r["built_by"], r["path"]) for r in rows if not r["passed"]]
    assert failed == []


def test_a_noise_error_only_on_the_agents_path_fails_the_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant_on_the_agents_path(monkeypatch)
    rows = run_audit(**SMALL)
    # The simulator's construction does not see it: what the audit checked before.
    simulator = [r for r in rows if r["built_by"] == "simulator"]
    assert simulator and all(r["passed"] for r in simulator)
    # Every row of the agent's construction, every mechanism and path, fails; at least by
    # the noise check (about half the reference σ_r).
    agents = [r for r in rows if r["built_by"] == "agent"]
    assert {r["mechanism"] for r in agents} == set(SMALL["mechanisms"])
    for row in agents:
        assert row["passed"] is False, row
        assert row["noise_std_ratio"][1] < 0.6, row


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--epsilon", "-1"], "--epsilon must be > 0, got -1.0"),
        (["--delta", "1.5"], "--delta must be in (0, 1), got 1.5"),
        (["--draws", "10"], "--draws must be at least 100, got 10"),
    ],
)
def test_bad_arguments_are_one_line_errors(arguments: list[str], message: str) -> None:
    result = refused_from_the_shell(["audit", *arguments])
    assert result.stderr.strip() == f"ldpem audit: error: {message}"
