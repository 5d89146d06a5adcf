"""The steps of a secure-aggregation round, one vocabulary for the holder, the coordinator
and the wire (docs/SECAGG.md, "The round").

A round goes through the holder steps in order: every holder advertises its keys, sends
its encrypted shares, its masked input, its signature of the survivor set and its
unmasking response; after each, the aggregator answers (``ANSWERS``: the participant
list, the holder's share bundle, the consistency check, the unmasking request; the
unmasking has no answer but the sum). ``DONE`` follows the last, once the sum is known.
The values are the path segments of ``POST …/rounds/{t}/secagg/{step}`` and the ``step``
of the stored messages, so they never change.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ANSWERS", "HOLDER_STEPS", "Step"]


class Step(StrEnum):
    """A step of a round; the members are in the round's order (``list(Step)``)."""

    ADVERTISE = "advertise"
    SHARES = "shares"
    MASKED = "masked"
    SIGNATURE = "signature"
    UNMASK = "unmask"
    DONE = "done"

    @property
    def order(self) -> int:
        """The step's place in the round: 0 for ``ADVERTISE`` … 5 for ``DONE``."""
        return _ORDER[self]


_ORDER = {step: place for place, step in enumerate(Step)}

#: The steps a holder posts a message in, in order: every step but ``DONE``.
HOLDER_STEPS: tuple[Step, ...] = tuple(step for step in Step if step is not Step.DONE)

#: The aggregator's answer to each step but the unmasking, as the holder fetches it
#: (``GET …/secagg/{answer}``).
ANSWERS: dict[Step, str] = {
    Step.ADVERTISE: "participants",
    Step.SHARES: "bundle",
    Step.MASKED: "consistency-check",
    Step.SIGNATURE: "unmask-request",
}
