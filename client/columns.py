"""Which columns are the covariates and the response, and checks on them, shared by every
kind of source (CSV/.npy in ``data``, Parquet and SQL in ``sources``).

``check_id_columns`` refuses a suspected identifier column as a covariate: one whose values
are all distinct integers (a person_id, an encounter number, a row number). Taken as a
covariate it silently adds a dimension (d = 4 where the run has 3) or, worse, when the
dimension happens to match, it feeds the model a number that means nothing. A column the
operator named in ``--columns`` is taken as it is: the heuristic is a guess, the operator's
word is not.

Its own module, below ``ldpem.client.sources`` and ``ldpem.client.data``, so that both the
Parquet/SQL path (sources) and the CSV/.npy path (data) can call it without importing
each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.models import get_model

__all__ = [
    "ID_CHECK_MIN_ROWS",
    "RESPONSE_COLUMN",
    "check_id_columns",
    "parse_columns",
    "resolve_columns",
]

#: The response column when ``--target`` is not given.
RESPONSE_COLUMN = "y"

#: Below this many records, distinct integers are too likely by chance (ages of a dozen
#: patients) to call a column an identifier; a study that small is a trial anyway.
ID_CHECK_MIN_ROWS = 20


def check_id_columns(
    label: str,
    names: Sequence[str],
    table: NDArray[np.float64],
    columns: Sequence[str] | None,
) -> None:
    """UserError (one line) for the first covariate that looks like an identifier.

    ``names``: the names of ``table``'s columns, in order; ``table``: the covariates as
    read (n × len(names), NaN for a missing value); ``columns``: ``--columns`` as given
    (None when not given); a column named there is never refused. The message names the
    column only, never a value.
    """
    n = table.shape[0]
    if n < ID_CHECK_MIN_ROWS:
        return
    named = set(columns or ())
    for j, name in enumerate(names):
        if name in named:
            continue
        values = table[:, j]
        # NaN and infinity fail the integer test: a column with a missing value is no
        # identifier, and an infinite one is refused by the sources anyway.
        if not np.all(np.isfinite(values) & (np.floor(values) == values)):
            continue
        if np.unique(values).size != n:
            continue
        others = ",".join(other for other in names if other != name)
        example = f" (e.g. --columns {others})" if others else ""
        raise UserError(
            f"{label}, column {name!r}: all {n} values are distinct integers, like an "
            f"identifier, so it is not taken as a covariate; choose the covariates with "
            f"--columns{example}, naming {name} there if it is one"
        )


def parse_columns(text: str | None) -> tuple[str, ...] | None:
    """``--columns a,b,c`` as a tuple of names (None when not given)."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(","))
    if not names or any(not name for name in names):
        raise UserError(f"--columns must be comma-separated column names, got {text!r}")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"--columns names {duplicates[0]!r} twice")
    return names


def resolve_columns(
    label: str,
    available: Sequence[str],
    *,
    model: str,
    columns: Sequence[str] | None,
    target: str | None,
) -> tuple[list[int], int | None]:
    """Indices into ``available`` of the covariates and of the response (None for GMM).

    Defaults: the response is the column named ``y``; the covariates are all other columns.
    """
    spec = get_model(model)
    duplicates = sorted({name for name in available if list(available).count(name) > 1})
    if duplicates:
        raise UserError(f"{label}: duplicate column name {duplicates[0]!r}")

    def index(name: str, option: str) -> int:
        if name not in available:
            raise UserError(
                f"{label}: no column {name!r} ({option}); the columns are {list(available)}"
            )
        return list(available).index(name)

    response: int | None = None
    if spec.has_response:
        name = target if target is not None else RESPONSE_COLUMN
        if name not in available and target is None:
            raise UserError(
                f"{label}: model {model} needs a response column named {RESPONSE_COLUMN!r} "
                f"(or --target NAME), found columns {list(available)}"
            )
        response = index(name, "--target")
    elif target is not None:
        raise UserError(f"--target: model {model} has no response, got {target!r}")
    if columns is not None:
        covariates = [index(name, "--columns") for name in columns]
        if response is not None and response in covariates:
            raise UserError(
                f"{label}: column {available[response]!r} is both --target and in --columns"
            )
    else:
        covariates = [j for j in range(len(available)) if j != response]
    if not covariates:
        raise UserError(f"{label}: model {model} needs at least one covariate column")
    return covariates, response
