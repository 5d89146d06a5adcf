"""The public values of a federated secagg run (docs/FEDERATED.md), derived once from
public values only, so that the coordinator and every agent compute the same numbers:

* K, the enrolled holders, and t_min (more than K/2: ``messages.minimum_t_min``);
* the modulus bits, from the most records a round can sum (m + K: Σ_k ⌈n_k/T⌉ ≤ m + K),
  the record bound, the grid γ and the share mean λ_s at the run's own budget;
* the roster digest (SHA-256 of its canonical JSON), pinned by every agent;
* on the SecAgg+ graph (docs/SECAGG_GRAPH.md), the degree k, the threshold t_k, the
  committee (m, τ) and h, from K, c, the dropout share δ and the least honest shares asked
  for (``run_graph``; on the expander also the survivor floor T: ``run_expander``): the
  coordinator publishes them, every agent recomputes them (``graph_problem``), and both
  build each round's ``RoundParameters`` the same way (``round_parameters``);
* the topology a request without one runs on (``resolve_topology``).

And the conversions between a holder's float report γ·(Q + Z) and the integers it masks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.secagg_quantize import modulus_bits
from ldpem.common.mechanisms import Mechanism, get_mechanism
from ldpem.common.protocol import holder_mechanism, parameter_size, public_budget
from ldpem.common.protocol.parameters import PublicValues
from ldpem.common.secagg.graph.expander import ExpanderParameters, expander_parameters
from ldpem.common.secagg.graph.parameters import GraphParameters, graph_parameters
from ldpem.common.secagg.messages import RoundParameters

__all__ = [
    "DEFAULT_DROPOUT_SHARE",
    "DEFAULT_HONEST_SHARES",
    "RunGraph",
    "graph_problem",
    "graph_values",
    "grid_of",
    "is_shared",
    "requested_graph",
    "resolve_topology",
    "round_parameters",
    "run_digest",
    "run_expander",
    "run_graph",
    "run_modulus_bits",
    "run_shares_mechanism",
    "shares_values",
    "signed_sum",
    "to_residues",
]


def is_shared(mechanism: str) -> bool:
    """Whether a run of ``mechanism`` sums noise shares through secure aggregation."""
    return get_mechanism(mechanism).noise_site == "shares"


def _grid_and_mean(mechanism: Mechanism) -> tuple[float, float]:
    grid = float(getattr(mechanism, "grid"))  # noqa: B009 - the shares' mechanism has one
    return grid, float(getattr(mechanism, "share_mean"))  # noqa: B009


def run_shares_mechanism(params: PublicValues) -> Mechanism:
    """The holders' mechanism at the run's own budget: the γ, record bound and share the
    run's modulus is sized for (every agent's share must be no larger)."""
    return holder_mechanism(
        params,
        records=params.records_per_round,
        budget=public_budget(params),
    )


def run_modulus_bits(params: PublicValues, holders: int) -> int:
    """The run's modulus bits: wide enough for a round's sum of ``holders`` holders' shares
    calibrated at the run's budget (``quantize.modulus_bits``)."""
    mechanism = run_shares_mechanism(params)
    grid, mean = _grid_and_mean(mechanism)
    size = parameter_size(params)  # β's coordinates, each a masked sum
    return modulus_bits(
        records=params.records_per_round + holders,
        holders=holders,
        bound=mechanism.record_bound(size),
        grid=grid,
        share_mean=max(mean, 1e-300),
        d=size,
    )


def grid_of(mechanism: Mechanism) -> float:
    """γ of a shares' mechanism."""
    return _grid_and_mean(mechanism)[0]


def to_residues(total: Sequence[float], grid: float, bits: int) -> NDArray[np.uint64]:
    """A report γ·(Q + Z) as the integers Q + Z mod 2^bits (exact: γ is a power of two and
    |Q + Z| < 2^53). ValueError for a value off the grid."""
    out = np.empty(len(total), dtype=np.uint64)
    modulus = 1 << bits
    for i, value in enumerate(total):
        units = value / grid
        if not math.isfinite(units) or units != math.floor(units) or abs(units) >= 2.0**53:
            raise ValueError(f"coordinate {i} of the report is not on the grid {grid!r}")
        out[i] = int(units) % modulus
    return out


def signed_sum(residues: Sequence[int] | NDArray[np.uint64], bits: int) -> list[int]:
    """Σ mod 2^bits, centered to [−2^(bits−1), 2^(bits−1))."""
    half = 1 << (bits - 1)
    return [(int(v) + half) % (1 << bits) - half for v in residues]


