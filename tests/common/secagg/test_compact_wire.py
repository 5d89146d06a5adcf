"""The compact wire encoding (issue 29, SecAgg+ per-holder bytes; docs/SECAGG_GRAPH.md,
"Cost model"): the survivor set and the signers as bitmaps over the roster's names, signed
as such; participant lists with the round's fields once; on the graph τ committee
signatures per request. Everything read is hostile: a malformed bitmap, list or header is
refused with one line naming the message and the field, never another exception."""

from __future__ import annotations

import base64
import contextlib
import json
import math
from dataclasses import replace
from typing import Any

import pytest

from ldpem.common.secagg import (
    ConsistencyCheck,
    ParticipantList,
    SecAggError,
    SecAggRefused,
    UnmaskRequest,
)
from ldpem.common.secagg.checks import check_advertisement, check_participants
from ldpem.common.secagg.consistency import (
    check_signatures,
    sign_survivors,
    survivor_bitmap,
    survivor_set_bytes,
)
from ldpem.common.secagg.keys import Roster, generate_signing_key, public_key_bytes
from ldpem.common.secagg.messages import PACKED_ADVERTISEMENT_BYTES
from tests.common.secagg.kit import RUN, Consortium, Round, run_round, wire
from tests.common.secagg.test_graph_protocol import graph_parameters


def order_of(n: int) -> tuple[str, ...]:
    return tuple(f"h{i:05d}" for i in range(n))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def done() -> Round:
    consortium = Consortium.of(9)  # 9 names: two bytes, seven spare bits
    return run_round(consortium, consortium.parameters(), dropped=["h03"])


@pytest.mark.parametrize("n", [2, 7, 8, 9, 16, 10_000])
def test_a_survivor_set_is_a_bitmap_over_the_order(n: int) -> None:
    order = order_of(n)
    for survivors in (order, order[::3], order[-1:], ()):
        check = ConsistencyCheck(RUN, 0, survivors, order)
        data = json.loads(json.dumps(check.to_dict()))
        assert set(data) == {"run_id", "round", "survivors"}
        bits = base64.b64decode(data["survivors"])
        assert len(bits) == math.ceil(n / 8)
        assert sum(bin(b).count("1") for b in bits) == len(survivors)
        assert bool(bits[0] & 0x80) == (order[0] in survivors)  # most significant first
        assert ConsistencyCheck.from_dict(data, order) == check
    if n == 10_000:  # K = 10⁴: 1.7 KB of JSON, not the ~90 KB of 9000 names
        assert len(json.dumps(ConsistencyCheck(RUN, 0, order[1000:], order).to_dict())) < 1800


def refusal(reader: Any, data: object, order: tuple[str, ...]) -> str:
    with pytest.raises(SecAggRefused) as caught:
        reader(data, order)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("n", "bits", "problem"),
    [
        (9, b"\x80", "must be a bitmap of 2 bytes over 9 names, got 1"),
        (9, b"\x80\x80\x00", "must be a bitmap of 2 bytes over 9 names, got 3"),
        (9, b"\x80\x40", "sets a bit past the 9 names of its order"),  # bit 9: nobody
        (9, b"\x00\x01", "sets a bit past the 9 names of its order"),  # the last spare bit
        (8, b"\xff\x00", "must be a bitmap of 1 bytes over 8 names, got 2"),
        (2, b"\xe0", "sets a bit past the 2 names of its order"),
        (2, b"", "must be a bitmap of 1 bytes over 2 names, got 0"),
    ],
)
def test_malformed_survivor_bitmaps_are_refused(n: int, bits: bytes, problem: str) -> None:
    order = order_of(n)
    data = {"run_id": RUN, "round": 0, "survivors": b64(bits)}
    message = refusal(ConsistencyCheck.from_dict, data, order)
    assert message == f"consistency check: field 'survivors' {problem}"


@pytest.mark.parametrize(
    "survivors", [["h00000", "h00001"], "h00000", 3, None, "gA", "gA==\n", "\u00e9A=="]
)
def test_a_survivor_set_that_is_not_base64_text_is_refused(survivors: object) -> None:
    """Names (the old encoding), a bare name, a number, null, unpadded or non-canonical
    base64, a non-ASCII letter: all refused as the field's format."""
    data = {"run_id": RUN, "round": 0, "survivors": survivors}
    message = refusal(ConsistencyCheck.from_dict, data, order_of(9))
    assert message == "consistency check: field 'survivors' is not base64 text of bytes"


