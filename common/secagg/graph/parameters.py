"""The degree k, the neighbourhood threshold t_k and the committee (m, τ) of SecAgg+, from
K, the tolerated corruption and dropout, and a failure probability for the whole round.

The argument is in docs/SECAGG_GRAPH.md; in short, with C = ⌊γK⌋ holders colluding with
the coordinator (chosen before the round's graph seed is known) and D = ⌊δK⌋ honest
holders dropping out (independently of the graph), the round fails — privacy or liveness —
only if one of four events happens; each is given a quarter of the budget ``failure``:

1. **corruption** — some honest holder has more than ``corrupt_bound`` corrupt neighbours
   (union over K holders of X ~ Hypergeom(K − 1, C, k)); privacy needs
   ``corrupt_bound`` ≤ t_k − h with h = ``min_honest_shares`` ≥ 2 (fewer than t_k − 1
   corrupt neighbours: every masking set of t_k − 1 neighbours holds an honest one, and
   the other kind of share of an honest holder can come only from its fewer than t_k
   corrupt neighbours; a larger h makes every sum the coordinator can learn hold at least
   h honest noise shares);
2. **dropout** — some holder has more than ``dropout_bound`` dropped neighbours (union
   over K of Hypergeom(K − 1, D, k)); liveness takes t_k = k − ``dropout_bound``, the
   largest threshold every holder's surviving neighbours still reach;
3. **committee corruption** — more than ``Committee.corrupt_bound`` corrupt members among
   the m of the committee (Hypergeom(K, C, m)); τ = ⌊(m + that bound)/2⌋ + 1, so two
   different survivor sets cannot both gather τ signatures (they would share more than the
   bound's members, hence an honest member who signed twice);
4. **committee dropout** — more than m − τ of its members dropped (Hypergeom(K, D, m)).

Every tail is exact: ``scipy.stats.hypergeom.logsf`` (a log-sum-exp of the exact pmf over
the upper tail), compared in log space, never a Chernoff or normal approximation. The
smallest even k < K − 1 that meets 1 and 2 is taken, else the full mesh (k = K − 1, where
the counts are certain: C corrupt and D dropped neighbours at most). Any sum the
coordinator can learn holds the noise of at least ``honest_shares`` = t_k − corrupt_bound
honest holders (the component bound of docs/SECAGG_GRAPH.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "DEFAULT_FAILURE",
    "Committee",
    "GraphParameters",
    "ThreatModel",
    "check_fraction",
    "check_integer",
    "check_probability",
    "check_threat_model",
    "committee_bounds",
    "graph_parameters",
    "tail_bound",
]

#: The round's failure probability: 2⁻⁴⁰, so that a coordinator grinding G run ids to
#: find a bad graph still fails except with probability G·2⁻⁴⁰ (docs/SECAGG_GRAPH.md).
DEFAULT_FAILURE = 2.0**-40
#: The four events share the budget equally.
_EVENTS = 4


@dataclass(frozen=True)
class ThreatModel:
    """What a round's graph is sized for: ``holders`` = K, of which at most
    C = ⌊``colluder_fraction``·K⌋ collude with the coordinator and D =
    ⌊``dropout_fraction``·K⌋ honest ones drop out, privacy failing with probability at
    most ``failure``."""

    holders: int
    colluder_fraction: float
    dropout_fraction: float
    failure: float

    @property
    def colluders(self) -> int:
        """C = ⌊γK⌋."""
        return math.floor(self.colluder_fraction * self.holders)

    @property
    def dropouts(self) -> int:
        """D = ⌊δK⌋."""
        return math.floor(self.dropout_fraction * self.holders)


@dataclass(frozen=True)
class Committee:
    """The committee of a SecAgg+ round (event 3 and 4 of the module docstring): ``size`` =
    m members, of which ``threshold`` = τ must sign the survivor set; at most
    ``corrupt_bound`` of them are corrupt and ``dropout_bound`` drop out, each except with
    the event's probability."""

    size: int
    threshold: int
    corrupt_bound: int
    dropout_bound: int


@dataclass(frozen=True)
class GraphParameters:
    """SecAgg+ parameters for one consortium size; see the module docstring.

    ``k`` neighbours per holder (K − 1: the full mesh) for the ``threat``, Shamir
    threshold ``threshold`` (t_k) over a holder and its k neighbours, the ``committee``
    that signs the survivor set; the bounds each holds except with probability failure/4,
    and ``honest_shares``, the least number of honest noise shares in any sum the
    coordinator can learn.
    """

    threat: ThreatModel
    k: int
    threshold: int
    corrupt_bound: int
    dropout_bound: int
    committee: Committee

    @property
    def full_mesh(self) -> bool:
        return self.k >= self.threat.holders - 1

    @property
    def honest_shares(self) -> int:
        """t_k − corrupt_bound: the least honest holders in a learnable sum."""
        return self.threshold - self.corrupt_bound


