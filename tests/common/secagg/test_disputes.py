"""Issue 41, finding 2: an ``excluded`` claim is bounded. A holder that names peers
"excluded" in its masked input says their shares did not open for it; the aggregator
cannot check that. A claim is honoured (the accused leaves, the accuser named in its
reason, ``Aggregator.disputed``) while its maker's claims fit in what the round can spare
(the masked holders less t_min, or T); a holder whose claims exceed that is left out
itself, named, and its claims are void. On ff9f02a every claim was honoured and nobody
named: three accusations out of four peers ended the round (K = 5, t_min = 3), and one
accusation a round kept its victim out of every sum without naming the accuser."""

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
    assert "excluded 3 peers, more than the 2 this round can spare" in r.aggregator.disputed["h00"]
    assert r.request.dropped == ("h00",)
    assert r.result == r.expected()  # the four others' inputs, exactly


def test_a_lone_accusation_is_honoured_and_names_its_maker(consortium: Consortium) -> None:
    """h00 names h01: h01 leaves (it may have dealt garbage), and its reason names h00, so
    an accuser that does it every round is seen on the page, the API and the log."""
    parameters = consortium.parameters(t_min=3)
    # A real failure to open (h01 sealed garbage to h00) and a lie look the same here.
    r = run_round(consortium, parameters, garbage=[("h01", "h00")])
    assert r.masked["h00"].excluded == ("h01",)
    assert r.check.survivors == ("h00", "h02", "h03", "h04")
    assert r.aggregator.disputed == {"h01": "its shares did not open for h00"}
    assert r.result == r.expected()


def test_a_dealer_of_garbage_to_everyone_is_left_out_alone(consortium: Consortium) -> None:
    """The honest case: every peer reports h02's sealed shares, one claim each."""
    parameters = consortium.parameters(t_min=3)
    garbage = [("h02", n) for n in consortium.names if n != "h02"]
    r = run_round(consortium, parameters, garbage=garbage)
    assert r.check.survivors == ("h00", "h01", "h03", "h04")
    assert list(r.aggregator.disputed) == ["h02"]
    assert r.aggregator.disputed["h02"] == "its shares did not open for h00, h01, h03, h04"
    assert r.result == r.expected()


def test_claims_within_bounds_that_leave_too_few_fail_the_round_not_silently(
    consortium: Consortium,
) -> None:
    """h00 and h01 each name h02 and h03 (two claims each, what the round can spare):
    honoured, one survivor short of t_min = 3 is left: a SecAggError the coordinator turns
    into a lost round (tests/server/secagg/test_faults.py), never a sum of one input."""
    parameters = consortium.parameters(t_min=3)
    with pytest.raises(SecAggError, match="t_min = 3"):
        run_round(consortium, parameters, accuse={"h00": ("h02", "h03"), "h01": ("h02", "h03")})


def _masked(holder: str, *excluded: str) -> Any:
    return MaskedInput(holder, "run", 0, b"\0" * 8, excluded)


def test_the_rule_ignores_claims_about_holders_that_sent_nothing() -> None:
    inputs = {n: _masked(n) for n in ("a", "b", "c")}
    inputs["a"] = _masked("a", "z")  # z sent no masked input: dropped anyway
    assert disputed(inputs, floor=2) == {}


def test_the_rule_is_a_function_of_the_messages_alone() -> None:
    """The same masked inputs in any order leave the same holders out (a restarted
    coordinator replays them); the bound is what the round can spare."""
    inputs = {
        "a": _masked("a", "b", "c", "d"),
        "b": _masked("b"),
        "c": _masked("c", "d"),
        "d": _masked("d"),
        "e": _masked("e"),
    }
    once = disputed(inputs, floor=3)
    assert once == disputed(dict(reversed(list(inputs.items()))), floor=3)
    # 5 - 3 = 2 to spare: a's three claims are void, c's one is honoured.
    assert sorted(once) == ["a", "d"] and once["d"] == "its shares did not open for c"
    assert sorted(disputed(inputs, floor=1)) == ["b", "c", "d"]  # 4 to spare: all honoured
