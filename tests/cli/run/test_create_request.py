"""``ldpem run create``'s request file (issue 32, points 3 and 6): the roster of a secagg
run comes from its file (``--roster FILE``, or a file name in the request, relative to the
request file), a run created without ``delta`` is warned about with the default it got and
how to state it, and ``--plan`` states the setting it applied in the result line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldpem.cli import main
from ldpem.common.secagg import Roster
from ldpem.server.app import create_app
from tests.fedkit import ADMIN, live_server, run_request, settings
from tests.secaggkit import keys_and_roster

COUNTS = [300, 400, 500]


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def secagg_request(**extra: Any) -> dict[str, Any]:
    request = run_request(hospitals=3, records=300, d=2, rounds=3, mechanism="secagg", **extra)
    for hospital, count in zip(request["hospitals"], COUNTS, strict=True):
        hospital["records"] = count
    return request


def create(url: str, config: Path, *extra: str) -> int:
    return main(["run", "create", "--coordinator", url, "--config", str(config), *extra])


def test_the_roster_comes_from_its_file(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    _, roster_file, _ = keys_and_roster(keys, 3)
    digest = Roster.from_json(roster_file.read_text()).digest
    # --roster FILE
    config = tmp_path / "run.json"
    config.write_text(json.dumps(secagg_request(delta=1e-6)))
    assert create(server, config, "--roster", str(roster_file)) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["params"]["roster_digest"] == digest
    assert "warning" not in captured.err  # delta stated: nothing to warn about
    # "roster": "roster.json" in a request file elsewhere: relative to the request file.
    elsewhere = keys / "run.json"
    request = secagg_request(delta=1e-6, roster="roster.json")
    request["hospitals"] = [{**h, "token": h["token"] + "x"} for h in request["hospitals"]]
    elsewhere.write_text(json.dumps(request))
    assert create(server, elsewhere) == 0
    assert json.loads(capsys.readouterr().out)["params"]["roster_digest"] == digest
    # Both, or a file that is not there: one line, nothing created.
    assert create(server, elsewhere, "--roster", str(roster_file)) == 2
    assert capsys.readouterr().err.strip() == (
        f"ldpem run: error: {elsewhere} has a roster already; give it there or with "
        f"--roster {roster_file}, not both"
    )
    config.write_text(json.dumps(secagg_request(delta=1e-6, roster="missing.json")))
    assert create(server, config) == 2
    assert capsys.readouterr().err.strip() == (
        f"ldpem run: error: {tmp_path / 'missing.json'}: cannot read the roster "
        "(No such file or directory)"
    )


def test_a_run_without_delta_is_warned_about_with_the_default_it_got(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_request(hospitals=2, records=500)))
    assert create(server, config) == 0
    captured = capsys.readouterr()
    delta = json.loads(captured.out)["params"]["delta"]
    assert delta == pytest.approx(1000**-1.1)
    assert captured.err.strip().splitlines() == [
        f'warning: the request states no "delta": the run got the default delta = n^-1.1 = '
        f"{1000**-1.1:.3g} (n = 1000 enrolled records), and an agent whose --delta is smaller "
        'refuses it; state the agents\' delta in the request ("delta": 1e-06 for agents '
        "started with --delta 1e-6)"
    ]


def test_plan_states_its_setting_in_the_created_line(
    server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The search itself is tested in test_schedule_search.py; here, what the line says
    about the setting it returned."""
    import ldpem.run.plan

    def planned(request: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {**request, "rounds": 4, "schedule": "geometric:1.5", "final": "average:2"}

    monkeypatch.setattr(ldpem.run.plan, "planned_request", planned)
    config = tmp_path / "run.json"
    request = run_request(hospitals=2, records=500, delta=1e-6)
    request["hospitals"] = [{"name": h["name"], "records": 500} for h in request["hospitals"]]
    config.write_text(json.dumps(request))
    assert create(server, config, "--plan", "--tokens-dir", str(tmp_path / "tokens")) == 0
    first = capsys.readouterr().out.splitlines()[0]
    # What it changed, from the request's own (issue 43, finding 14).
    assert first.endswith(
        ", with the planner's setting: rounds 5 -> 4, schedule equal -> geometric:1.5, "
        "final last -> average:2"
    )
    assert first.startswith("run ") and " created: gmm, d = 4, 4 rounds" in first


def test_secagg_topology_graph_from_the_command_line(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--secagg-topology graph`` puts the SecAgg+ graph into the request: the run
    publishes its derived values (K = 16, c = 2: k = 6, docs/SECAGG_GRAPH.md); without it
    the same request runs the full mesh."""
    keys = tmp_path / "keys"
    keys.mkdir()
    _, roster_file, _ = keys_and_roster(keys, 16)
    request = run_request(hospitals=0, d=2, rounds=2, mechanism="secagg", colluders=2)
    request["hospitals"] = [
        {"name": f"h{i}", "records": 100, "token": f"graph-cli-token-{i:02d}-abcdefgh"}
        for i in range(16)
    ]
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**request, "delta": 1e-6}))
    assert create(server, config, "--roster", str(roster_file), "--secagg-topology", "graph") == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["graph"]["neighbours"] == 6 and params["t_min"] == 5
    request["hospitals"] = [{**h, "token": h["token"] + "x"} for h in request["hospitals"]]
    config.write_text(json.dumps({**request, "delta": 1e-6}))
    assert create(server, config, "--roster", str(roster_file)) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["graph"] is None and params["t_min"] == 15


def test_secagg_topology_expander_from_the_command_line_is_refused_where_it_cannot_hold(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--secagg-topology expander`` reaches the request; at K = 16 the expander is not
    sparser than the mesh, so ``run create`` fails with the coordinator's one line naming
    the topology to use instead (the coordinator's validation, not the CLI's)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    _, roster_file, _ = keys_and_roster(keys, 16)
    request = run_request(hospitals=0, d=2, rounds=2, mechanism="secagg")
    request["hospitals"] = [
        {"name": f"h{i}", "records": 100, "token": f"expander-cli-token-{i:02d}-abcdefgh"}
        for i in range(16)
    ]
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**request, "delta": 1e-6}))
    argv = ("--roster", str(roster_file), "--secagg-topology", "expander")
    assert create(server, config, *argv) == 2
    captured = capsys.readouterr()
    message = captured.err.strip()
    assert "secagg_topology expander cannot be met" in message and "\n" not in message
    assert "use secagg_topology mesh" in message and "Traceback" not in message
    # Whole, and as written (issue 43, finding 11): it was cut at 200 characters before
    # its fix ("…use secagg_topology mesh (aut\\u2026"), the escape printed raw.
    assert message.endswith('use secagg_topology mesh (auto picks it)"'), message
    assert "\\u" not in message, message
    assert captured.out == ""
