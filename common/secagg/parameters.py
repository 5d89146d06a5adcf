"""The public parameters of one secure-aggregation round (``RoundParameters``), which
every holder binds in its signed advertisement (``messages.py``), and the rules they obey:
t_min and c on the full mesh, the graph's degree, threshold and committee on SecAgg+."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ldpem.common.secagg._reader import MAX_RUN_ID, refuse
from ldpem.common.secagg.masks import MAX_BITS

__all__ = [
    "DIGEST_FIELD",
    "GRAPH_FIELDS",
    "PARAMETER_FIELDS",
    "RoundParameters",
    "graph_rules",
    "minimum_t_min",
    "most_colluders",
]


def minimum_t_min(k: int) -> int:
    """The smallest t_min secure aggregation accepts for K ≥ 2 holders: ⌊K/2⌋ + 1 (and 2:
    the sum of a single survivor would be its input), the least with c = 0 colluders.

    To unmask one holder a lying aggregator needs shares of both its seeds, from two
    different survivor sets each signed by t_min holders in the consistency round
    (``consistency.py``); an honest holder signs one set, so with c holders colluding it
    takes 2·(t_min − c) ≤ K − c honest ones: impossible when c < 2·t_min − K
    (``most_colluders``; docs/SECAGG.md, "The threshold").
    """
    return max(2, k // 2 + 1)


def most_colluders(k: int, t_min: int) -> int:
    """The most holders that may collude with the aggregator while no holder's input can
    be unmasked: the largest c with c < 2·t_min − K (−1 when none, t_min ≤ K/2)."""
    return 2 * t_min - k - 1


@dataclass(frozen=True)
class RoundParameters:
    """The public parameters of one round, which every holder binds and signs.

    ``k``: the run's number of holders (K); ``t_min``: the Shamir threshold and the fewest
    participants and survivors any holder accepts, more than K/2 (``minimum_t_min``);
    ``bits``: the inputs and the sum are residues modulo 2^bits; ``colluders``: c, the
    most holders the run declares may collude with the aggregator, 0 ≤ c < 2·t_min − K
    (``most_colluders``): the noise of the t_min − c honest survivors is what is charged.
    """

    run_id: str
    round: int
    k: int
    t_min: int
    bits: int
    colluders: int = 0
    #: SecAgg+ (docs/SECAGG_GRAPH.md; 0: the full mesh): the degree k of the round's
    #: public graph, the committee (m, τ) that certifies S, and h, the least honest noise
    #: shares in any sum the aggregator can learn. Then ``t_min`` is t_k, the threshold
    #: over a holder and its k neighbours, and the rule t_min > K/2 gives way to the
    #: committee's certificate (``graph_rules``).
    neighbours: int = 0
    committee: int = 0
    committee_threshold: int = 0
    honest: int = 0
    #: The expander (docs/SECAGG_GRAPH.md, "The expander"; 0: the Harary graph or the mesh):
    #: T, the fewest survivors any holder signs or answers for. The round's graph is then the
    #: union of k/2 random cycles (``cycles.CycleGraph``), and h + c ≤ T: the coordinator can
    #: exclude at most K − T holders, too few to cut the honest survivors apart.
    survivors: int = 0
    #: The SHA-256 (64 hex digits) of the run's public parameters as this holder bound them
    #: at its first contact (``runvalues.run_digest``; "": none, a bare library round).
    #: Every advertisement signs it and every holder refuses a peer whose digest differs, so
    #: no peer can have been shown another ε, δ, noise share, modulus or graph: the holders
    #: of a round agree on the whole run, not only on K, t_min, c and bits.
    run_digest: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not 0 < len(self.run_id) <= MAX_RUN_ID:
            raise refuse("round parameters", f"the run id must be 1 to {MAX_RUN_ID} chars")
        for name in PARAMETER_FIELDS[1:] + GRAPH_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise refuse("round parameters", f"{name} must be an integer")
        if self.round < 0:
            raise refuse("round parameters", f"round must be at least 0, got {self.round}")
        if not isinstance(self.run_digest, str) or (
            self.run_digest and not _is_digest(self.run_digest)
        ):
            raise refuse("round parameters", "run_digest must be 64 lowercase hex digits")
        if not 1 <= self.bits <= MAX_BITS:
            raise refuse("round parameters", f"bits must be in [1, {MAX_BITS}], got {self.bits}")
        if self.k < 2:
            raise refuse("round parameters", f"K must be at least 2, got {self.k}")
        if self.graph and (problem := graph_rules(self)):
            raise refuse("round parameters", problem)
        if not self.graph and (
            self.committee or self.committee_threshold or self.honest or self.survivors
        ):
            raise refuse("round parameters", "committee, its threshold, h and T need neighbours")
        if self.graph:
            return
        if not minimum_t_min(self.k) <= self.t_min <= self.k:
            raise refuse(
                "round parameters",
                f"t_min must be in [{minimum_t_min(self.k)}, K = {self.k}] (more than half "
                f"of K, or one aggregator could collect both seeds of a holder), got "
                f"{self.t_min}",
            )
        if not 0 <= self.colluders <= most_colluders(self.k, self.t_min):
            raise refuse(
                "round parameters",
                f"colluders must be in [0, 2·t_min − K − 1 = "
                f"{most_colluders(self.k, self.t_min)}] (more and a coordinator with that "
                f"many holders could unmask one), got {self.colluders}",
            )

    @property
    def graph(self) -> bool:
        """Whether the round runs on the SecAgg+ graph (k < K − 1) rather than the mesh."""
        return self.neighbours != 0

    @property
    def expander(self) -> bool:
        """Whether the round's graph is the expander (a survivor floor T) rather than the
        Harary graph."""
        return self.graph and self.survivors != 0

    @property
    def honest_shares(self) -> int:
        """The honest noise shares the run promises: h on the graph, t_min − c on the mesh."""
        return self.honest if self.graph else self.t_min - self.colluders

    def same_round(self, run_id: str, round_: int) -> bool:
        return run_id == self.run_id and round_ == self.round

    def fields(self) -> tuple[str, ...]:
        """The fields this round's messages carry (the graph's only on the graph, the run
        digest only when bound)."""
        return (
            PARAMETER_FIELDS
            + (GRAPH_FIELDS if self.graph else ())
            + (DIGEST_FIELD if self.run_digest else ())
        )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.fields()}


PARAMETER_FIELDS = ("run_id", "round", "k", "t_min", "bits", "colluders")
GRAPH_FIELDS = ("neighbours", "committee", "committee_threshold", "honest", "survivors")
DIGEST_FIELD = ("run_digest",)


def _is_digest(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def graph_rules(p: RoundParameters) -> str | None:
    """What is wrong with the graph parameters of ``p`` (None: nothing): an even degree
    2 ≤ k < K − 1, 2 ≤ t_k ≤ k + 1, 0 ≤ c < K, a committee with m/2 < τ ≤ m ≤ K (two
    certified sets share a signer), and on the Harary graph 1 ≤ h ≤ t_k − 1 (at least one
    honest neighbour in any masking set), on the expander 1 ≤ h and h + c ≤ T ≤ K (the
    honest survivors of any survivor set the holders accept hold h)."""
    if not 2 <= p.neighbours < p.k - 1 or p.neighbours % 2:
        return f"neighbours must be even in [2, K - 2 = {p.k - 2}], got {p.neighbours}"
    if not 2 <= p.t_min <= p.neighbours + 1:
        return f"t_min (t_k) must be in [2, k + 1 = {p.neighbours + 1}], got {p.t_min}"
    if not 0 <= p.colluders < p.k:
        return f"colluders must be in [0, K - 1 = {p.k - 1}], got {p.colluders}"
    if not 1 <= p.committee <= p.k or not p.committee < 2 * p.committee_threshold:
        return (
            f"the committee (m, tau) = ({p.committee}, {p.committee_threshold}) must have "
            f"m/2 < tau <= m <= K = {p.k}"
        )
    if p.committee_threshold > p.committee:
        return f"tau must be at most m = {p.committee}, got {p.committee_threshold}"
    if p.survivors == 0:
        if not 1 <= p.honest < p.t_min:
            return f"honest must be in [1, t_k - 1 = {p.t_min - 1}], got {p.honest}"
        return None
    if p.honest < 1 or not p.honest + p.colluders <= p.survivors <= p.k:
        return (
            f"the expander's survivors T must be in [h + c = {p.honest + p.colluders}, "
            f"K = {p.k}] with h >= 1, got T = {p.survivors}, h = {p.honest}"
        )
    return None
