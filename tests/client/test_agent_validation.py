"""The agent's checks of what the coordinator sends, at the edges of every documented range,
and the ledger's binding, budget key and noise source (docs/PRIVACY.md)."""

from __future__ import annotations

import logging
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from ldpem.client import agent as agent_module
from ldpem.client.agent import Agent, AgentError
from ldpem.client.config import AgentConfig
from ldpem.client.ledger import DEFAULT_DATASET, Ledger
from ldpem.client.trust import BETA_MAX, check_beta, check_public
from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.core.errors import UserError
from ldpem.common.models import Records
from ldpem.common.protocol import noise_rng, partition_rng
from ldpem.common.wire import Identity, PublicParameters, describe_errors
from tests.publickit import published_params


def identity(**change: Any) -> Identity:
    records = change.pop("records", 40)
    params = published_params(**change)
    body = {"run_id": "r", "hospital": "h0", "records": records, "params": params}
    try:
        return Identity.model_validate(body)
    except ValidationError:
        # NaN, ±inf: the strict wire schema refuses them already when the agent parses the
        # answer (tests/client/test_hostile_answers.py); check_public must refuse them too.
        return Identity.model_construct(
            **{**body, "params": PublicParameters.model_construct(**params)}
        )


@pytest.mark.parametrize(
    "change",
    [
        {"sigma": 1e-100},
        {"sigma": 1e100},
        {"scale": 1e-100},
        {"scale": 1e100},
        {"eta": 1e3},
        {"zeta": 0.5},
        {"zeta": 1e-12},
        {"d": 100_000},
        {"rounds": 40},
        {"records": 10**9, "rounds": 1},
        {"epsilon": 1e3, "delta": 0.5},
        {"mechanism": "local-clip", "clip": 1e100, "scale": None, "smoothing": None},
    ],
)
def test_values_at_the_edges_of_the_ranges_are_accepted(change: dict[str, Any]) -> None:
    check_public(identity(**change))


@pytest.mark.parametrize(
    ("run_id", "hospital", "field"),
    [("../admin", "h0", "run_id"), ("r" * 65, "h0", "run_id"), ("r", "h 0", "hospital")],
)
def test_names_that_are_not_plain_are_refused(run_id: str, hospital: str, field: str) -> None:
    me = identity().model_copy(update={"run_id": run_id, "hospital": hospital})
    with pytest.raises(AgentError, match=f"the coordinator sent {field} = "):
        check_public(me)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sigma": 9.9e-101}, "sigma"),
        ({"sigma": 1.01e100}, "sigma"),
        ({"sigma": math.nan}, "sigma"),
        ({"sigma": math.inf}, "sigma"),
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": -1.0}, "sigma"),
        ({"scale": 1.01e100}, "scale"),
        ({"scale": 0.0}, "scale"),
        ({"scale": None}, "scale"),
        ({"eta": 1001.0}, "eta"),
        ({"eta": 0.0}, "eta"),
        ({"tau": math.inf}, "tau"),
        ({"zeta": 0.51}, "zeta"),
        ({"zeta": 0.0}, "zeta"),
        ({"d": 0}, "d"),
        ({"d": 100_001}, "d"),
        ({"rounds": 0}, "rounds"),
        ({"rounds": 10_001}, "rounds"),
        ({"rounds": 41}, "records"),
        ({"records": 10**9 + 1}, "records"),
        ({"records_per_round": 0}, "records_per_round"),
        ({"epsilon": 1e-7}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"delta": 0.6}, "delta"),
        ({"delta": 0.0}, "delta"),
        ({"smoothing": 2.0}, "smoothing"),
        ({"smoothing": math.nan}, "smoothing"),
        ({"mechanism": "local-clip", "clip": None}, "clip"),
        ({"mechanism": "local-clip", "clip": 1.01e100}, "clip"),
        ({"mechanism": "local-clip", "clip": -1.0}, "clip"),
        # A value published for another mechanism is checked all the same.
        ({"clip": math.inf}, "clip"),
        ({"mechanism": "local-clip", "clip": 1.0, "scale": 1e300}, "scale"),
        ({"mechanism": "local-clip", "clip": 1.0, "smoothing": 7.0}, "smoothing"),
        ({"smoothing": None}, "smoothing"),
    ],
)
def test_values_outside_the_ranges_are_refused(change: dict[str, Any], field: str) -> None:
    with pytest.raises(
        AgentError,
        match=f"the coordinator sent {field} = .* before anything is computed from the records",
    ):
        check_public(identity(**change))