def test_the_signers_and_signatures_of_a_request_are_read_strictly(done: Round) -> None:
    order = done.request.order
    data = done.request.to_dict()
    assert set(data) == {"run_id", "round", "survivors", "dropped", "signers", "signatures"}
    assert wire(done.request) == done.request
    signers = base64.b64decode(data["signers"])
    spare = b64(signers[:-1] + bytes([signers[-1] | 0x01]))
    short = b64(base64.b64decode(data["signatures"])[:-64])
    kind = "unmasking request: field "
    for changed, problem in [
        ({"signers": spare}, "'signers' sets a bit past the 9 names of its order"),
        ({"signatures": short}, "'signatures' is not base64 text of 512 bytes"),
        ({"signers": b64(signers + b"\x00")}, "'signers' must be a bitmap of 2 bytes"),
        ({"survivors": "not base64"}, "'survivors' is not base64 text"),
    ]:
        message = refusal(UnmaskRequest.from_dict, {**data, **changed}, order)
        assert message.startswith(kind + problem), message
    # Each signature is read as the request's run and round: a round it was not made for
    # fails to verify rather than being named.
    moved = UnmaskRequest.from_dict({**data, "round": 1}, order)
    assert {s.round for s in moved.signatures} == {1}


def test_a_signature_over_a_survivor_set_one_bit_away_does_not_verify(done: Round) -> None:
    order = done.request.order
    names = list(order)
    survivors = tuple(names[:7])
    key = generate_signing_key()
    signer = Roster({"h00": public_key_bytes(key)})
    signature = sign_survivors(key, "h00", RUN, 0, survivors, order).signature
    assert signer.verify("h00", signature, survivor_set_bytes(RUN, 0, survivors, order))
    for other in ((*survivors, names[7]), survivors[:-1], (*survivors[:-1], names[8])):
        assert not signer.verify("h00", signature, survivor_set_bytes(RUN, 0, other, order))
    # The same bits over another order (one more name at the end) are other bytes.
    longer = (*order, "h99")
    assert survivor_bitmap(survivors, longer) == survivor_bitmap(survivors, order)
    assert not signer.verify("h00", signature, survivor_set_bytes(RUN, 0, survivors, longer))


def test_a_request_whose_survivor_bitmap_differs_by_one_bit_is_refused(done: Round) -> None:
    """The aggregator's request with h03 (dropped) flipped into S on the wire: every
    signature was made over the other bitmap, so the holder refuses it."""
    roster, order = done.aggregator.roster, done.request.order
    t_min = done.parameters.t_min
    data = done.request.to_dict()
    check_signatures(UnmaskRequest.from_dict(data, order), roster, t_min=t_min)  # as sent
    bits = bytearray(base64.b64decode(data["survivors"]))
    assert not bits[0] & (0x80 >> 3)
    bits[0] |= 0x80 >> 3  # h03
    flipped = UnmaskRequest.from_dict({**data, "survivors": b64(bytes(bits))}, order)
    assert "h03" in flipped.survivors
    with pytest.raises(SecAggRefused, match="is not its roster key's over this survivor set"):
        check_signatures(flipped, roster, t_min=t_min)


def test_a_set_outside_the_order_cannot_be_encoded() -> None:
    order = order_of(4)
    with pytest.raises(ValueError, match="is not in the order"):
        ConsistencyCheck(RUN, 0, ("h00000", "zz"), order).to_dict()
    with pytest.raises(ValueError, match="named twice"):
        ConsistencyCheck(RUN, 0, ("h00000", "h00000"), order).to_dict()
    with pytest.raises(ValueError, match="public order"):
        ConsistencyCheck(RUN, 0, ("h00000",)).to_dict()
    with pytest.raises(ValueError, match="public order"):
        ConsistencyCheck.from_dict({"run_id": RUN, "round": 0, "survivors": "AA=="}, ())
    with pytest.raises(SecAggRefused, match="cannot be a bitmap over the roster"):
        survivor_set_bytes(RUN, 0, ("zz",), order)


def test_a_participant_list_carries_the_round_once(done: Round) -> None:
    listed = done.participants
    data = json.loads(json.dumps(listed.to_dict()))
    assert set(data) == {"run_id", "round", "header", "advertisements"}
    assert data["header"] == {
        **done.parameters.to_dict(),
        "roster_digest": done.aggregator.roster.digest,
    }
    assert all(len(e) == 2 and len(base64.b64decode(e[1])) == 160 for e in data["advertisements"])
    assert PACKED_ADVERTISEMENT_BYTES == 160
    per_advert = len(json.dumps(data["advertisements"])) / len(listed.advertisements)
    assert per_advert < 240  # 0.42 KiB each with the run's fields repeated
    assert ParticipantList.from_dict(data) == listed
    assert wire(ParticipantList(RUN, 0, ())) == ParticipantList(RUN, 0, ())


@pytest.mark.parametrize(
    ("field", "value"),
    [("bits", 31), ("t_min", 6), ("run_id", "run-other"), ("round", 1), ("k", 8)],
)
def test_an_altered_header_fails_every_signature(done: Round, field: str, value: Any) -> None:
    """The holder rebuilds each advertisement from the header: an aggregator that changes
    one run value in it breaks the signatures, whatever the holder's own values are."""
    roster, parameters = done.aggregator.roster, done.parameters
    data = done.participants.to_dict()
    assert check_participants(ParticipantList.from_dict(data), roster, parameters, "h00")
    assert data["header"][field] != value
    altered = {**data, "header": {**data["header"], field: value}}
    listed = ParticipantList.from_dict(altered)
    for advertisement in listed.advertisements:
        with pytest.raises(SecAggRefused, match="is not signed by its roster key"):
            check_advertisement(advertisement, roster, advertisement.parameters)
    with pytest.raises(SecAggRefused):  # and against the holder's own round
        check_participants(listed, roster, parameters, "h00")


