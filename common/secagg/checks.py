"""The checks a holder makes on the aggregator's messages of the first steps (the
protocol: ``protocol.py``): a message of this run and round, a signed advertisement that
fits the round, and the participant list (U1)."""

from __future__ import annotations

from ldpem.common.secagg import messages
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.keys import Roster

__all__ = ["check_advertisement", "check_participants", "check_round"]


def check_round(kind: str, parameters: messages.RoundParameters, run_id: str, round_: int) -> None:
    """SecAggRefused unless a message named ``kind`` is for this run and round."""
    if not parameters.same_round(run_id, round_):
        raise SecAggRefused(
            f"the {kind} is for run {run_id!r} round {round_}, not for this round "
            f"(run {parameters.run_id!r} round {parameters.round})"
        )


def _bound(p: messages.RoundParameters) -> tuple[int, ...]:
    """K, t_min, bits, c and, on the graph, k, m, τ and h."""
    return tuple(getattr(p, name) for name in p.fields()[2:])


def check_advertisement(
    advertisement: messages.KeyAdvertisement, roster: Roster, parameters: messages.RoundParameters
) -> None:
    """SecAggRefused unless ``advertisement`` is signed by the roster key of the holder it
    names and is for this round, with this round's K, t_min, bits, c, run digest (every
    public parameter of the run) and roster digest."""
    name = advertisement.holder
    if name not in roster:
        raise SecAggRefused(f"participant {name!r} is not on the roster")
    if not roster.verify(name, advertisement.signature, advertisement.signed_bytes()):
        raise SecAggRefused(f"the key advertisement of {name!r} is not signed by its roster key")
    theirs = advertisement.parameters
    if not parameters.same_round(theirs.run_id, theirs.round):
        raise SecAggRefused(
            f"the key advertisement of {name!r} is for run {theirs.run_id!r} round "
            f"{theirs.round}, not this round: a replay"
        )
    if theirs.run_digest != parameters.run_digest:
        # Another ε, δ, noise share, modulus, graph or model: a peer shown another run.
        raise SecAggRefused(
            f"{name!r} committed to other run parameters (digest "
            f"{theirs.run_digest[:12] or 'none'}…, this holder's "
            f"{parameters.run_digest[:12] or 'none'}…): the coordinator showed the holders "
            f"different runs"
        )
    if _bound(theirs) != _bound(parameters):
        raise SecAggRefused(
            f"{name!r} advertises K, t_min, bits, c = {_bound(theirs)}; this round is bound "
            f"to {_bound(parameters)}"
        )
    if advertisement.roster_digest != roster.digest:
        raise SecAggRefused(
            f"{name!r} pinned another roster (digest {advertisement.roster_digest[:12]}…, "
            f"this holder's {roster.digest[:12]}…)"
        )


def check_participants(
    participants: messages.ParticipantList,
    roster: Roster,
    parameters: messages.RoundParameters,
    own: str,
    *,
    neighbours: frozenset[str] | None = None,
) -> dict[str, messages.KeyAdvertisement]:
    """The checked participant list of holder ``own`` (U1), by name. On the graph
    (``neighbours``: own's neighbours, k on the Harary graph, at most k on the expander) it
    may hold only own and its neighbours, at least t_min = t_k of them with own (at most
    |N(own)| + 1)."""
    check_round("participant list", parameters, participants.run_id, participants.round)
    by_name: dict[str, messages.KeyAdvertisement] = {}
    for advertisement in participants.advertisements:
        check_advertisement(advertisement, roster, parameters)
        if advertisement.holder in by_name:
            raise SecAggRefused(f"the participant list names {advertisement.holder!r} twice")
        by_name[advertisement.holder] = advertisement
        if neighbours is not None and advertisement.holder not in neighbours | {own}:
            raise SecAggRefused(
                f"the participant list names {advertisement.holder!r}, not a neighbour"
            )
    keys = [a.encryption_key for a in by_name.values()] + [a.masking_key for a in by_name.values()]
    if len(set(keys)) != len(keys):
        raise SecAggRefused("two participants advertise the same key")
    if own not in by_name:
        raise SecAggRefused("the participant list leaves out this holder")
    most = parameters.k if neighbours is None else len(neighbours) + 1
    if not parameters.t_min <= len(by_name) <= most:
        raise SecAggRefused(
            f"the participant list has {len(by_name)} holders; this round needs between "
            f"t_min = {parameters.t_min} and {most}"
        )
    return by_name
