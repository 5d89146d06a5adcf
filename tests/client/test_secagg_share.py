"""An agent's noise share in a secagg run is the run's (issue 21; docs/SECAGG.md, "Every
share is the run's"): the run's modulus holds the sum of K shares of the run's size, so a
larger share of one agent's could make the masked sum wrap, and would not make the sum
more private. A stricter budget is refused (``trust.run_budget``), and a share larger than
the run's is refused (``secagg.check_share``) whatever made it larger."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ldpem.client.secagg import SecAggConfig, check_share, load_secagg
from ldpem.client.trust import AgentError, agent_mechanisms, run_budget
from ldpem.common.core.accounting import Budget
from ldpem.common.core.secagg_quantize import skellam_tail
from ldpem.common.protocol import holder_mechanism, public_budget
from ldpem.common.secagg import (
    Roster,
    generate_signing_key,
    public_key_bytes,
    signing_key_to_pem,
)
from ldpem.common.wire import PublicParameters, public_parameters
from tests.publickit import secagg_request

NAMES = [f"h{i}" for i in range(5)]


@pytest.fixture(scope="module")
def params() -> PublicParameters:
    roster = Roster({n: public_key_bytes(generate_signing_key()) for n in NAMES})
    return public_parameters(secagg_request(roster, t_min=3))


def share_mean(mechanism: object) -> float:
    return float(getattr(mechanism, "share_mean"))  # noqa: B009


@pytest.mark.parametrize("own", [(1.0, 1e-5), (5.0, 1e-5), (100.0, 0.5)])
def test_an_agent_at_least_as_loose_as_the_run_draws_exactly_the_runs_share(
    params: PublicParameters, own: tuple[float, float]
) -> None:
    epsilon, delta = run_budget(params, epsilon=own[0], delta=own[1], allow_weaker=False)
    assert (epsilon, delta) == (params.epsilon, params.delta)
    [(mechanism, _)] = {
        id(m): (m, mu)
        for m, mu in agent_mechanisms(
            params, budget=Budget(epsilon=epsilon, delta=delta, accounting="exact"), records=40
        )
    }.values()
    run = holder_mechanism(
        params,
        records=params.records_per_round,
        budget=public_budget(params),
    )
    assert share_mean(mechanism) == share_mean(run)
    check_share(mechanism, params)  # no refusal


@pytest.mark.parametrize("allow_weaker", [False, True])
@pytest.mark.parametrize("own", [(0.5, 1e-5), (1.0, 1e-6), (0.01, 1e-9)])
def test_a_stricter_budget_is_refused_even_with_allow_weaker(
    params: PublicParameters, own: tuple[float, float], allow_weaker: bool
) -> None:
    with pytest.raises(AgentError, match="--allow-weaker cannot help") as refusal:
        run_budget(params, epsilon=own[0], delta=own[1], allow_weaker=allow_weaker)
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("epsilon", [0.5, 0.1, 0.01])
def test_a_share_larger_than_the_runs_is_refused(params: PublicParameters, epsilon: float) -> None:
    """What a stricter budget WOULD draw (the check does not care why the share grew), and
    why it matters: at ε = 0.01 one share's std alone exceeds half the modulus."""
    assert params.modulus_bits is not None and params.holders is not None
    larger = holder_mechanism(
        params, records=40, budget=Budget(epsilon=epsilon, delta=params.delta, accounting="exact")
    )
    with pytest.raises(AgentError, match="could wrap") as refusal:
        check_share(larger, params)
    assert f"{params.modulus_bits} bits" in str(refusal.value)
    # The run's own shares fit: K of them and the data stay inside the modulus …
    run = holder_mechanism(
        params,
        records=40,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
    )
    half = 2 ** (params.modulus_bits - 1)
    assert skellam_tail(params.holders * share_mean(run), failure=2**-40) < half
    # … and the stricter share does not, at the run's failure probability.
    if epsilon <= 0.1:
        assert skellam_tail(share_mean(larger), failure=2**-40) > half
    if epsilon == 0.01:
        assert math.sqrt(2 * share_mean(larger)) > half


@pytest.mark.parametrize(
    ("t_min", "colluders", "floor", "joins"), [(5, 1, 4, True), (5, 1, 5, False)]
)
def test_min_honest_is_a_floor_on_the_honest_shares_t_min_minus_c(
    tmp_path: Path, t_min: int, colluders: int, floor: int, joins: bool
) -> None:
    """--min-honest counts the honest noise shares the run promises, t_min − c: a run of
    K = 5, t_min = 5, c = 1 promises 4 (issue 29: colluders add no noise)."""
    keys = {n: generate_signing_key() for n in NAMES}
    roster = Roster({n: public_key_bytes(k) for n, k in keys.items()})
    (tmp_path / "roster.json").write_text(roster.to_json())
    (tmp_path / "h0.key").write_bytes(signing_key_to_pem(keys["h0"]))
    run = public_parameters(secagg_request(roster, t_min=t_min, colluders=colluders))
    mechanism = holder_mechanism(
        run, records=40, budget=Budget(epsilon=run.epsilon, delta=run.delta, accounting="exact")
    )
    config = SecAggConfig(tmp_path / "h0.key", tmp_path / "roster.json", floor)
    if joins:
        session = load_secagg(config, run, "h0", mechanism)
        assert (session.t_min, session.colluders) == (t_min, colluders)
        return
    with pytest.raises(AgentError) as refused:
        load_secagg(config, run, "h0", mechanism)
    message = str(refused.value)
    assert "t_min - max(c, b) = 5 - max(1, 1) = 4 honest noise shares" in message
    assert "below its --min-honest 5" in message
    assert "\n" not in message
