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


#: Text a record holds in a column the study does not use (a name): it must never show.
NAME = "Jane Q. Patient"


def test_a_text_column_left_out_of_columns_is_not_parsed(tmp_path: Path) -> None:
    path = write(tmp_path, f"name,x1,x2,y\n{NAME},1,2,10\n{NAME},3,,20\nnot a number,5,6,30\n")
    records = load_records(path, "rmc", columns=["x2", "x1"], target="y")
    np.testing.assert_array_equal(records.x, [[2, 1], [np.nan, 3], [6, 5]])
    np.testing.assert_array_equal(records.y, [10, 20, 30])
    gmm = load_records(path, "gmm", columns=["x1"])
    np.testing.assert_array_equal(gmm.x, [[1], [3], [5]])


def test_without_columns_a_text_column_is_one_line_without_the_value(tmp_path: Path) -> None:
    path = write(tmp_path, f"x1,name,y\n1,2,10\n3,{NAME},20\n")
    with pytest.raises(UserError) as caught:
        load_records(path, "mrm")
    assert str(caught.value) == f"{path} line 3, column 'name': not a number"


def test_a_chosen_text_cell_names_its_own_column_and_line(tmp_path: Path) -> None:
    # The text sits in the third field but is the first chosen column: the message must
    # name it by the header, not by its place among the chosen ones.
    path = write(tmp_path, f"name,x1,x2,y\nA,1,2,10\nB,3,{NAME},20\n")
    with pytest.raises(UserError) as caught:
        load_records(path, "mrm", columns=["x2"])
    assert str(caught.value) == f"{path} line 3, column 'x2': not a number"


def test_a_ragged_row_is_refused_even_in_a_column_left_out(tmp_path: Path) -> None:
    path = write(tmp_path, "name,x1,y\nA,1,10\nB,3,20,extra\n")
    with pytest.raises(UserError) as caught:
        load_records(path, "mrm", columns=["x1"])
    assert str(caught.value) == f"{path} line 3: expected 3 fields, got 4"
