from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpem.client.data import load_records
from ldpem.common.core.errors import UserError


def write(tmp_path: Path, text: str, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_gmm_csv_every_column_is_a_coordinate(tmp_path: Path) -> None:
    records = load_records(write(tmp_path, "a,b,c\n1,2,3\n4,5,6\n"), "gmm")
    np.testing.assert_array_equal(records.x, [[1, 2, 3], [4, 5, 6]])
    assert records.y is None


def test_regression_csv_takes_y_column_anywhere(tmp_path: Path) -> None:
    records = load_records(write(tmp_path, "x1,y,x2\n1,10,2\n3,20,4\n"), "mrm")
    np.testing.assert_array_equal(records.x, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(records.y, [10, 20])


def test_rmc_empty_cells_are_missing_covariates(tmp_path: Path) -> None:
    records = load_records(write(tmp_path, "x1,x2,y\n1,,5\n,2,6\n"), "rmc")
    assert np.isnan(records.x[0, 1]) and np.isnan(records.x[1, 0])
    assert records.x[0, 0] == 1 and records.x[1, 1] == 2


def test_npy_last_column_is_response(tmp_path: Path) -> None:
    path = tmp_path / "data.npy"
    np.save(path, np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    records = load_records(path, "mrm")
    np.testing.assert_array_equal(records.y, [3, 6])
    assert records.d == 2


@pytest.mark.parametrize(
    ("text", "model", "message"),
    [
        ("", "gmm", "empty file"),
        ("a,b\n", "gmm", "no data rows"),
        ("a,b\n1,2\n3\n", "gmm", "line 3: expected 2 fields, got 1"),
        ("a,b\n1,2\n3,abc\n", "gmm", "line 3, column 'b': not a number"),
        ("a,b\n1,\n", "gmm", "line 2, column 'b': missing value, but model gmm allows none"),
        ("x1,x2\n1,2\n", "mrm", "needs a response column named 'y'"),
        ("x1,y\n1,\n", "rmc", "line 2, column 'y': the response may not be missing"),
        ("a,b\n1,inf\n", "gmm", "line 2, column 'b': infinite value"),
        ("a,a\n1,2\n", "gmm", "duplicate column name 'a'"),
    ],
)
def test_bad_files_name_file_line_and_column(
    tmp_path: Path, text: str, model: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UserError) as caught:
        load_records(path, model)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        load_records(tmp_path / "nope.csv", "gmm")


def test_unknown_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model must be one of"):
        load_records(write(tmp_path, "a\n1\n"), "kmeans")