@pytest.mark.parametrize(
    ("beta", "ok"),
    [
        ([BETA_MAX, 0.0, 0.0], True),
        ([0.0, 0.0, 0.0], True),
        ([-BETA_MAX, 0.0, 0.0], True),
        ([BETA_MAX * 1.01, 0.0, 0.0], False),
        ([BETA_MAX, BETA_MAX, 0.0], False),  # each entry in range, the norm is not
        ([1.7e308, 1.7e308, 1.7e308], False),  # ‖β‖² would overflow: computed scaled
        ([math.nan, 0.0, 0.0], False),
        ([math.inf, 0.0, 0.0], False),
        ([1.0, 2.0], False),
    ],
)
def test_beta_edges(beta: list[float], ok: bool) -> None:
    if ok:
        check_beta(beta, 3)
    else:
        with pytest.raises(AgentError, match="beta"):
            check_beta(beta, 3)


def test_noise_is_fresh_unless_a_research_seed_is_given() -> None:
    fresh = [noise_rng(None, "r", 0).normal(size=4) for _ in range(2)]
    assert not np.array_equal(fresh[0], fresh[1])
    seeded = [noise_rng(7, "r", 0).normal(size=4) for _ in range(2)]
    np.testing.assert_array_equal(seeded[0], seeded[1])
    assert not np.array_equal(seeded[0], noise_rng(7, "r", 1).normal(size=4))
    # The partition uses every bit of the run id's SHA-256: two ids give two permutations.
    assert not np.array_equal(
        partition_rng(7, "r").permutation(50), partition_rng(7, "s").permutation(50)
    )


def test_a_new_ledger_draws_a_128_bit_partition_seed(tmp_path: Path) -> None:
    seeds = []
    for name in ("a", "b"):
        ledger = Ledger(tmp_path / name)
        seeds.append(ledger.seed())
        assert ledger.seed() == seeds[-1]  # kept
        ledger.close()
    assert seeds[0] != seeds[1]
    # 128 random bits: below 2^128, and above 2^100 except with probability 2^-28 each.
    assert all(2**100 < s < 2**128 for s in seeds)


def test_a_legacy_ledger_charges_every_spend_to_the_default_dataset(tmp_path: Path) -> None:
    """A schema-1 ledger keyed spends by a records digest; opened now, they all count
    against the default dataset, and its runs cannot be resumed."""
    tmp_path.mkdir(exist_ok=True)
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    db.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE runs (run_key TEXT PRIMARY KEY, seed INTEGER NOT NULL, data TEXT NOT NULL);
        CREATE TABLE rounds (run_key TEXT NOT NULL, round INTEGER NOT NULL, data TEXT NOT NULL,
            mu REAL NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
            noise_std REAL NOT NULL, beta_digest TEXT NOT NULL, body BLOB NOT NULL,
            status TEXT NOT NULL, persisted_at REAL NOT NULL, acknowledged_at REAL,
            PRIMARY KEY (run_key, round));
        INSERT INTO runs VALUES ('old', 5, 'abc123');
        INSERT INTO rounds VALUES ('old', 0, 'abc123', 0.5, 1, 1e-5, 1, 'b', x'00',
            'acknowledged', 0, NULL);
        """
    )
    db.commit()
    db.close()
    ledger = Ledger(tmp_path)
    assert ledger.mu_squared(DEFAULT_DATASET) == pytest.approx(0.25)
    bound = ledger.binding("old")
    assert bound is not None and bound.binding == ""
    assert ledger.binding("new") is None
    ledger.close()


def _identity_transport(me: Identity) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/me":
            return httpx.Response(200, content=me.model_dump_json())
        return httpx.Response(500)

    return httpx.MockTransport(handler)


def config(tmp_path: Path, **change: Any) -> AgentConfig:
    values: dict[str, Any] = {
        "coordinator": "http://coordinator",
        "token": "t" * 20,
        "data": tmp_path / "never-read.csv",
        "state": tmp_path / "state",
        "epsilon": 1.0,
        "delta": 1e-5,
        "model": "gmm",
        "give_up": 0.1,
    }
    values.update(change)
    return AgentConfig(**values)


def forty_records(path: Path, model: str) -> Records:
    """The loader of an agent enrolled with ``identity()``'s 40 records of dimension 3."""
    return Records(np.ones((40, 3)), None)