def _log_tail(count: int, population: int, successes: int, draws: int) -> float:
    """log P(X > count) for X ~ Hypergeom(population, successes, draws) (−inf when
    ``count`` is at the support's top)."""
    if count >= min(successes, draws):
        return -math.inf
    # Imported here: scipy.stats pulls in scipy.optimize, which an agent of a mesh run
    # never needs (tests/common/test_brentq.py keeps it out of the agent's start-up).
    from scipy.stats import hypergeom

    return float(hypergeom.logsf(count, population, successes, draws))


def tail_bound(population: int, successes: int, draws: int, log_budget: float) -> int:
    """The least c with log P(X > c) ≤ ``log_budget``, X ~ Hypergeom(population,
    successes, draws): the most successes among the draws except with that probability.
    Bisection (the tail decreases in c)."""
    low, high = 0, min(successes, draws)  # P(X > high) = 0
    while low < high:
        middle = (low + high) // 2
        if _log_tail(middle, population, successes, draws) <= log_budget:
            high = middle
        else:
            low = middle + 1
    return low


def check_fraction(name: str, value: float) -> float:
    """``value`` as a float, or ValueError naming ``name`` unless it is in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def check_probability(name: str, value: float) -> float:
    """``value`` as a float, or ValueError naming ``name`` unless it is in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


def check_integer(name: str, value: int, *, least: int) -> int:
    """``value``, or ValueError naming ``name`` unless it is an integer ≥ ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


def check_threat_model(
    k_holders: int,
    colluder_fraction: float,
    dropout_fraction: float,
    failure: float,
    *,
    least: int,
) -> ThreatModel:
    """The ``ThreatModel`` of K = ``k_holders`` holders; ValueError (naming the parameter
    and value) for K < ``least``, fractions outside [0, 1) or a failure outside (0, 1)."""
    check_integer("k_holders", k_holders, least=least)
    return ThreatModel(
        k_holders,
        check_fraction("colluder_fraction", colluder_fraction),
        check_fraction("dropout_fraction", dropout_fraction),
        check_probability("failure", failure),
    )


def committee_bounds(
    threat: ThreatModel, log_budget: float, log_live_budget: float | None = None
) -> Committee:
    """The smallest committee m ≤ K of the ``threat`` that is both safe
    (τ > (m + corrupt)/2, the corrupt tail at ``log_budget``) and live (m − dropped ≥ τ,
    the dropout tail at ``log_live_budget``, default the same)."""
    live = log_budget if log_live_budget is None else log_live_budget
    holders, colluders, dropouts = threat.holders, threat.colluders, threat.dropouts
    for size in range(1, holders + 1):
        corrupt = tail_bound(holders, colluders, size, log_budget)
        dropped = tail_bound(holders, dropouts, size, live)
        tau = (size + corrupt) // 2 + 1
        if size - dropped >= tau:
            return Committee(size, tau, corrupt, dropped)
    raise ValueError(
        f"no committee works for K = {holders}: {colluders} colluders and {dropouts} "
        "dropouts leave fewer live members than a safe quorum"
    )


def graph_parameters(
    k_holders: int,
    *,
    colluder_fraction: float = 1 / 3,
    dropout_fraction: float = 0.1,
    failure: float = DEFAULT_FAILURE,
    min_honest_shares: int = 2,
) -> GraphParameters:
    """k, t_k, m and τ for ``k_holders`` = K holders, of which at most
    ⌊colluder_fraction·K⌋ collude with the coordinator and ⌊dropout_fraction·K⌋ honest
    ones drop out, failing (privacy or liveness) with probability at most ``failure``.

    ``min_honest_shares`` (h ≥ 2) is the least number of honest holders whose noise is in
    any sum the coordinator can learn (t_k − corrupt_bound ≥ h): what the ledger may
    assume. ValueError (naming the parameter and value) for K < 2, fractions outside
    [0, 1), a failure outside (0, 1), h < 2, or settings that even the full mesh cannot
    meet.
    """
    threat = check_threat_model(k_holders, colluder_fraction, dropout_fraction, failure, least=2)
    check_integer("min_honest_shares", min_honest_shares, least=2)
    colluders, dropouts = threat.colluders, threat.dropouts
    log_event = math.log(failure / _EVENTS)
    per_holder = log_event - math.log(k_holders)  # union bound over the K holders
    others = k_holders - 1
    for k in [*range(2, others, 2), others]:
        corrupt = tail_bound(others, colluders, k, per_holder)
        dropped = tail_bound(others, dropouts, k, per_holder)
        threshold = k - dropped
        if threshold >= corrupt + min_honest_shares:
            break
    else:
        raise ValueError(
            f"colluder_fraction = {threat.colluder_fraction} and dropout_fraction = "
            f"{threat.dropout_fraction} cannot be met at K = {k_holders} with "
            f"min_honest_shares = {min_honest_shares}: even the full "
            f"mesh's threshold K - 1 - {dropouts} = {others - dropouts} is below "
            f"{colluders} colluders + {min_honest_shares}"
        )
    return GraphParameters(
        threat=threat,
        k=k,
        threshold=threshold,
        corrupt_bound=corrupt,
        dropout_bound=dropped,
        committee=committee_bounds(threat, log_event),
    )
