"""The errors of secure aggregation: a refusal, and a round that cannot be finished."""

from __future__ import annotations

__all__ = ["SecAggError", "SecAggRefused"]


class SecAggError(Exception):
    """Secure aggregation failed; the message is one line and never holds a secret."""


class SecAggRefused(SecAggError):
    """A party refuses a message or a request: a holder refuses what the aggregator asks
    (a participant not on the roster, a replayed advertisement, both seeds of one holder,
    too few survivors, ...), or the aggregator refuses a malformed or out-of-order message
    from a holder. Nothing secret has been sent in answer to the refused input."""