def test_the_records_are_read_before_the_first_request(tmp_path: Path) -> None:
    """Reading comes first, for the agent's own model: nothing the coordinator says can
    change what is read or whether reading fails; a refusal comes after, from public values."""
    events: list[str] = []

    def loader(path: Path, model: str) -> Records:
        events.append(f"read {model}")
        return forty_records(path, model)

    def handler(request: httpx.Request) -> httpx.Response:
        events.append(f"request {request.url.path}")
        return httpx.Response(200, content=identity(sigma=1e-170).model_dump_json())

    a = Agent(config(tmp_path), loader=loader, transport=httpx.MockTransport(handler))
    with pytest.raises(AgentError, match="sigma = 1e-170"):
        a.run()
    a.close()
    assert events == ["read gmm", "request /v1/me"]


def test_a_file_that_does_not_load_stops_the_agent_before_any_request(tmp_path: Path) -> None:
    requests: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        return httpx.Response(200, content=identity().model_dump_json())

    (tmp_path / "bad.csv").write_text("a,b,c\n1,2,\n")  # gmm allows no missing value
    a = Agent(config(tmp_path, data=tmp_path / "bad.csv"), transport=httpx.MockTransport(handler))
    with pytest.raises(UserError, match="line 2, column 'c': missing value"):
        a.run()
    a.close()
    assert requests == []


@pytest.mark.parametrize(
    ("own", "announced"), [(a, b) for a in ("gmm", "mrm", "rmc") for b in ("gmm", "mrm", "rmc")]
)
def test_a_run_of_another_model_is_refused(tmp_path: Path, own: str, announced: str) -> None:
    def loader(path: Path, model: str) -> Records:
        assert model == own  # the agent's own model, never the announced one
        return Records(np.ones((40, 3)), None if own == "gmm" else np.ones(40))

    a = Agent(
        config(tmp_path, model=own),
        loader=loader,
        transport=_identity_transport(identity(model=announced, sigma=1e-170)),
    )
    with pytest.raises(AgentError) as refused:
        a.run()
    a.close()
    if own == announced:
        assert "sigma = 1e-170" in str(refused.value)  # got past the model check
    else:
        message = f"fits model {announced}, but this agent holds records for model {own}"
        assert message in str(refused.value)


def test_an_unknown_model_of_its_own_is_refused(tmp_path: Path) -> None:
    a = Agent(config(tmp_path, model="no-such-model"), loader=forty_records)
    with pytest.raises(AgentError, match="model must be one of"):
        a.run()
    a.close()


@pytest.mark.parametrize(
    ("model", "options", "line"),
    [
        (
            "gmmk",
            (("components", 11),),
            "components must be an integer in [2, 10] for model gmmk, got 11",
        ),
        (
            "lca",
            (("components", 1),),
            "components must be an integer in [2, 10] for model lca, got 1",
        ),
        ("gmm", (("components", 3),), "model gmm has no option components (its options: none)"),
    ],
)
def test_model_options_of_its_own_out_of_the_declaration_are_refused(
    tmp_path: Path, model: str, options: tuple[tuple[str, int], ...], line: str
) -> None:
    requests: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        return httpx.Response(500)

    agent_config = config(tmp_path, model=model, model_options=options)
    a = Agent(agent_config, loader=forty_records, transport=httpx.MockTransport(handler))
    with pytest.raises(AgentError) as refused:
        a.run()
    a.close()
    assert str(refused.value) == line
    assert requests == []  # refused before any contact


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"components": 11}, "components must be an integer in [2, 10] for model gmmk, got 11"),
        ({"components": 1}, "components must be an integer in [2, 10] for model gmmk, got 1"),
        ({"classes": 3}, "model gmmk has no option classes (its options: components)"),
        ({"components": True}, "model_options.components"),
        ({"components": 2.0}, "model_options.components"),
    ],
)
def test_public_model_options_outside_the_declaration_do_not_parse(
    options: dict[str, Any], message: str
) -> None:
    # The coordinator is an adversary: options the model does not declare, or a value out
    # of range or not an integer, are refused when the agent parses the answer.
    with pytest.raises(ValidationError) as refused:
        PublicParameters.model_validate(published_params(model="gmmk", model_options=options))
    assert message in describe_errors(refused.value.errors())


@pytest.mark.parametrize(
    ("model", "pinned", "published", "line"),
    [
        # The coordinator publishes another K than the hospital pinned.
        (
            "gmmk",
            (("components", 2),),
            {"components": 4},
            "components = 4, but this agent consents to components = 2",
        ),
        # Unpinned, the agent consents to the model's default K = 3 only.
        ("lca", (), {"components": 5}, "components = 5, but this agent consents to components = 3"),
        (
            "gmmk",
            (("components", 4),),
            {},
            "components = 3, but this agent consents to components = 4",
        ),
    ],
)
def test_a_run_of_other_model_options_than_pinned_is_refused(
    tmp_path: Path,
    model: str,
    pinned: tuple[tuple[str, int], ...],
    published: dict[str, int],
    line: str,
) -> None:
    me = identity(model=model, model_options=published)
    agent_config = config(tmp_path, model=model, model_options=pinned)
    a = Agent(agent_config, loader=forty_records, transport=_identity_transport(me))
    with pytest.raises(AgentError) as refused:
        a.run()
    a.close()
    assert str(refused.value) == (
        f"run 'r' fits model {model} with {line} (--components); refusing"
    )


