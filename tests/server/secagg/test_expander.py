"""The expander in runs (issue 29; docs/SECAGG_GRAPH.md, "The expander"): a run request
asks for ``"secagg_topology": "expander"`` (or gets it from the default "auto"), the
coordinator publishes what ``runvalues.run_expander`` derives (t_k, k, the committee, h and
the survivor floor T), each round's ``RoundParameters`` carry T, and a request the expander
cannot meet is refused with one line naming the topology to use instead. Value level:
no holder takes part (a whole expander round needs a few hundred holders; the lead's
benchmark runs it). The expander is feasible from K = 200 (k = 150 > K/2, so "auto" keeps
the mesh there) and sparser than half the mesh from K = 400 (k = 168)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from ldpem.common.planning.study import shares_threshold
from ldpem.common.secagg import Roster, generate_signing_key, public_key_bytes
from ldpem.common.secagg.runvalues import (
    graph_problem,
    resolve_topology,
    round_parameters,
    run_expander,
    run_graph,
    run_shares_mechanism,
)
from ldpem.common.wire import HospitalEnrolment, PublicParameters, RunCreate, public_parameters
from ldpem.server.forecast import run_problem
from tests.fedkit import admin_headers, run_request
from tests.secaggdriver import InProcessCoordinator, hospital_tokens

#: K = 200 with c = ⌊K/3⌋ = 66 and 10% dropouts: the smallest K of these tests where the
#: expander is feasible (asserted below against ``run_expander``).
K, C = 200, 66
NAMES = [f"x{i:03d}" for i in range(K)]
#: One roster of 400 keys; a K-holder request takes its first K names.
KEYS = {f"x{i:03d}": public_key_bytes(generate_signing_key()) for i in range(400)}


def roster(names: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(Roster({n: KEYS[n] for n in names}).to_json())
    return result


def request(holders: int = K, **extra: Any) -> RunCreate:
    """A secagg run request of ``holders`` hospitals (the request's own defaults else)."""
    names = list(KEYS)[:holders]
    return RunCreate(
        model="gmm",
        d=3,
        sigma=1.0,
        rounds=2,
        mechanism=extra.pop("mechanism", "secagg"),
        epsilon=1.0,
        delta=1e-5,
        roster=roster(names) if extra.pop("with_roster", True) else None,
        hospitals=[HospitalEnrolment(name=n, records=100) for n in names],
        **extra,
    )


def test_an_expander_run_publishes_what_run_expander_derives() -> None:
    """t_min = t_k, c exactly, and the graph object: δ, h asked, k, m, τ, the h reached
    and T, each run_expander's at c = 66; the noise is sized for h honest shares among T;
    each round's RoundParameters carry T (an expander round)."""
    params = public_parameters(request(secagg_topology="expander"))
    expander = run_expander(K, C, 0.1, 2)
    assert 2 * expander.k > K  # feasible, but not what "auto" picks at this K
    assert params.graph is not None
    assert (params.t_min, params.colluders) == (expander.threshold, C)
    assert params.graph.model_dump() == {
        "dropout_share": 0.1,
        "min_honest_shares": 2,
        "neighbours": expander.k,
        "committee": expander.committee.size,
        "committee_threshold": expander.committee.threshold,
        "honest": expander.honest_shares,
        "survivors": expander.survivors,
    }
    assert expander.survivors == K - K // 10
    assert expander.honest_shares == expander.survivors - C - expander.split_bound
    assert params.honest_shares == expander.honest_shares > expander.threshold
    assert (params.graph.topology, params.survivors) == ("expander", expander.survivors)
    mechanism = run_shares_mechanism(params)
    assert mechanism.noise_shares == expander.honest_shares  # type: ignore[attr-defined]
    assert mechanism.t_min == expander.survivors  # type: ignore[attr-defined]
    rp = round_parameters(params, "run-x", 1)
    assert rp.expander and (rp.survivors, rp.neighbours, rp.t_min) == (
        expander.survivors,
        expander.k,
        expander.threshold,
    )
    assert rp.honest_shares == expander.honest_shares
    assert graph_problem(params) is None
    # The published JSON carries T, and reads back to the same values.
    again = PublicParameters.model_validate_json(params.model_dump_json())
    assert again.graph is not None and again.graph.survivors == expander.survivors


def test_the_harary_graphs_published_object_has_no_survivors() -> None:
    """The Harary graph's object is what it was: no "survivors" key, T = 0 in its rounds."""
    names = list(KEYS)[:16]
    run = RunCreate(
        model="gmm",
        d=3,
        sigma=1.0,
        rounds=2,
        mechanism="secagg",
        secagg_topology="graph",
        colluders=2,
        roster=roster(names),
        hospitals=[HospitalEnrolment(name=n, records=100) for n in names],
    )
    params = public_parameters(run)
    assert params.graph is not None
    assert "survivors" not in params.graph.model_dump()
    assert "survivors" not in json.loads(params.model_dump_json())["graph"]
    assert params.graph.neighbours == run_graph(16, 2, 0.1, 2).k
    assert (params.graph.topology, params.survivors) == ("graph", None)
    assert round_parameters(params, "run-g", 0).survivors == 0


@pytest.mark.parametrize(
    ("holders", "extra", "expected"),
    [
        (16, {}, "mesh"),  # the expander is infeasible
        (200, {}, "mesh"),  # feasible, k = 150 > K/2
        (400, {}, "expander"),  # k = 168 <= K/2
        (400, {"t_min": 361}, "mesh"),  # a t_min is a mesh value
        (400, {"shares": False}, "mesh"),  # not a run of noise shares
        (400, {"honest": 300}, "mesh"),  # h asked above what the expander reaches
    ],
)
def test_resolve_topology(holders: int, extra: dict[str, Any], expected: str) -> None:
    honest = extra.pop("honest", None)
    assert resolve_topology(holders, None, None, honest, **extra) == expected


def test_auto_keeps_small_runs_on_the_mesh_exactly_as_before() -> None:
    """A request without a topology at K = 16 is a mesh run: the request says "mesh" (so
    the stored request does too) and its public parameters are the explicit mesh's."""
    auto = request(16)
    assert auto.secagg_topology == "mesh"
    mesh = request(16, secagg_topology="mesh")
    assert auto.model_dump() == mesh.model_dump()
    assert public_parameters(auto) == public_parameters(mesh)
    assert public_parameters(auto).graph is None
    # Not noise shares: the mesh, whatever K (nothing to resolve).
    assert request(400, mechanism="local", with_roster=False).secagg_topology == "mesh"


def test_auto_resolves_to_the_expander_where_it_is_sparse() -> None:
    auto = request(400)
    assert auto.secagg_topology == "expander"
    params = public_parameters(auto)
    expander = run_expander(400, 133, 0.1, 2)
    assert 2 * expander.k <= 400
    assert params.graph is not None and params.graph.survivors == expander.survivors == 360
    assert params.graph.neighbours == expander.k and params.honest_shares == expander.honest_shares
    # Graph inputs with auto are the expander's when it is picked …
    assert request(400, dropout_share=0.05).secagg_topology == "expander"
    # … and refused, naming the resolved topology, when auto picks the mesh.
    with pytest.raises(ValidationError, match="this run's is mesh"):
        request(16, dropout_share=0.05)


@pytest.mark.parametrize(
    ("holders", "extra", "named"),
    [
        (16, {}, "not sparser than the full mesh at K = 16"),
        (K, {"min_honest_shares": 150}, "min_honest_shares = 150"),
        (K, {"t_min": 150}, "t_min is derived on the expander"),
        (K, {"mechanism": "local", "with_roster": False}, "only meaningful for noise shares"),
    ],
)
def test_an_expander_request_it_cannot_meet_is_refused(
    holders: int, extra: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        request(holders, secagg_topology="expander", **extra)
    message = str(raised.value)
    assert named in message
    if "t_min" not in extra and "mechanism" not in extra:
        assert "use secagg_topology mesh" in message


def test_the_coordinator_refuses_an_infeasible_expander_in_one_line(
    coordinator: InProcessCoordinator,
) -> None:
    body = run_request(
        records=100,
        d=3,
        rounds=2,
        mechanism="secagg",
        secagg_topology="expander",
        roster=roster(NAMES[:16]),
    )
    tokens = hospital_tokens("xp", NAMES[:16])
    body["hospitals"] = [{"name": n, "records": 100, "token": tokens[n]} for n in NAMES[:16]]
    response = coordinator.client.post("/v1/runs", json=body, headers=admin_headers())
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert "secagg_topology expander cannot be met" in detail
    assert "use secagg_topology mesh" in detail


def test_the_coordinator_publishes_the_expander_and_shows_it(
    coordinator: InProcessCoordinator,
) -> None:
    """Created through the real coordinator: the published params are run_expander's, the
    summary (``ldpem run status``) names the topology and T, and so does the status page."""
    body = run_request(records=100, d=3, rounds=2, mechanism="secagg", secagg_topology="expander")
    body["roster"] = roster(NAMES)
    tokens = hospital_tokens("xq", NAMES)
    body["hospitals"] = [{"name": n, "records": 100, "token": tokens[n]} for n in NAMES]
    client = coordinator.client
    response = client.post("/v1/runs", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text
    created = response.json()
    expander = run_expander(K, C, 0.1, 2)
    assert created["params"]["graph"]["survivors"] == expander.survivors
    assert created["params"]["t_min"] == expander.threshold
    run_id = created["run_id"]
    summary = client.get(f"/v1/runs/{run_id}", headers=admin_headers()).json()
    assert (summary["secagg_topology"], summary["survivors"]) == ("expander", expander.survivors)
    page = client.get(f"/runs/{run_id}", headers=admin_headers()).text
    assert "SecAgg+ expander" in page
    assert f"survivor floor T = {expander.survivors}" in page
    assert f"h = {expander.honest_shares}" in page


def test_the_forecast_of_an_expander_run_simulates_its_t_and_h() -> None:
    """The run's forecast (and confidence bootstrap) simulates the expander's sums: at least
    T reports, h of them honest (``study.shares_threshold``: (T, T − h))."""
    run = request(secagg_topology="expander")
    params = public_parameters(run)
    study = run_problem(run, params).study("secagg", 0)
    assert study.secagg_topology == "expander"
    expander = run_expander(K, C, 0.1, 2)
    assert shares_threshold(study, K) == (
        expander.survivors,
        expander.survivors - expander.honest_shares,
    )
