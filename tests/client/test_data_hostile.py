"""Hostile data files: every one gives a clear one-line UserError naming the file (or a
correct load), never another exception; and 10⁷ rows load (and run a short round) fine."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpem.client.agent import Agent
from ldpem.client.config import AgentConfig
from ldpem.client.data import load_records
from ldpem.common.core.errors import UserError
from ldpem.server.app import create_app
from tests.fedkit import TOKENS, admin_headers, live_server, run_request
from tests.fedkit import settings as app_settings

CSV_CASES: dict[str, tuple[str, str]] = {
    # name: (contents, model)
    "empty": ("", "gmm"),
    "blank lines": ("\n\n\n", "gmm"),
    "header only": ("a,b\n", "gmm"),
    "empty column name": ("a,,b\n1,2,3\n", "gmm"),
    "duplicate column": ("a,a\n1,2\n", "gmm"),
    "no y column": ("x1,x2\n1,2\n", "mrm"),
    "only y": ("y\n1\n", "mrm"),
    "text in numeric column": ("a,b\n1,2\n3,hello\n", "gmm"),
    "text in y": ("x,y\n1,abc\n", "mrm"),
    "nan in gmm": ("a,b\n1,nan\n", "gmm"),
    "empty cell in gmm": ("a,b\n1,\n", "gmm"),
    "missing response": ("x,y\n1,\n", "rmc"),
    "missing covariate mrm": ("x,y\n,1\n", "mrm"),
    "infinity": ("a,b\n1,inf\n", "gmm"),
    "overflowing literal": ("a,b\n1,1e999\n", "gmm"),
    "ragged row": ("a,b\n1,2\n3\n", "gmm"),
    "too many fields": ("a,b\n1,2,3\n", "gmm"),
    "semicolons": ("a;b\n1;2\n", "mrm"),
    "hex": ("a\n0x10\n", "gmm"),
    "unterminated quote": ('a,b\n"1,2\n', "gmm"),
}
BINARY_CASES: dict[str, bytes] = {
    "latin-1": "a,b\n1,é\n".encode("latin-1"),
    "binary garbage": bytes(range(256)) * 4,
    "nul bytes": b"a,b\n1,\x002\n",
}


def _expect_user_error(path: Path, model: str) -> str:
    with pytest.raises(UserError) as caught:
        load_records(path, model)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    return message


@pytest.mark.parametrize("name", sorted(CSV_CASES))
def test_hostile_csv(tmp_path: Path, name: str) -> None:
    text, model = CSV_CASES[name]
    path = tmp_path / "data.csv"
    path.write_text(text, encoding="utf-8")
    _expect_user_error(path, model)


@pytest.mark.parametrize("name", sorted(BINARY_CASES))
def test_hostile_bytes(tmp_path: Path, name: str) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(BINARY_CASES[name])
    _expect_user_error(path, "gmm")


NPY_CASES: dict[str, np.ndarray] = {
    "1-D": np.arange(5.0),
    "3-D": np.zeros((2, 2, 2)),
    "no rows": np.zeros((0, 3)),
    "no columns": np.zeros((3, 0)),
    "strings": np.array([["a", "b"]]),
    "bool": np.array([[True, False]]),
    "nan": np.array([[1.0, np.nan]]),
    "inf": np.array([[1.0, -np.inf]]),
    "complex": np.array([[1 + 2j, 3 + 0j]]),
}


@pytest.mark.parametrize("name", sorted(NPY_CASES))
def test_hostile_npy(tmp_path: Path, name: str) -> None:
    path = tmp_path / "data.npy"
    np.save(path, NPY_CASES[name])
    _expect_user_error(path, "gmm")


def test_npy_with_pickled_objects_is_refused_not_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "data.npy"
    np.save(path, np.array([[1.0, {"evil": 1}]], dtype=object), allow_pickle=True)
    _expect_user_error(path, "gmm")


def test_truncated_npy(tmp_path: Path) -> None:
    path = tmp_path / "data.npy"
    np.save(path, np.ones((100, 3)))
    path.write_bytes(path.read_bytes()[:200])
    _expect_user_error(path, "gmm")


def test_directory_and_missing_file(tmp_path: Path) -> None:
    _expect_user_error(tmp_path, "gmm")
    _expect_user_error(tmp_path / "absent.csv", "gmm")


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("0123456789.,-+eE naNinfy\n\r\"'x;\t")), max_size=200
    ),
    model=st.sampled_from(["gmm", "mrm", "rmc"]),
)
def test_random_csv_text_loads_or_fails_with_one_line(
    tmp_path: Path, text: str, model: str
) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_text(text, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            records = load_records(path, model)
        except UserError as error:
            assert "\n" not in str(error) and str(path) in str(error)
            return
    assert records.n >= 1
    assert not np.isinf(records.x).any()
    if model != "rmc":
        assert np.isfinite(records.x).all()
    if records.y is not None:
        assert np.isfinite(records.y).all()


@pytest.mark.slow
def test_ten_million_rows(tmp_path: Path) -> None:
    n = 10_000_000
    rng = np.random.default_rng(0)
    data = rng.standard_normal((n, 2))
    path = tmp_path / "big.npy"
    np.save(path, data)
    records = load_records(path, "gmm")
    assert records.x.shape == (n, 2) and records.y is None
    np.testing.assert_array_equal(records.x[-3:], data[-3:])
    del records
    # A short federated run on it: one agent, 2 rounds of 5·10⁶ records each.
    with live_server(create_app(app_settings(tmp_path))) as url:
        request = run_request(hospitals=1, records=n, d=2, rounds=2)
        created = httpx.post(f"{url}/v1/runs", json=request, headers=admin_headers(), timeout=60)
        assert created.status_code == 201, created.text
        agent = Agent(
            AgentConfig(
                coordinator=url,
                token=TOKENS[0],
                data=path,
                state=tmp_path / "agent",
                epsilon=100.0,
                delta=0.5,
                model="gmm",
                seed=1,
                wait=5.0,
                give_up=120.0,
            )
        )
        try:
            assert agent.run() == 0
        finally:
            agent.close()
        run_id = created.json()["run_id"]
        rounds = httpx.get(f"{url}/v1/runs/{run_id}/rounds", timeout=30).json()
        assert [r["count"] for r in rounds] == [n // 2, n // 2]
        beta = httpx.get(f"{url}/v1/runs/{run_id}", timeout=30).json()["beta"]
        assert np.all(np.isfinite(beta))
    # A NaN in the very last row is found and named.
    bad = data.copy()
    bad[n - 1, 1] = np.nan
    np.save(path, bad)
    message = _expect_user_error(path, "gmm")
    assert f"row {n}," in message