@pytest.mark.parametrize(("model", "k"), [("gmmk", 2), ("lca", 3)])
def test_a_run_of_the_pinned_model_options_gets_past_the_pin(
    tmp_path: Path, model: str, k: int
) -> None:
    # The same options (given, or the default K = 3 on both sides): refused only later, by
    # a public value out of range, so the pin itself let the run through.
    me = identity(model=model, model_options={"components": k}, sigma=1e-170)
    agent_config = config(tmp_path, model=model, model_options=(("components", k),))
    a = Agent(agent_config, loader=forty_records, transport=_identity_transport(me))
    with pytest.raises(AgentError, match="sigma = 1e-170"):
        a.run()
    a.close()


def test_a_mixture_whose_beta_would_exceed_the_largest_report_is_refused() -> None:
    # d = 100 000 is in range, but K = 10 makes β 10·(d + 1) values: refused from public
    # values, before the records' shape is compared.
    me = identity(model="gmmk", d=100_000, model_options={"components": 10})
    with pytest.raises(AgentError, match="the coordinator sent model_options = "):
        check_public(me)
    check_public(identity(model="gmmk", d=9_999, model_options={"components": 10}))


def test_public_parameters_without_options_are_published_as_before() -> None:
    # Left out of the JSON while empty: a run of a model without options is published and
    # bound in an agent's ledger byte for byte as before.
    plain = PublicParameters.model_validate(published_params())
    assert "model_options" not in plain.model_dump(mode="json")
    mixture = PublicParameters.model_validate(
        published_params(model="gmmk", model_options={"components": 4})
    )
    assert mixture.model_dump(mode="json")["model_options"] == {"components": 4}


def test_a_mixtures_smoothing_is_that_of_its_beta_size_not_of_d() -> None:
    # gmmk, K = 2, d = 3: β_s = √(log(8/ζ)); a coordinator publishing √(log(3/ζ)), the
    # value of d, is refused: the agent computes β_s for the p coordinates it truncates.
    as_d = identity(
        model="gmmk", model_options={"components": 2}, smoothing=smoothing_precision(3, 0.1)
    )
    with pytest.raises(AgentError, match="p = 8 the size of beta"):
        check_public(as_d)
    check_public(identity(model="gmmk", model_options={"components": 2}))


def test_a_mixtures_beta_is_checked_at_its_parameter_size() -> None:
    # gmmk with K = 2 on d = 3: β = (b_1, b_2, α) has 2·(3 + 1) = 8 entries, not d.
    size = 8
    check_beta([0.1] * size, size)
    with pytest.raises(AgentError, match="beta with 3 entries for a run whose beta has 8"):
        check_beta([0.1] * 3, size)


def test_a_second_agent_on_one_state_directory_stops_with_one_line(tmp_path: Path) -> None:
    first = Agent(config(tmp_path), loader=forty_records)
    with pytest.raises(UserError) as refused:
        Agent(config(tmp_path), loader=forty_records)
    message = str(refused.value)
    assert "another agent" in message and "is using this state directory" in message
    assert f"(pid {os.getpid()})" in message and "\n" not in message
    first.close()
    Agent(config(tmp_path), loader=forty_records).close()  # free again once the first closed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"epsilon": 0.0}, "epsilon must be in"),
        ({"epsilon": math.inf}, "epsilon must be in"),
        ({"delta": 0.9}, "delta must be in"),
        ({"seed": -1}, "seed must be >= 0"),
    ],
)
def test_the_agents_own_budget_is_checked(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    a = Agent(
        config(tmp_path, **change), loader=forty_records, transport=_identity_transport(identity())
    )
    with pytest.raises(AgentError, match=message):
        a.run()
    a.close()


def test_a_research_seed_warns_that_it_voids_the_guarantee(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = Agent(
        config(tmp_path, seed=3),
        loader=forty_records,
        transport=_identity_transport(identity(sigma=1e-170)),
    )
    with caplog.at_level(logging.WARNING, logger=agent_module.log.name), pytest.raises(AgentError):
        a.run()
    a.close()
    assert "--seed 3: the noise of every report is reproducible" in caplog.text
    assert "VOIDS the privacy guarantee" in caplog.text
