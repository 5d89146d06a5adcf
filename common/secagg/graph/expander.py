"""The degree k, threshold t_k, committee (m, τ), survivor floor T and honest shares h of
SecAgg+ on the expander: the union of k/2 independent uniformly random Hamiltonian cycles
(``cycles.CycleGraph``) with every holder refusing a survivor set smaller than T.

The argument is in docs/SECAGG_GRAPH.md, "The expander". With C = ⌊γK⌋ holders colluding
with the coordinator (fixed before the round's graph seed is known), D = ⌊δK⌋ honest
holders dropping out (independently of the graph), T = K − D and H = K − C honest holders,
privacy fails only if one of three events happens, each given a third of ``failure``
(2⁻⁴⁰), and the round cannot complete (liveness: no sum, nothing revealed) only if one of
two others happens, each given half of ``liveness_failure`` (2⁻²⁰):

1. **corruption** (privacy) — some holder has more than ``corrupt_bound`` = c* distinct
   corrupt neighbours (union over K holders of the exact law of ``distinct_law``); privacy
   needs c* ≤ t_k − 1 (the other kind of share of an honest holder comes only from its
   corrupt neighbours, fewer than t_k);
2. **liveness** — some holder has fewer than t_k distinct neighbours that did not drop
   (union over K holders); t_k is the largest threshold for which this is unlikely;
3. **committee corruption** (privacy) and 4. **committee dropout** (liveness) — as on the
   Harary graph (``graph_parameters.committee_bounds``);
5. **a split** (privacy) — the honest survivors' graph falls apart in a way the
   coordinator can use: some set A of a honest holders with every honest neighbour
   outside A excluded from S (at most K − T of them), either a ≤ H/2 members that each
   signed S (so each has at least t_k − a corrupt neighbours), for a in [t_k − c*, o − 1],
   or any set of o ≤ a ≤ H/2. Union bound over the C(H, a) sets of each size, each tail an
   exact binomial tail that dominates the graph's (the exposure argument of the docs).

A liveness event never reveals anything: a holder short of live neighbours refuses to sign
S or leaves a secret that cannot be rebuilt, and a short committee certifies nothing, so
the round ends without a sum — which the coordinator could cause at will anyway. Hence
its own, larger budget (Bell et al. likewise separate a correctness parameter from the
security one); at 2⁻²⁰ a round is lost to bad luck about once in a million rounds.

If none happens, every sum the coordinator can learn holds the noise of at least
h = T − C − (o − 1) honest holders (``honest_shares``; ``split_bound`` = o − 1). k is the
least even degree below K − 1 for which the events fit and h ≥ 99% of T − C: the
expander's accuracy is then within half a percent (in noise standard deviation) of the
full mesh with t_min = T. Every tail is computed from the exact probability mass, summed in
log space (log-sum-exp of ``gammaln`` terms); no Chernoff or normal approximation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpem.common.secagg.graph.parameters import (
    DEFAULT_FAILURE,
    Committee,
    ThreatModel,
    check_integer,
    check_probability,
    check_threat_model,
    committee_bounds,
)

__all__ = [
    "DEFAULT_LIVENESS_FAILURE",
    "HONEST_SHARE_OF_SURVIVORS",
    "ExpanderParameters",
    "distinct_law",
    "expander_parameters",
    "split_bound",
]

#: The privacy events (corruption, committee corruption, split) share ``failure``, the
#: liveness events (live neighbours, committee dropout) ``liveness_failure``.
_PRIVACY_EVENTS = 3
_LIVENESS_EVENTS = 2
#: A round that cannot complete, through dropouts alone: about one in a million.
DEFAULT_LIVENESS_FAILURE = 2.0**-20
#: The least share of the T − C honest survivors whose noise every learnable sum must hold.
HONEST_SHARE_OF_SURVIVORS = 0.99


@dataclass(frozen=True)
class ExpanderParameters:
    """SecAgg+ on the expander for one consortium size; see the module docstring.

    ``threat``: K, C, D and the ``failure`` that bounds the privacy events; ``k``: cycles
    k/2, at most k distinct neighbours a holder; ``threshold``: t_k; ``corrupt_bound``: c*;
    ``live_bound``: the fewest distinct live neighbours (= t_k); the ``committee`` as on
    the Harary graph; ``survivors``: T; ``split_bound``: the most honest survivors the
    coordinator can cut off from the rest; ``liveness_failure`` bounds the liveness
    events.
    """

    threat: ThreatModel
    k: int
    threshold: int
    corrupt_bound: int
    live_bound: int
    committee: Committee
    survivors: int
    split_bound: int
    liveness_failure: float = DEFAULT_LIVENESS_FAILURE

    @property
    def full_mesh(self) -> bool:
        return False

    @property
    def honest_shares(self) -> int:
        """h = T − C − split_bound: the least honest holders in a learnable sum."""
        return self.survivors - self.threat.colluders - self.split_bound


def distinct_law(others: int, marked: int, cycles: int) -> NDArray[np.float64]:
    """P(N = j), j = 0 … 2·cycles, where N is the number of distinct marked holders among
    one holder's neighbours in the union of ``cycles`` independent uniform Hamiltonian
    cycles, ``marked`` of its ``others`` = K − 1 fellow holders being marked.

    In each cycle the holder's successor is uniform over the ``others`` and its
    predecessor uniform over the ``others − 1`` left (K ≥ 3); a slot finds a new marked
    holder with probability (marked − found)/choices, whatever it found before. Shape
    (2·cycles + 1,)."""
    if others < 2 or not 0 <= marked <= others or cycles < 1:
        raise ValueError(
            f"distinct_law needs others >= 2, 0 <= marked <= others and cycles >= 1, got "
            f"others = {others}, marked = {marked}, cycles = {cycles}"
        )
    slots = 2 * cycles
    found = np.arange(slots + 1)
    law = np.zeros(slots + 1)
    law[0] = 1.0
    for slot in range(slots):
        choices = others if slot % 2 == 0 else others - 1
        new = np.clip((marked - found) / choices, 0.0, 1.0)
        moved = law * new
        law = law - moved
        law[1:] += moved[:-1]
    return law


def _log_sum(terms: NDArray[np.float64]) -> float:
    if terms.size == 0:
        return -math.inf
    top = float(np.max(terms))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.sum(np.exp(terms - top))))


def _log_binomial_pmf(trials: int, p: float, counts: NDArray[np.float64]) -> NDArray[np.float64]:
    from scipy.special import gammaln, xlog1py, xlogy

    terms: NDArray[np.float64] = (
        gammaln(trials + 1.0)
        - gammaln(counts + 1.0)
        - gammaln(trials - counts + 1.0)
        + xlogy(counts, p)
        + xlog1py(trials - counts, -p)
    )
    return terms


def _log_at_most(trials: int, p: float, most: int) -> float:
    """log P(Bin(trials, p) ≤ most)."""
    if most >= trials or p <= 0.0:
        return 0.0
    if most < 0:
        return -math.inf
    return min(0.0, _log_sum(_log_binomial_pmf(trials, p, np.arange(most + 1.0))))


def _log_at_least(trials: int, p: float, least: int) -> float:
    """log P(Bin(trials, p) ≥ least)."""
    if least <= 0 or p >= 1.0:
        return 0.0
    if least > trials:
        return -math.inf
    return min(0.0, _log_sum(_log_binomial_pmf(trials, p, np.arange(least, trials + 1.0))))


def _log_choose(n: int, r: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)


def split_bound(
    holders: int,
    colluders: int,
    dropouts: int,
    k: int,
    threshold: int,
    corrupt: int,
    log_budget: float,
) -> int | None:
    """The least o − 1 such that event 5 of the module docstring (for that o) has
    probability at most exp(``log_budget``), None when no o ≤ H/2 + 1 fits.

    For a honest set A of a members and x = D excluded honest holders at most:
    * every honest neighbour of A outside A excluded: exposing A's k·a neighbour slots one
      at a time, each finds a new honest holder outside A with probability at least
      q_a = (H − a − x)/(K − 1) while fewer than x + 1 have been found, so the chance is at
      most P(Bin(a·k, q_a) ≤ x);
    * each member has at least t_k − a corrupt neighbours (it signed S, so at least t_k − 1
      of its neighbours are in S, and its honest ones are in A): a·k slots, each corrupt
      with probability at most C/(K − 2a) whatever came before, at least a·(t_k − a) of
      them corrupt: P(Bin(a·k, C/(K − 2a)) ≥ a·(t_k − a))."""
    honest, most = holders - colluders, dropouts
    sizes = range(1, honest // 2 + 1)
    if not sizes:
        return 0
    smallest = threshold - corrupt
    cut: list[float] = []  # log of C(H, a)·(any set of a cut off)
    signed: list[float] = []  # log of C(H, a)·(a set of a signers cut off)
    for a in sizes:
        count = _log_choose(honest, a)
        q = (honest - a - most) / (holders - 1)
        cut.append(count + _log_at_most(a * k, q, most) if q > 0 else count)
        if a < smallest:
            signed.append(-math.inf)  # a signer has at most c* corrupt neighbours
            continue
        choices = holders - 2 * a  # the fewest choices one exposure has
        p = colluders / choices if choices > colluders else 1.0
        tail = _log_at_least(a * k, p, a * (threshold - a))
        signed.append(count + min(tail, cut[-1] - count))
    cut_terms = np.array(cut)
    signed_terms = np.array(signed)
    # o ranges over 1 … H/2 + 1: sizes below o need a signed split, sizes from o any split.
    suffix = np.append(np.logaddexp.accumulate(cut_terms[::-1])[::-1], -math.inf)
    prefix = np.insert(np.logaddexp.accumulate(signed_terms), 0, -math.inf)
    for o in range(1, len(sizes) + 2):
        if float(np.logaddexp(prefix[o - 1], suffix[o - 1])) <= log_budget:
            return o - 1
    return None


def _least_above(law: NDArray[np.float64], log_budget: float) -> int:
    """The least b with log P(N > b) ≤ log_budget."""
    above = np.append(np.cumsum(law[::-1])[::-1][1:], 0.0)  # above[b] = P(N > b)
    with np.errstate(divide="ignore"):
        fits = np.log(above) <= log_budget
    return int(np.argmax(fits))


def _most_below(law: NDArray[np.float64], log_budget: float) -> int:
    """The largest t with log P(N ≤ t − 1) ≤ log_budget (0 when none)."""
    at_most = np.cumsum(law)  # at_most[j] = P(N ≤ j)
    with np.errstate(divide="ignore"):
        fits = np.log(at_most) <= log_budget
    return int(np.flatnonzero(fits)[-1]) + 1 if fits.any() else 0


@functools.lru_cache(maxsize=64)
def expander_parameters(
    k_holders: int,
    *,
    colluder_fraction: float = 1 / 3,
    dropout_fraction: float = 0.1,
    failure: float = DEFAULT_FAILURE,
    liveness_failure: float = DEFAULT_LIVENESS_FAILURE,
    min_honest_shares: int = 2,
    max_degree: int | None = None,
) -> ExpanderParameters:
    """k, t_k, (m, τ), T and h for ``k_holders`` = K holders, of which at most
    ⌊colluder_fraction·K⌋ collude with the coordinator and ⌊dropout_fraction·K⌋ honest
    ones drop out: privacy fails with probability at most ``failure``, the round is left
    without a sum by dropouts with probability at most ``liveness_failure``.

    ``max_degree``: search k only up to it (default K − 2); the default topology asks for
    K/2, the most it would take, and so skips the degrees it would refuse.

    ValueError (naming the parameter and value) for K < 4, fractions outside [0, 1), a
    failure or liveness_failure outside (0, 1), h < 2 asked, a max_degree below 2, when no
    even k up to the largest allowed meets the five events with h ≥ 99% of T − C (then the
    full mesh is the cheaper protocol), or when that h is below ``min_honest_shares``.
    """
    threat = check_threat_model(k_holders, colluder_fraction, dropout_fraction, failure, least=4)
    check_probability("liveness_failure", liveness_failure)
    check_integer("min_honest_shares", min_honest_shares, least=2)
    holders, colluders, dropouts = k_holders, threat.colluders, threat.dropouts
    survivors = holders - dropouts
    if min_honest_shares > survivors - colluders:
        raise ValueError(
            f"min_honest_shares = {min_honest_shares} exceeds T - C = {survivors - colluders}"
            f" at K = {holders}: no survivor set the holders accept holds more honest holders"
        )
    goal = max(min_honest_shares, math.ceil(HONEST_SHARE_OF_SURVIVORS * (survivors - colluders)))
    log_event = math.log(failure / _PRIVACY_EVENTS)
    log_live = math.log(liveness_failure / _LIVENESS_EVENTS)
    per_holder = log_event - math.log(holders)  # union bound over the K holders
    live_per_holder = log_live - math.log(holders)
    others = holders - 1
    if max_degree is not None:
        check_integer("max_degree", max_degree, least=2)
    top = holders - 2 if max_degree is None else min(max_degree, holders - 2)
    for k in range(2, top + 1, 2):
        cycles = k // 2
        corrupt = _least_above(distinct_law(others, colluders, cycles), per_holder)
        threshold = _most_below(distinct_law(others, others - dropouts, cycles), live_per_holder)
        if threshold < 2 or corrupt > threshold - 1:
            continue
        cut = split_bound(holders, colluders, dropouts, k, threshold, corrupt, log_event)
        if cut is not None and survivors - colluders - cut >= goal:
            break
    else:
        where = "" if max_degree is None else f" with k <= {top}"
        raise ValueError(
            f"the expander is not sparser than the full mesh at K = {holders}{where} "
            f"(colluder_fraction = {threat.colluder_fraction}, dropout_fraction = "
            f"{threat.dropout_fraction}, h >= {goal}): "
            "use the mesh"
        )
    return ExpanderParameters(
        threat=threat,
        k=k,
        threshold=threshold,
        corrupt_bound=corrupt,
        live_bound=threshold,
        committee=committee_bounds(threat, log_event, log_live),
        survivors=survivors,
        split_bound=cut,
        liveness_failure=float(liveness_failure),
    )