def test_malformed_participant_lists_are_refused(done: Round) -> None:
    data = done.participants.to_dict()
    entry = data["advertisements"][0]
    kind = "participant list"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"advertisements": [entry[:1]]}, ": an entry of 'advertisements' must be [name, b"),
        ({"advertisements": [[*entry, {}, 1]]}, ": an entry of 'advertisements' must be [name"),
        ({"advertisements": [{entry[0]: entry[1]}]}, ": an entry of 'advertisements' must"),
        ({"advertisements": [[*entry, "x"]]}, f" entry '{entry[0]}': expected an object"),
        ({"advertisements": [[entry[0], entry[1][:-4]]]}, f": the entry '{entry[0]}' of"),
        ({"advertisements": [["a b", entry[1]]]}, ": a name in 'advertisements' is not"),
        ({"advertisements": []}, ": field 'header' without advertisements"),
        ({"header": []}, " header: expected an object"),
        ({"header": {**data["header"], "extra": 1}}, " header: unknown field 'extra'"),
        ({"header": {**data["header"], "k": True}}, " header: field 'k' must be an integer"),
        ({"header": {**data["header"], "t_min": 1}}, " header: round parameters: t_min must"),
        ({"header": {**data["header"], "neighbours": 2}}, " header: missing field 'committee'"),
    ]
    for changed, problem in cases:
        with pytest.raises(SecAggRefused) as caught:
            ParticipantList.from_dict({**data, **changed})
        assert str(caught.value).startswith(kind + problem), str(caught.value)
    headless = {k: v for k, v in data.items() if k != "header"}
    with pytest.raises(SecAggRefused, match="participant list: missing field 'header'"):
        ParticipantList.from_dict(headless)


def test_no_malformed_message_escapes_as_another_exception(done: Round) -> None:
    """Every field of every compact message replaced by values of the wrong type or size:
    SecAggRefused (a SecAggError, the coordinator's 4xx and the agent's refusal) or a
    message, never a TypeError, IndexError or KeyError."""
    order = done.request.order
    messages: list[tuple[Any, dict[str, Any], tuple[Any, ...]]] = [
        (ConsistencyCheck.from_dict, done.check.to_dict(), (order,)),
        (UnmaskRequest.from_dict, done.request.to_dict(), (order,)),
        (ParticipantList.from_dict, done.participants.to_dict(), ()),
    ]
    junk: list[object] = [None, True, -1, 2**70, "", "AAAA", [], {}, [[]], [["h00", None]]]
    for reader, data, args in messages:
        for field in data:
            for value in junk:
                with contextlib.suppress(SecAggError):
                    reader({**data, field: value}, *args)


def test_a_graph_request_carries_tau_committee_signatures_and_the_masking_ones() -> None:
    """On the graph each holder's request carries the signatures of its masking
    neighbours and just enough committee members' for τ, not every signature of S."""
    consortium = Consortium.of(16)
    parameters = graph_parameters()
    done = run_round(consortium, parameters, dropped=["h05"])
    assert done.result == done.expected()  # every holder answered its trimmed request
    graph = done.aggregator.graph
    assert graph is not None
    signed = set(done.signatures)
    for name, request in done.aggregator.unmask_requests().items():
        signers = {s.holder for s in request.signatures}
        masking = done.aggregator._masked_with(name) & signed
        assert masking <= signers
        assert signers - masking <= graph.committee
        assert len(signers & graph.committee) == max(
            parameters.committee_threshold, len(masking & graph.committee)
        )
        assert len(signers) < len(signed)


def test_an_advertisement_of_another_round_keeps_its_own_header(done: Round) -> None:
    """A lying list mixing rounds stays expressible on the wire (the advertisement that
    differs carries its own header), so the holder's checks, not the encoding, refuse it."""
    first, other, *rest = done.participants.advertisements
    replayed = replace(other, parameters=replace(other.parameters, round=1))
    listed = ParticipantList(RUN, 0, (first, replayed, *rest))
    data = listed.to_dict()
    assert data["header"]["round"] == 0
    assert [len(e) for e in data["advertisements"]] == [2, 3] + [2] * len(rest)
    assert data["advertisements"][1][2]["round"] == 1
    assert wire(listed) == listed
    roster, parameters = done.aggregator.roster, done.parameters
    with pytest.raises(SecAggRefused, match="not signed by its roster key"):
        check_participants(ParticipantList.from_dict(data), roster, parameters, "h00")