def shares_values(params: Any, *, holders: int, roster_digest: str) -> dict[str, Any]:
    """The secagg fields of a run's public parameters."""
    return {
        "holders": holders,
        "modulus_bits": run_modulus_bits(params, holders),
        "roster_digest": roster_digest,
    }


#: The graph's defaults (docs/SECAGG_GRAPH.md): 10% of the holders may drop out of a round,
#: and any sum the coordinator can learn holds at least 2 honest noise shares (the least
#: that protects an input; a larger h costs neighbours, and buys accuracy).
DEFAULT_DROPOUT_SHARE = 0.1
DEFAULT_HONEST_SHARES = 2


def _colluder_fraction(holders: int, colluders: int) -> float:
    """γ for exactly c = ``colluders`` of K = ``holders``: (c + ½)/K, whose ⌊γK⌋ is c
    whatever the float rounding; ValueError for c outside [0, K − 1]."""
    if not 0 <= colluders < holders:
        raise ValueError(f"colluders must be in [0, K - 1 = {holders - 1}], got {colluders}")
    return (colluders + 0.5) / holders


@functools.lru_cache(maxsize=64)
def run_graph(holders: int, colluders: int, dropout_share: float, honest: int) -> GraphParameters:
    """``graph_parameters`` for K = ``holders`` of which exactly c = ``colluders`` may
    collude, a share δ of them dropping out and at least h = ``honest`` honest shares in
    any learnable sum, at the failure probability 2⁻⁴⁰. ValueError (one line) for values
    it cannot meet. Cached: a process checks the same run's values at every join, creation
    and forecast (≈ 0.2 s of exact tails at K = 1000), and the result is a frozen value."""
    return graph_parameters(
        holders,
        colluder_fraction=_colluder_fraction(holders, colluders),
        dropout_fraction=dropout_share,
        min_honest_shares=honest,
    )


@functools.lru_cache(maxsize=64)
def _expander_up_to(
    holders: int, colluders: int, dropout_share: float, honest: int, max_degree: int | None
) -> ExpanderParameters:
    return expander_parameters(
        holders,
        colluder_fraction=_colluder_fraction(holders, colluders),
        dropout_fraction=dropout_share,
        min_honest_shares=honest,
        max_degree=max_degree,
    )


