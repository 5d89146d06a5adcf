"""``ldpem generate`` (one part of a seeded synthetic study) and ``ldpem run status --wait``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from ldpem.cli import main
from ldpem.client.data import load_records
from ldpem.common.models import get_model
from ldpem.server.app import create_app
from tests.fedkit import (
    ADMIN,
    AGENT_BUDGET,
    TOKENS,
    live_server,
    run_request,
    settings,
    token_file,
)


def generate(tmp_path: Path, name: str, *extra: str) -> Path:
    out = tmp_path / name
    assert main(["generate", "--out", str(out), *extra]) == 0
    return out


def test_parts_of_one_study_share_beta_star_and_hold_disjoint_records(tmp_path: Path) -> None:
    study = ["--model", "gmm", "--d", "3", "--n", "50", "--seed", "9", "--parts", "3"]
    parts, betas = [], []
    for part in (1, 2, 3):
        out = generate(
            tmp_path,
            f"p{part}.csv",
            *study,
            "--part",
            str(part),
            "--beta-star-out",
            str(tmp_path / f"b{part}.json"),
        )
        parts.append(load_records(out, "gmm").x)
        betas.append(json.loads((tmp_path / f"b{part}.json").read_text())["beta_star"])
    assert betas[0] == betas[1] == betas[2]
    records, beta_star = get_model("gmm").generate(150, 3, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(np.vstack(parts), records.x)  # %.17g round-trips exactly
    assert betas[0] == beta_star.tolist()
    assert np.linalg.norm(beta_star) == pytest.approx(3.0)


def test_response_models_write_y_last_and_rmc_missing_cells(tmp_path: Path) -> None:
    out = generate(tmp_path, "m.npy", "--model", "mrm", "--d", "2", "--n", "20", "--seed", "1")
    table = np.load(out)
    records = load_records(out, "mrm")
    assert table.shape == (20, 3) and records.y is not None
    np.testing.assert_array_equal(records.y, table[:, -1])
    out = generate(
        tmp_path, "r.csv", "--model", "rmc", "--d", "4", "--n", "200", "--seed", "2",
        "--missing", "0.3",
    )  # fmt: skip
    assert out.read_text().splitlines()[0] == "x1,x2,x3,x4,y"
    records = load_records(out, "rmc")
    assert 0.2 < float(np.isnan(records.x).mean()) < 0.4
    assert not list(tmp_path.glob(".*tmp*"))  # written through a temporary file, renamed


def test_a_mixture_is_generated_with_its_declared_options(tmp_path: Path) -> None:
    beta = tmp_path / "beta.json"
    study = ["--model", "gmmk", "--components", "2", "--d", "3", "--n", "40", "--seed", "1"]
    out = generate(tmp_path, "k.csv", *study, "--beta-star-out", str(beta))
    described = json.loads(beta.read_text())
    assert described["model_options"] == {"components": 2}
    assert len(described["beta_star"]) == 2 * (3 + 1)
    assert load_records(out, "gmmk").x.shape == (40, 3)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--components", "3"], "model gmm has no option components (its options: none)"),
        (["--part", "4", "--parts", "3"], "--part must be between 1 and --parts (3), got 4"),
        (["--n", "0"], "--n must be at least 1, got 0"),
        (["--missing", "0.1"], "--missing: model gmm allows no missing covariate"),
        (["--out", "x.txt"], "x.txt: the output must end in .csv or .npy"),
        (
            ["--beta-star-out", "bstar.npy"],
            "bstar.npy: --beta-star-out writes JSON, so the file must end in .json",
        ),
    ],
)
def test_bad_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["generate", "--model", "gmm", "--d", "2", "--n", "5", "--seed", "1"]
    argv += ["--out", str(tmp_path / "a.csv"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ldpem generate: error: {message}"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path))) as url:
        yield url


def test_run_status_waits_for_the_latest_run_and_prints_its_error(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = run_request(hospitals=1, records=300, d=2, rounds=2, mechanism="none")
    response = httpx.post(
        f"{server}/v1/runs", json=request, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert response.status_code == 201
    run_id = response.json()["run_id"]
    data = generate(
        tmp_path, "a.csv", "--model", "gmm", "--d", "2", "--n", "300", "--seed", "4",
        "--beta-star-out", str(tmp_path / "beta.json"),
    )  # fmt: skip
    codes: list[int] = []
    client = ["client", "--coordinator", server, "--data", str(data)]
    client += ["--token-file", str(token_file(tmp_path, TOKENS[0]))]
    client += ["--model", "gmm"]
    client += ["--state", str(tmp_path / "agent"), "--allow-weaker", "--wait", "1", *AGENT_BUDGET]
    agent = threading.Thread(target=lambda: codes.append(main(client)))
    agent.start()
    try:
        argv = ["run", "status", "--coordinator", server, "--wait", "--interval", "0.05"]
        assert main([*argv, "--beta-star", str(tmp_path / "beta.json")]) == 0
    finally:
        agent.join(60)
    assert codes == [0]
    out, err = capsys.readouterr()
    # Following a run ends with its final line, then the estimate with its confidence
    # intervals (d = 2 coordinates), not the run's JSON before it.
    lines = out.strip().splitlines()
    assert len(lines) == 5, out
    final = lines[0]
    assert final.startswith(f"run {run_id}: final error ")
    assert "after 2 rounds (trivial error of beta = 0: 3.0000" in final
    assert lines[1] == "estimate β̂ and its confidence intervals:"
    method = "parametric bootstrap (shrinkage-corrected intervals)"
    assert lines[2].startswith(f"90% confidence region ({method}, 19 draws)")
    assert lines[3].startswith("  β[0] = ") and lines[4].startswith("  β[1] = ")
    assert f"run {run_id}: finished, round 2/2" in err


def test_run_status_of_a_mixture_prints_its_error_up_to_relabelling(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A federated gmmk run of K = 2 end to end: the records and β* of ldpem generate
    # --components 2, an agent that pins K = 2, and ldpem run status --beta-star, whose
    # error is the model's (configured with the run's options: K·(d + 1) values).
    request = run_request(
        hospitals=1, records=300, d=2, rounds=2, mechanism="none", model="gmmk",
        model_options={"components": 2},
    )  # fmt: skip
    response = httpx.post(
        f"{server}/v1/runs", json=request, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert response.status_code == 201, response.text
    run_id = response.json()["run_id"]
    data = generate(
        tmp_path, "a.csv", "--model", "gmmk", "--components", "2", "--d", "2", "--n", "300",
        "--seed", "4", "--beta-star-out", str(tmp_path / "beta.json"),
    )  # fmt: skip
    client = ["client", "--coordinator", server, "--data", str(data)]
    client += ["--token-file", str(token_file(tmp_path, TOKENS[0]))]
    client += ["--model", "gmmk", "--components", "2"]
    client += ["--state", str(tmp_path / "agent"), "--allow-weaker", "--wait", "1", *AGENT_BUDGET]
    assert main(client) == 0
    capsys.readouterr()
    argv = ["run", "status", "--coordinator", server, run_id]
    assert main([*argv, "--beta-star", str(tmp_path / "beta.json")]) == 0
    out = capsys.readouterr().out
    final = [line for line in out.splitlines() if line.startswith(f"run {run_id}: final error")]
    assert len(final) == 1, out
    summary = httpx.get(f"{server}/v1/runs/{run_id}").json()
    beta_star = json.loads((tmp_path / "beta.json").read_text())["beta_star"]
    expected = get_model("gmmk", {"components": 2}).error(
        np.array(summary["beta"]), np.array(beta_star)
    )
    assert f"final error {expected:.4f} after 2 rounds" in final[0]


def test_run_status_without_runs_or_with_a_bad_beta_star(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "status", "--coordinator", server]) == 2
    assert capsys.readouterr().err.strip() == f"ldpem run: error: no run on {server} yet"
    httpx.post(
        f"{server}/v1/runs",
        json=run_request(hospitals=1, d=2),
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    (tmp_path / "b.json").write_text('{"beta_star": [1, 2, 3]}')
    argv = ["run", "status", "--coordinator", server, "--beta-star", str(tmp_path / "b.json")]
    assert main(argv) == 2
    assert "beta_star has 3 entries, the run d=2" in capsys.readouterr().err
