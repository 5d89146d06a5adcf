"""Load and validate a data holder's records (CSV or .npy), once, before anything runs.

(Parquet files and SQL databases: ``ldpem.client.sources``, which calls this for CSV/.npy.)

CSV: a header row, then one record per line, comma-separated.
  * GMM: every column is a coordinate of the observation y.
  * MRM, RMC: the column named ``y`` is the response; all other columns are covariates x.
  ``columns``/``target`` (``--columns``/``--target``) choose other covariates and response;
  the columns they leave out are not parsed at all, so they may hold text (a name, a
  species). RMC only: an empty cell (or ``nan``/``NA``) is a missing covariate.
.npy: a 2-D float array; for MRM/RMC the last column is the response y.

Every problem is reported as one line naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ldpem.client.columns import RESPONSE_COLUMN, check_id_columns, resolve_columns
from ldpem.common.core.errors import UserError
from ldpem.common.models import Records, get_model

__all__ = ["load_records"]

_MISSING_TOKENS = frozenset({"", "nan", "NaN", "NA", "na", "N/A"})
#: ``_NUMBER_TEXT(cell, cell)``: "nan" for a missing-value token, else the cell itself.
_NUMBER_TEXT: Callable[[str, str], str] = dict.fromkeys(_MISSING_TOKENS, "nan").get
#: Rows parsed at a time: bounds the parser's extra memory to one block of cells.
BLOCK_ROWS = 1 << 14

if TYPE_CHECKING:
    from _csv import Reader as _csv_reader


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

    def chosen(names: list[str]) -> tuple[list[int], int]:
        """The indices into ``names`` of the columns read, covariates then response, and
        how many are covariates."""
        covariates, response = resolve_columns(
            str(path), names, model=spec.name, columns=columns, target=target
        )
        return [*covariates, *([] if response is None else [response])], len(covariates)

    if path.suffix.lower() == ".npy":
        table, names = _read_npy(path, has_response=spec.has_response)
        used, covariates = chosen(names)
        if used != list(range(len(names))):
            table = table[:, used]
            names = [names[j] for j in used]

        def where(row: int) -> str:
            return f"{path} row {row + 1}"
    else:
        table, names, lines, covariates = _read_csv(path, chosen)

        def where(row: int) -> str:
            return f"{path} line {int(lines[row])}"

    return _to_records(where, str(path), table, names, covariates, model=spec.name, columns=columns)


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


def _read_csv(
    path: Path, chosen: Callable[[list[str]], tuple[list[int], int]]
) -> tuple[NDArray[np.float64], list[str], NDArray[np.int64], int]:
    """The chosen columns' cells as float64 (n × len(used), a missing cell as NaN), their
    names, each row's line and the number of covariates among them.

    ``chosen(header)``: the indices into the header of the columns the model reads,
    covariates then response, and how many are covariates (``resolve_columns``). The other
    columns are split off each line by the CSV reader and never parsed.

    Every file takes the same path, streamed ``BLOCK_ROWS`` rows at a time: each chosen cell
    is stripped, looked up among the missing-value tokens (a missing one becomes the text
    ``nan``) and converted by ``float``. So the work per cell does not depend on whether it
    holds a number, a blank or ``NA``, and no file is read twice (docs/PRIVACY.md, "Timing").
    Text that is not a number fails the same conversion and stops the load, which ends the
    agent before it contacts anyone; the message names the line and column, never the cell.
    """
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None or not any(cell.strip() for cell in header):
                raise UserError(f"{path}: empty file, expected a header row with column names")
            columns = _header(path, header)
            used, covariates = chosen(columns)
            blocks = list(_csv_blocks(path, reader, columns, used))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    except csv.Error:
        raise UserError(f"{path}: not a readable CSV file (malformed quoting or a NUL)") from None
    if not blocks:
        raise UserError(f"{path}: no data rows after the header")
    table = np.concatenate([values for values, _ in blocks])
    lines = np.concatenate([numbers for _, numbers in blocks])
    return table, [columns[j] for j in used], lines, covariates


def _header(path: Path, header: list[str]) -> list[str]:
    columns = [cell.strip() for cell in header]
    for number, name in enumerate(columns, start=1):
        if not name:
            raise UserError(f"{path} line 1: column {number} has no name")
    duplicates = {name for name in columns if columns.count(name) > 1}
    if duplicates:
        raise UserError(f"{path} line 1: duplicate column name {sorted(duplicates)[0]!r}")
    return columns


def _chosen_cells(rows: list[list[str]], used: list[int], width: int) -> Iterable[str]:
    """The cells of ``used`` (indices into rows of ``width`` fields), row by row."""
    if used == list(range(width)):
        return itertools.chain.from_iterable(rows)
    if len(used) == 1:
        # itemgetter of one index gives the cell itself, not a 1-tuple.
        return map(itemgetter(used[0]), rows)
    return itertools.chain.from_iterable(map(itemgetter(*used), rows))


def _csv_blocks(
    path: Path, reader: _csv_reader, columns: list[str], used: list[int]
) -> Iterator[tuple[NDArray[np.float64], NDArray[np.int64]]]:
    """Blocks of (rows × len(used) values of the columns ``used``, each row's line number).
    An empty line is skipped (for more than one column, also a line of blanks); a ragged
    row is an error, whichever of its fields are used."""
    width = len(columns)
    while True:
        rows: list[list[str]] = []
        lines: list[int] = []
        for row in itertools.islice(reader, BLOCK_ROWS):
            if not row or (width > 1 and len(row) == 1 and not row[0].strip()):
                continue
            rows.append(row)
            lines.append(reader.line_num)
        if not rows:
            return
        for row, line in zip(rows, lines, strict=True):
            if len(row) != width:
                raise UserError(f"{path} line {line}: expected {width} fields, got {len(row)}")
        cells = list(map(str.strip, _chosen_cells(rows, used, width)))
        try:
            values = np.fromiter(
                map(float, map(_NUMBER_TEXT, cells, cells)), dtype=np.float64, count=len(cells)
            )
        except ValueError:
            raise _not_a_number(path, rows, lines, columns, used) from None
        yield values.reshape(len(rows), len(used)), np.asarray(lines, dtype=np.int64)


def _not_a_number(
    path: Path, rows: list[list[str]], lines: list[int], columns: list[str], used: list[int]
) -> UserError:
    """The error for the first chosen cell of the block that is neither a number nor
    missing. The load stops here, before any contact, so this search's time is not
    observable."""
    for row, line in zip(rows, lines, strict=True):
        for j in used:
            text = row[j].strip()
            try:
                float(_NUMBER_TEXT(text, text))
            except ValueError:
                return UserError(f"{path} line {line}, column {columns[j]!r}: not a number")
    return UserError(f"{path}: not a number in some cell")  # unreachable: float failed above


def _first_bad(mask: NDArray[np.bool_]) -> tuple[int, int]:
    row, column = np.argwhere(mask)[0]
    return int(row), int(column)


def _to_records(
    where_row: Callable[[int], str],
    label: str,
    table: NDArray[np.float64],
    names: list[str],
    covariates: int,
    *,
    model: str,
    columns: Sequence[str] | None,
) -> Records:
    """The records of ``table`` (n × len(names)): its first ``covariates`` columns are the
    covariates, a further one the response; ``columns`` is ``--columns`` as given."""
    spec = get_model(model)

    def where(row: int, column: int) -> str:
        return f"{where_row(row)}, column {names[column]!r}"

    infinite = np.isinf(table)
    if infinite.any():
        row, column = _first_bad(infinite)
        raise UserError(f"{where(row, column)}: infinite value")

    if table.shape[1] > covariates:
        missing_y = np.isnan(table[:, covariates])
        if missing_y.any():
            row = int(np.argmax(missing_y))
            raise UserError(f"{where(row, covariates)}: the response may not be missing")
        x, y = table[:, :covariates], table[:, covariates].copy()
    else:
        x, y = table, None

    check_id_columns(label, names[:covariates], x, columns)
    missing_x = np.isnan(x)
    if missing_x.any() and not spec.allows_missing:
        row, column = _first_bad(missing_x)
        raise UserError(
            f"{where(row, column)}: missing value, but model {model} allows none "
            "(only rmc accepts missing covariates)"
        )
    return Records(np.ascontiguousarray(x), y)