def run_expander(
    holders: int, colluders: int, dropout_share: float, honest: int
) -> ExpanderParameters:
    """``expander_parameters`` (docs/SECAGG_GRAPH.md, "The expander") with the inputs of
    ``run_graph``: c exactly, δ, h asked for; privacy at 2⁻⁴⁰, liveness at 2⁻²⁰.
    ValueError (one line) for values it cannot meet (below a few hundred holders the
    expander is not sparser than the mesh). Cached like ``run_graph``, and searched first
    up to k = K/2 as ``resolve_topology`` searches it, so that the run "auto" resolved to
    the expander does not derive it twice (the least k is the same either way)."""
    try:
        return _expander_up_to(holders, colluders, dropout_share, honest, holders // 2)
    except ValueError:
        return _expander_up_to(holders, colluders, dropout_share, honest, None)


#: The graph of a run that is not on the mesh: the Harary graph's or the expander's values.
RunGraph = GraphParameters | ExpanderParameters


def _defaults(
    holders: int, colluders: int | None, dropout_share: float | None, honest: int | None
) -> tuple[int, float, int]:
    c = holders // 3 if colluders is None else colluders
    dropout = DEFAULT_DROPOUT_SHARE if dropout_share is None else dropout_share
    return c, dropout, honest or DEFAULT_HONEST_SHARES


def requested_graph(
    holders: int,
    colluders: int | None,
    dropout_share: float | None,
    honest: int | None,
    *,
    topology: str = "graph",
) -> tuple[RunGraph, int, float, int]:
    """``run_graph`` (``run_expander`` when ``topology`` is "expander") of a request's (or
    a study's) graph inputs, with the defaults filled in (c = ⌊K/3⌋,
    ``DEFAULT_DROPOUT_SHARE``, ``DEFAULT_HONEST_SHARES``), and the c, δ and h it used.
    ValueError (one line) for values it cannot meet."""
    c, dropout, h = _defaults(holders, colluders, dropout_share, honest)
    derive = run_expander if topology == "expander" else run_graph
    return derive(holders, c, dropout, h), c, dropout, h


def resolve_topology(
    holders: int,
    colluders: int | None,
    dropout_share: float | None,
    honest: int | None,
    *,
    shares: bool = True,
    t_min: int | None = None,
) -> str:
    """The topology of a secagg run (or simulation) that asks for "auto", the default:
    **"expander" when ``run_expander`` can meet K, c, δ and h (defaults as in
    ``requested_graph``) with a degree k ≤ K/2, at most half the full mesh's per-holder
    cost; else "mesh"**. A run that is not of noise shares (``shares`` False) or that
    gives its own ``t_min`` (a mesh value: t_min is derived on a graph) is "mesh". Below a
    few hundred holders the expander is no sparser than the mesh, so small runs stay on
    the mesh exactly as before "auto" existed. The coordinator resolves a request's
    topology when it validates it and publishes the result; ``ldpem simulate`` resolves
    its own the same way."""
    if not shares or t_min is not None:
        return "mesh"
    try:
        # The search stops at K/2: a degree above it would be refused anyway.
        _expander_up_to(
            holders, *_defaults(holders, colluders, dropout_share, honest), holders // 2
        )
    except ValueError:
        return "mesh"
    return "expander"


def graph_values(graph: RunGraph, *, dropout_share: float, honest: int) -> dict[str, Any]:
    """What a graph run publishes beside t_min = t_k: its inputs δ and h, and the derived
    (k, m, τ, h) that every agent recomputes (``graph_problem``); on the expander also T
    (``survivors``; absent on the Harary graph, whose published object is unchanged)."""
    values: dict[str, Any] = {
        "dropout_share": dropout_share,
        "min_honest_shares": honest,
        "neighbours": graph.k,
        "committee": graph.committee.size,
        "committee_threshold": graph.committee.threshold,
        "honest": graph.honest_shares,
    }
    if isinstance(graph, ExpanderParameters):
        values["survivors"] = graph.survivors
    return values


def graph_problem(params: Any) -> str | None:
    """What is wrong with the graph values a run publishes (``params.graph``; None: a mesh
    run, or nothing): recomputed from K, c, δ and h with ``run_graph`` (``run_expander``
    when it publishes a survivor floor T), each of k, t_k, m, τ, h (and T) must be the
    published one, and the graph must not be the full mesh. The published values are
    hostile input: never trusted, only compared."""
    published = params.graph
    if published is None:
        return None
    if params.holders is None or params.t_min is None:
        return "it publishes graph values for a run without secure aggregation"
    derive = run_expander if published.survivors else run_graph
    try:
        graph = derive(
            params.holders,
            params.colluders or 0,
            published.dropout_share,
            published.min_honest_shares,
        )
    except ValueError as error:
        return f"its graph inputs are not valid: {error}"
    if graph.full_mesh:
        return f"its graph at K = {params.holders} is the full mesh (k = K - 1)"
    expected = {
        "t_min": graph.threshold,
        **graph_values(
            graph, dropout_share=published.dropout_share, honest=published.min_honest_shares
        ),
    }
    now = {"t_min": params.t_min, **published.model_dump()}
    for name, value in expected.items():
        if now.get(name) != value:
            return (
                f"it publishes {name} = {now.get(name)!r} where K = {params.holders}, "
                f"c = {params.colluders or 0}, dropout share {published.dropout_share!r} and "
                f"h >= {published.min_honest_shares} give {value!r}"
            )
    return None


def round_parameters(params: Any, run_id: str, t: int) -> RoundParameters:
    """Round t's ``RoundParameters`` of a secagg run (on the graph with its k, m, τ, h and,
    on the expander, T), as the coordinator and every agent build them from the run's
    public values."""
    graph = params.graph
    extra: dict[str, int] = {}
    if graph is not None:
        extra = {
            "neighbours": graph.neighbours,
            "committee": graph.committee,
            "committee_threshold": graph.committee_threshold,
            "honest": graph.honest,
            "survivors": graph.survivors,
        }
    return RoundParameters(
        run_id,
        t,
        params.holders,
        params.t_min,
        params.modulus_bits,
        params.colluders or 0,
        **extra,
        run_digest=run_digest(params),
    )


def run_digest(params: Any) -> str:
    """The SHA-256 (hex) of a run's public parameters (a ``PublicParameters``) in canonical
    JSON: what every holder's advertisement commits to (``RoundParameters.run_digest``), so
    that holders shown different runs refuse each other before any masked input leaves."""
    text = json.dumps(
        params.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), allow_nan=False
    )
    return hashlib.sha256(text.encode()).hexdigest()
