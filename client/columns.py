"""Checks on the covariate columns a source assembled, shared by every kind of source.

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

from ldpem.common.errors import UserError

__all__ = ["ID_CHECK_MIN_ROWS", "check_id_columns"]

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
