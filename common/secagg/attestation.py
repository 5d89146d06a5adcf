"""The masked-with attestation of SecAgg+ (docs/SECAGG_GRAPH.md, condition 2 and "The
attestation"): with its masked input, a holder v on the graph signs the set P_v of the
neighbours it masked with, so that a neighbour w may release its share of v's self-mask
seed b_v even when v never signs the survivor set S (it crashed, or restarted and lost its
secrets): against v's attestation, w checks the same predicate v checks before it signs S
(``consistency.check_signed_set``: at least t_k − 1 of P_v in S, S ∩ N(v) inside P_v).

What is signed, with v's roster key: (domain tag, run, round, v, the names of P_v in name
order), length-prefixed (``_encoding.binding``): O(k) bytes, no bitmap over the roster, so
that the aggregator checks K attestations in O(K·k). An attestation is signed once per
round, with the one masked input v sends: it binds the set v actually masked with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpem.common.secagg._encoding import binding
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.keys import Roster

__all__ = ["ATTESTATION_BYTES", "Attestation", "attested_bytes", "sign_masked_with"]

#: An Ed25519 signature.
ATTESTATION_BYTES = 64
_MASKED_WITH = "ldpem secagg+ masked-with set v1"


def attested_bytes(run_id: str, round_: int, holder: str, masked_with: Iterable[str]) -> bytes:
    """What ``holder``'s attestation covers: the domain tag, the run, the round, the holder
    and its masked-with set P_v (its own name left out, the others in name order)."""
    peers = sorted(set(masked_with) - {holder})
    return binding(_MASKED_WITH, run_id, round_, holder, len(peers), *peers)


def sign_masked_with(
    signing_key: Ed25519PrivateKey,
    holder: str,
    run_id: str,
    round_: int,
    masked_with: Iterable[str],
) -> bytes:
    """``holder``'s attestation of the set it masked with in run ``run_id`` round ``round_``."""
    return signing_key.sign(attested_bytes(run_id, round_, holder, masked_with))


@dataclass(frozen=True)
class Attestation:
    """A holder's signed masked-with set, as an unmasking request on the graph carries it
    for a neighbour of the answering holder that did not sign S: the holder, P_v (its
    neighbours' names, in name order, itself left out) and the signature."""

    holder: str
    masked_with: tuple[str, ...]
    signature: bytes

    def verify(self, roster: Roster, run_id: str, round_: int) -> None:
        """SecAggRefused unless the signature is the holder's roster key's over P_v for
        this run and round."""
        message = attested_bytes(run_id, round_, self.holder, self.masked_with)
        if not roster.verify(self.holder, self.signature, message):
            raise SecAggRefused(
                f"the masked-with attestation of {self.holder!r} is not its roster key's "
                f"for this run and round"
            )
