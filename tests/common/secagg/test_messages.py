"""The messages' dictionaries: JSON types only, a round trip gives the same message, and
anything but exactly those fields is refused with one line naming message and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ldpem.common.secagg import (
    EncryptedShares,
    KeyAdvertisement,
    MaskedInput,
    ParticipantList,
    SecAggRefused,
    ShareBundle,
    UnmaskRequest,
    UnmaskResponse,
)
from ldpem.common.secagg.messages import CIPHERTEXT_BYTES
from tests.common.secagg.kit import Consortium, Round, run_round, wire


@pytest.fixture(scope="module")
def done() -> Round:
    consortium = Consortium.of(5)
    return run_round(consortium, consortium.parameters(), dropped=["h03"])


def every_message(done: Round) -> list[Any]:
    return [
        done.participants.advertisements[0],
        done.participants,
        done.aggregator.encrypted_shares["h00"],
        done.bundles["h00"],
        done.masked["h00"],
        done.request,
        done.responses["h00"],
    ]


def test_every_message_survives_json(done: Round) -> None:
    for message in every_message(done):
        data = message.to_dict()
        text = json.dumps(data)
        assert wire(message) == message
        assert json.loads(text) == data  # JSON types only


def test_the_sizes_are_fixed_by_k(done: Round) -> None:
    shares = done.aggregator.encrypted_shares["h00"]
    assert set(shares.ciphertexts) == {"h01", "h02", "h03", "h04"}
    # Nonce, two signed shares (a 32-byte value of GF(2^255 − 19) and a 64-byte signature
    # each), tag.
    assert all(len(c) == CIPHERTEXT_BYTES == 220 for c in shares.ciphertexts.values())
    response = done.responses["h00"]
    assert set(response.self_mask_shares) == {"h00", "h01", "h02", "h04"}
    assert set(response.key_shares) == {"h03"}


def test_messages_are_immutable(done: Round) -> None:
    shares = done.aggregator.encrypted_shares["h00"]
    with pytest.raises(TypeError):
        shares.ciphertexts["h01"] = b""  # type: ignore[index]
    with pytest.raises(AttributeError):
        shares.holder = "h09"  # type: ignore[misc]


def changed(data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**data, **fields}


def refused(cls: Any, data: object, message: str, *order: tuple[str, ...]) -> None:
    with pytest.raises(SecAggRefused) as caught:
        cls.from_dict(data, *order)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_malformed_key_advertisements_are_refused(done: Round) -> None:
    data = done.participants.advertisements[0].to_dict()
    kind = "key advertisement: "
    refused(KeyAdvertisement, [], kind + "expected an object")
    without_k = {k: v for k, v in data.items() if k != "k"}
    refused(KeyAdvertisement, without_k, kind + "missing field 'k'")
    refused(KeyAdvertisement, changed(data, extra=1), kind + "unknown field 'extra'")
    refused(KeyAdvertisement, changed(data, round=True), kind + "field 'round' must be an integer")
    refused(KeyAdvertisement, changed(data, round="0"), kind + "field 'round' must be an integer")
    refused(KeyAdvertisement, changed(data, holder="a b"), kind + "field 'holder' is not a holder")
    refused(KeyAdvertisement, changed(data, signature="AAAA"), kind + "field 'signature' is not")
    refused(KeyAdvertisement, changed(data, masking_key=data["signature"]), kind + "field 'masking")
    refused(KeyAdvertisement, changed(data, roster_digest="AB" * 32), kind + "field 'roster_digest")
    refused(KeyAdvertisement, changed(data, t_min=1), kind + "round parameters: t_min must be")


def test_malformed_lists_and_maps_are_refused(done: Round) -> None:
    request, order = done.request.to_dict(), done.request.order
    kind = "unmasking request: field "
    refused(UnmaskRequest, changed(request, survivors="h00"), kind + "'survivors' is not", order)
    refused(UnmaskRequest, changed(request, survivors=["h00"]), kind + "'survivors' is not", order)
    refused(
        UnmaskRequest,
        changed(request, dropped=["h03", "h03"]),
        kind + "'dropped' names a holder twice",
        order,
    )
    bundle = done.bundles["h00"].to_dict()
    some = next(iter(bundle["ciphertexts"]))
    refused(ShareBundle, changed(bundle, ciphertexts=[]), "share bundle: field 'ciphertexts' must")
    refused(
        ShareBundle,
        changed(bundle, ciphertexts={some: bundle["ciphertexts"][some][:-4]}),
        f"share bundle: the entry '{some}' of 'ciphertexts' is not base64 text of 220 bytes",
    )
    refused(
        ShareBundle,
        changed(bundle, ciphertexts={"not a name": bundle["ciphertexts"][some]}),
        "share bundle: a name in 'ciphertexts' is not a holder name",
    )
    shares = done.aggregator.encrypted_shares["h00"].to_dict()
    refused(EncryptedShares, changed(shares, run_id=""), "encrypted shares: field 'run_id' must")
    participants = done.participants.to_dict()
    refused(ParticipantList, changed(participants, advertisements={}), "participant list: field")
    response = done.responses["h00"].to_dict()
    refused(
        UnmaskResponse,
        changed(response, key_shares={"h03": "AAAA"}),
        "unmasking response: the entry 'h03' of 'key_shares' is not base64 text of 96 bytes",
    )


def test_masked_values_are_whole_64_bit_words(done: Round) -> None:
    data = done.masked["h00"].to_dict()
    refused(MaskedInput, changed(data, values="AAAA"), "masked input: field 'values' must hold 8")
    refused(MaskedInput, changed(data, values="A"), "masked input: field 'values' is not base64")
