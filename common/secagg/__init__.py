"""Secure aggregation for distributed differential privacy (docs/SECAGG.md).

The cryptography is a pure library: no HTTP, no files. A round is two state machines,
``Holder`` (``protocol.py``) and ``Aggregator`` (``aggregator.py``), exchanging the frozen
messages of ``messages.py``, each with ``to_dict``/``from_dict`` for the wire. Underneath: identity
keys and the roster (``keys.py``), Shamir sharing (``shamir.py``), the dealer's signatures
and seed commitments that name the sender of a wrong share (``dealing.py``), masks
(``masks.py``) and the holder-to-holder channel (``channel.py``). The steps of a round
are one vocabulary, ``Step`` (``steps.py``), for the holder, the coordinator and the wire;
the SecAgg+ graphs and their parameters are the sub-package ``graph``.

The distributed noise lives in the core, because the ``SecAggSkellam`` mechanism needs it
and the core imports no higher layer (docs/ARCHITECTURE.md, "Layers"):
``core/secagg_quantize.py`` (a holder's sum on an integer grid of step γ = 2^-j, its integer
sensitivity and the modulus 2^k), ``core/secagg_noise.py`` (integer Skellam shares) and
``core/secagg_accounting.py`` (the privacy of the aggregated sum and the fallback ε of one
share).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ldpem.common.secagg.aggregator import Aggregator
    from ldpem.common.secagg.errors import SecAggError, SecAggFault, SecAggRefused
    from ldpem.common.secagg.keys import (
        Roster,
        RosterError,
        decode_public_key,
        encode_public_key,
        generate_signing_key,
        public_key_bytes,
        signing_key_from_pem,
        signing_key_to_pem,
    )
    from ldpem.common.secagg.messages import (
        ConsistencyCheck,
        EncryptedShares,
        KeyAdvertisement,
        MaskedInput,
        ParticipantList,
        RoundParameters,
        ShareBundle,
        SurvivorSignature,
        UnmaskRequest,
        UnmaskResponse,
        minimum_t_min,
        most_colluders,
    )
    from ldpem.common.secagg.protocol import Holder

#: Where each name of the surface lives. Imported on first use: importing a submodule
#: (``runvalues``, which the wire uses) must not pull in the cryptography.
_SURFACE = {
    "Aggregator": "ldpem.common.secagg.aggregator",
    "ConsistencyCheck": "ldpem.common.secagg.messages",
    "EncryptedShares": "ldpem.common.secagg.messages",
    "Holder": "ldpem.common.secagg.protocol",
    "KeyAdvertisement": "ldpem.common.secagg.messages",
    "MaskedInput": "ldpem.common.secagg.messages",
    "ParticipantList": "ldpem.common.secagg.messages",
    "Roster": "ldpem.common.secagg.keys",
    "RosterError": "ldpem.common.secagg.keys",
    "RoundParameters": "ldpem.common.secagg.messages",
    "SecAggError": "ldpem.common.secagg.errors",
    "SecAggFault": "ldpem.common.secagg.errors",
    "SecAggRefused": "ldpem.common.secagg.errors",
    "ShareBundle": "ldpem.common.secagg.messages",
    "SurvivorSignature": "ldpem.common.secagg.messages",
    "UnmaskRequest": "ldpem.common.secagg.messages",
    "UnmaskResponse": "ldpem.common.secagg.messages",
    "decode_public_key": "ldpem.common.secagg.keys",
    "encode_public_key": "ldpem.common.secagg.keys",
    "generate_signing_key": "ldpem.common.secagg.keys",
    "minimum_t_min": "ldpem.common.secagg.messages",
    "most_colluders": "ldpem.common.secagg.messages",
    "public_key_bytes": "ldpem.common.secagg.keys",
    "signing_key_from_pem": "ldpem.common.secagg.keys",
    "signing_key_to_pem": "ldpem.common.secagg.keys",
}


def __getattr__(name: str) -> object:
    if name not in _SURFACE:
        raise AttributeError(f"module 'ldpem.common.secagg' has no attribute {name!r}")
    value = getattr(importlib.import_module(_SURFACE[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "Aggregator",
    "ConsistencyCheck",
    "EncryptedShares",
    "Holder",
    "KeyAdvertisement",
    "MaskedInput",
    "ParticipantList",
    "Roster",
    "RosterError",
    "RoundParameters",
    "SecAggError",
    "SecAggFault",
    "SecAggRefused",
    "ShareBundle",
    "SurvivorSignature",
    "UnmaskRequest",
    "UnmaskResponse",
    "decode_public_key",
    "encode_public_key",
    "generate_signing_key",
    "minimum_t_min",
    "most_colluders",
    "public_key_bytes",
    "signing_key_from_pem",
    "signing_key_to_pem",
]
