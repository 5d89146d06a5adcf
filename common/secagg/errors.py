"""The errors of secure aggregation: a refusal, a round that cannot be finished, and the
faults of named holders that sent wrong material."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FaultyDealer", "FaultyResponders", "SecAggError", "SecAggFault", "SecAggRefused"]


class SecAggError(Exception):
    """Secure aggregation failed; the message is one line and never holds a secret."""


class SecAggRefused(SecAggError):
    """A party refuses a message or a request: a holder refuses what the aggregator asks
    (a participant not on the roster, a replayed advertisement, both seeds of one holder,
    too few survivors, ...), or the aggregator refuses a malformed or out-of-order message
    from a holder. Nothing secret has been sent in answer to the refused input."""


class SecAggFault(SecAggError):
    """The round cannot be finished because named holders sent wrong material:
    ``culprits``, their names (at least one, in roster order)."""

    def __init__(self, message: str, *, culprits: Iterable[str]) -> None:
        super().__init__(message)
        self.culprits = tuple(culprits)
        if not self.culprits:
            raise ValueError("a fault names at least one culprit")


class FaultyResponders(SecAggFault):
    """Unmasking responses whose shares do not carry their dealer's valid signature
    (``culprits``: their senders) left fewer than t_min verified shares of a secret."""


class FaultyDealer(SecAggFault):
    """t_min shares that all carry the dealer's valid signature give a secret other than
    the one it committed to: the dealer (``culprits``, one name) dealt wrong shares."""
