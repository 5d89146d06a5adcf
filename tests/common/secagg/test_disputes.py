"""Issue 41, finding 2: an ``excluded`` claim costs its parties, never the round. A holder
that names peers "excluded" in its masked input says their shares did not open for it;
the aggregator cannot check that, so each claim is a dispute, and of each disputed pair the
member in the most disputes leaves the survivor set (both on a tie), named in
``Aggregator.disputed``. On ff9f02a every accused holder left and the accuser stayed,
unnamed: three accusations out of four peers ended the round (K = 5, t_min = 3), and one
accusation a round kept its victim out of every sum."""

from __future__ import annotations

from typing import Any

import pytest

from ldpem.common.secagg import MaskedInput, SecAggError
from ldpem.common.secagg.aggregator import disputed
from tests.common.secagg.kit import Consortium, run_round


@pytest.fixture(scope="module")
def consortium() -> Consortium:
    return Consortium.of(5)


def test_an_accuser_of_three_of_four_peers_is_left_out_alone(consortium: Consortium) -> None:
    parameters = consortium.parameters(t_min=3)
    r = run_round(consortium, parameters, accuse={"h00": ("h01", "h02", "h03")})
    assert r.check.survivors == ("h01", "h02", "h03", "h04")
    assert list(r.aggregator.disputed) == ["h00"]
    assert "it excluded 3 peers, 0 excluded it" in r.aggregator.disputed["h00"]
    assert r.request.dropped == ("h00",)
    assert r.result == r.expected()  # the four others' inputs, exactly


def test_a_lone_accusation_costs_the_accuser_too(consortium: Consortium) -> None:
    """h00 names h01 every round: both leave, both named, and the round completes."""
    parameters = consortium.parameters(t_min=3)
    r = run_round(consortium, parameters, accuse={"h00": ("h01",)})
    assert r.check.survivors == ("h02", "h03", "h04")
    assert sorted(r.aggregator.disputed) == ["h00", "h01"]
    assert r.result == r.expected()


def test_a_dealer_of_garbage_to_everyone_is_left_out_alone(consortium: Consortium) -> None:
    """The honest case of the same rule: every peer reports h02's sealed shares; h02 is in
    four disputes, each accuser in one."""
    parameters = consortium.parameters(t_min=3)
    garbage = [("h02", n) for n in consortium.names if n != "h02"]
    r = run_round(consortium, parameters, garbage=garbage)
    assert r.check.survivors == ("h00", "h01", "h03", "h04")
    assert list(r.aggregator.disputed) == ["h02"]
    assert "0 peers, 4 excluded it" in r.aggregator.disputed["h02"]
    assert r.result == r.expected()


def test_disputes_that_leave_too_few_fail_the_round_not_silently(
    consortium: Consortium,
) -> None:
    """Two accusers in two disputes each with the same two peers: all four leave (a tie),
    one survivor is short of t_min = 3: a SecAggError the coordinator turns into a lost
    round (tests/server/test_secagg_faults.py), never a sum of one input."""
    parameters = consortium.parameters(t_min=3)
    with pytest.raises(SecAggError, match="t_min = 3"):
        run_round(consortium, parameters, accuse={"h00": ("h02", "h03"), "h01": ("h02", "h03")})


def _masked(holder: str, *excluded: str) -> Any:
    return MaskedInput(holder, "run", 0, b"\0" * 8, excluded)


def test_the_rule_ignores_claims_about_holders_that_sent_nothing() -> None:
    inputs = {n: _masked(n) for n in ("a", "b", "c")}
    inputs["a"] = _masked("a", "z")  # z sent no masked input: dropped anyway
    assert disputed(inputs) == {}


def test_the_rule_is_a_function_of_the_messages_alone() -> None:
    """The same masked inputs in any order leave the same holders out (a restarted
    coordinator replays them)."""
    inputs = {
        "a": _masked("a", "b", "c", "d"),
        "b": _masked("b"),
        "c": _masked("c", "d"),
        "d": _masked("d"),
        "e": _masked("e"),
    }
    once = disputed(inputs)
    again = disputed(dict(reversed(list(inputs.items()))))
    assert once == again
    # a is in 3 disputes, then c and d tie at one: all three leave.
    assert sorted(once) == ["a", "c", "d"]
