"""Issue 41, finding 4: budget drain. On ff9f02a any lie after the masked input left made
the agent charge one noise share alone: 40.5 at the K = 1000 expander against the run's
ε = 1, so a lying coordinator could spend a hospital's budget at will. A round refused
after masking now costs what the coordinator and b colluders can learn of it, one sum
with at least h honest shares (docs/PRIVACY.md, "What a refused round costs"): computed
here from the shares' Skellam mean and sensitivity, never from the agent's own figure.
And a run whose worst case would exceed the remaining budget is refused before joining.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpem.client.ledger import Entry, Ledger
from ldpem.client.secagg import (
    MASKED,
    REFUSED,
    SecAggConfig,
    SecAggSession,
    _charge_refused,
    check_worst_case,
    load_secagg,
    session_ratio,
)
from ldpem.client.trust import AgentError
from ldpem.common.core.accounting import Budget, ratio_for_budget
from ldpem.common.core.secagg_accounting import fallback_epsilon, skellam_epsilon
from ldpem.common.protocol import holder_mechanism
from ldpem.common.secagg import Roster, generate_signing_key, public_key_bytes, signing_key_to_pem
from ldpem.common.secagg.runvalues import run_shares_mechanism
from ldpem.common.wire import PublicParameters, public_parameters
from tests.publickit import secagg_request

K = 1000
RUN = "run-k1000"


@pytest.fixture(scope="module")
def expander(tmp_path_factory: pytest.TempPathFactory) -> tuple[PublicParameters, Path]:
    """A K = 1000 run on its default topology (the expander), the agent h0's key and
    roster in a folder."""
    folder = tmp_path_factory.mktemp("k1000")
    keys = {f"h{i}": generate_signing_key() for i in range(K)}
    roster = Roster({n: public_key_bytes(k) for n, k in keys.items()})
    (folder / "roster.json").write_text(roster.to_json())
    (folder / "h0.key").write_bytes(signing_key_to_pem(keys["h0"]))
    params = public_parameters(secagg_request(roster, rounds=5))
    assert params.graph is not None and params.graph.survivors  # the expander
    return params, folder


def _session(params: PublicParameters, folder: Path) -> SecAggSession:
    mechanism = holder_mechanism(
        params,
        records=40,
        budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
    )
    config = SecAggConfig(folder / "h0.key", folder / "roster.json", min_honest=1)
    return load_secagg(config, params, "h0", mechanism)


def test_a_refusal_after_masking_charges_the_derivation_not_one_share(
    expander: tuple[PublicParameters, Path], tmp_path: Path
) -> None:
    params, folder = expander
    session = _session(params, folder)
    assert params.graph is not None
    h = params.graph.honest
    assert session.assumed == K // 3 == params.colluders  # the default b: a third
    share = run_shares_mechanism(params)
    sensitivity = getattr(share, "integer_sensitivity")(params.d)  # noqa: B009
    mean = float(getattr(share, "share_mean"))  # noqa: B009
    derived = skellam_epsilon(h * mean, delta=params.delta, sensitivity=sensitivity)
    alone = fallback_epsilon(mean, delta=params.delta, sensitivity=sensitivity)
    assert alone > 40  # what ff9f02a charged
    assert derived == pytest.approx(params.epsilon, rel=1e-6)
    assert session.fallback_epsilon == pytest.approx(derived, rel=1e-9)
    ledger = Ledger(tmp_path / "state")
    try:
        mu = ratio_for_budget(params.epsilon, params.delta, "exact")
        entry = Entry(RUN, 0, "default", mu, params.epsilon, params.delta, 1.0, "b", b"", "")
        ledger.persist(
            ledger.reserve(entry, budget=1.0, delta=params.delta, accounting="exact"), b"{}"
        )
        ledger.mark(RUN, 0, MASKED)
        _charge_refused(session, ledger, RUN, 0, "a lie after the masked input")
        [charged] = ledger.entries(RUN)
        assert charged.status == REFUSED
        assert charged.epsilon == pytest.approx(derived, rel=1e-9)
        assert charged.mu == pytest.approx(session_ratio(session), rel=1e-12)
        # Never more than the budget allows: the agent's ε = 1 still holds.
        spent = ledger.spent_epsilon(delta=params.delta, accounting="exact")
        assert spent <= 1.0 * (1 + 1e-6)
    finally:
        ledger.close()


def test_a_refusal_before_masking_releases_the_charge(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    try:
        mu = ratio_for_budget(1.0, 1e-5, "exact")
        entry = Entry(RUN, 0, "default", mu, 1.0, 1e-5, 1.0, "b", b"", "")
        ledger.persist(ledger.reserve(entry, budget=1.0, delta=1e-5, accounting="exact"), b"{}")
        ledger.release(RUN, 0, status=REFUSED)
        [released] = ledger.entries(RUN)
        assert (released.status, released.mu, released.epsilon) == (REFUSED, 0.0, 0.0)
        assert ledger.spent_epsilon(delta=1e-5, accounting="exact") == 0.0
        ledger.mark(RUN, 0, MASKED)  # a masked round is never released
        with pytest.raises(RuntimeError, match="not reserved or persisted"):
            ledger.release(RUN, 0, status=REFUSED)
    finally:
        ledger.close()


def _check_worst_case(ledger: Ledger, session: SecAggSession, mu: float, *, budget: float) -> None:
    check_worst_case(
        ledger,
        session,
        run_id=RUN,
        mu=mu,
        epsilon=budget,
        dataset="default",
        delta=1e-5,
        accounting="exact",
    )


def test_a_run_whose_worst_case_exceeds_the_budget_is_refused_before_joining(
    expander: tuple[PublicParameters, Path], tmp_path: Path
) -> None:
    params, folder = expander
    session = _session(params, folder)
    ledger = Ledger(tmp_path / "state")
    try:
        mu = session_ratio(session)
        _check_worst_case(ledger, session, mu, budget=1.0)  # the run's own epsilon fits
        with pytest.raises(AgentError) as refused:
            _check_worst_case(ledger, session, mu, budget=0.9)
        line = str(refused.value)
        assert "worst case, every round charged epsilon 1" in line
        assert "--epsilon 0.9" in line and "--max-colluders" in line and "\n" not in line
    finally:
        ledger.close()
