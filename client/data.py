"""Load and validate a data holder's records (CSV or .npy), once, before anything runs.

(Parquet files and SQL databases: ``ldpem.client.sources``, which calls this for CSV/.npy.)

CSV: a header row, then one record per line, comma-separated.
  * GMM: every column is a coordinate of the observation y.
  * MRM, RMC: the column named ``y`` is the response; all other columns are covariates x.
  ``columns``/``target`` (``--columns``/``--target``) choose other covariates and response.
    RMC only: an empty cell (or ``nan``/``NA``) is a missing covariate.
.npy: a 2-D float array; for MRM/RMC the last column is the response y.

Every problem is reported as one line naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ldpem.common.errors import UserError
from ldpem.common.models import Records, get_model

__all__ = ["RESPONSE_COLUMN", "load_records"]

RESPONSE_COLUMN = "y"
_MISSING_TOKENS = frozenset({"", "nan", "NaN", "NA", "na", "N/A"})


def load_records(
    path: str | Path,
    model: str,
    *,
    columns: Sequence[str] | None = None,
    target: str | None = None,
) -> Records:
    """The records in ``path`` for ``model`` ("gmm", "mrm" or "rmc"), validated.

    ``columns``: the covariate columns (GMM: the coordinates), default all but the response;
    ``target``: the response column, default ``y``.

    Raises UserError with a one-line message naming the file, line and column of the first
    problem: unreadable file, no data rows, ragged rows, text in a numeric column,
    infinite values, missing values where the model allows none, no ``y`` column.
    """
    spec = get_model(model)
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    if path.suffix.lower() == ".npy":
        table, names = _read_npy(path, has_response=spec.has_response)
    else:
        table, names = _read_csv(path)
    return _to_records(path, table, names, model=spec.name, columns=columns, target=target)


def _read_npy(path: Path, *, has_response: bool) -> tuple[NDArray[np.float64], list[str]]:
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise UserError(f"{path}: not a readable .npy array ({error})") from None
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise UserError(f"{path}: expected a non-empty 2-D array, got shape {array.shape}")
    # Integers or floats only: a complex array would silently lose its imaginary part.
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise UserError(f"{path}: expected a real numeric array, got dtype {array.dtype}")
    width = array.shape[1]
    columns = [f"x{j}" for j in range(width)]
    if has_response:
        columns[-1] = RESPONSE_COLUMN
    return np.asarray(array, dtype=np.float64), columns


def _read_csv(path: Path) -> tuple[NDArray[np.float64], list[str]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), None)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    if header is None or not any(cell.strip() for cell in header):
        raise UserError(f"{path}: empty file, expected a header row with column names")
    columns = [cell.strip() for cell in header]
    for number, name in enumerate(columns, start=1):
        if not name:
            raise UserError(f"{path} line 1: column {number} has no name")
    duplicates = {name for name in columns if columns.count(name) > 1}
    if duplicates:
        raise UserError(f"{path} line 1: duplicate column name {sorted(duplicates)[0]!r}")
    try:
        # numpy's C parser handles the common case (no missing cells) quickly; anything it
        # rejects (or a file with no rows) goes to the row-by-row parser for a precise message.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(
                path,
                delimiter=",",
                skiprows=1,
                dtype=np.float64,
                ndmin=2,
                comments=None,
                encoding="utf-8",
            )
        if table.shape[0] and table.shape[1] == len(columns):
            return table, columns
    except ValueError:
        pass
    return _parse_csv_slowly(path, columns), columns


def _parse_csv_slowly(path: Path, columns: list[str]) -> NDArray[np.float64]:
    """Row-by-row parse that accepts empty cells (as NaN) and pinpoints the first error."""
    width = len(columns)
    rows: list[list[float]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        next(reader)
        for line, row in enumerate(reader, start=2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != width:
                raise UserError(f"{path} line {line}: expected {width} fields, got {len(row)}")
            values = []
            for name, cell in zip(columns, row, strict=True):
                text = cell.strip()
                if text in _MISSING_TOKENS:
                    values.append(math.nan)
                    continue
                try:
                    values.append(float(text))
                except ValueError:
                    raise UserError(
                        f"{path} line {line}, column {name!r}: not a number: {cell!r}"
                    ) from None
            rows.append(values)
    if not rows:
        raise UserError(f"{path}: no data rows after the header")
    return np.array(rows, dtype=np.float64)


def _first_bad(mask: NDArray[np.bool_]) -> tuple[int, int]:
    row, column = np.argwhere(mask)[0]
    return int(row), int(column)


def _to_records(
    path: Path,
    table: NDArray[np.float64],
    names: list[str],
    *,
    model: str,
    columns: Sequence[str] | None,
    target: str | None,
) -> Records:
    from ldpem.client.sources import resolve_columns

    spec = get_model(model)

    def where(row: int, column: int) -> str:
        # CSV line numbers count the header as line 1; for .npy this is the row index + 2.
        return f"{path} line {row + 2}, column {names[column]!r}"

    x_index, response_index = resolve_columns(
        str(path), names, model=model, columns=columns, target=target
    )
    used = [*x_index, *([] if response_index is None else [response_index])]
    if len(used) < len(names):
        table = table[:, used]
        names = [names[j] for j in used]
        x_index = list(range(len(x_index)))
        response_index = None if response_index is None else len(x_index)

    infinite = np.isinf(table)
    if infinite.any():
        row, column = _first_bad(infinite)
        raise UserError(f"{where(row, column)}: infinite value {float(table[row, column])!r}")

    if response_index is not None:
        missing_y = np.isnan(table[:, response_index])
        if missing_y.any():
            row = int(np.argmax(missing_y))
            raise UserError(f"{where(row, response_index)}: the response may not be missing")
        x, y = table[:, x_index], table[:, response_index].copy()
    elif x_index == list(range(table.shape[1])):
        x, y = table, None
    else:
        x, y = table[:, x_index], None

    missing_x = np.isnan(x)
    if missing_x.any() and not spec.allows_missing:
        row, column = _first_bad(missing_x)
        raise UserError(
            f"{where(row, x_index[column])}: missing value, but model {model} allows none "
            "(only rmc accepts missing covariates)"
        )
    return Records(np.ascontiguousarray(x), y)
