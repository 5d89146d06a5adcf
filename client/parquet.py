"""Parquet record sources (pyarrow, extra ``ldpem[parquet]``): read row group by row group,
in batches of ``Source.chunk_rows``, only the chosen columns; a null is a missing value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ldpem.client.columns import resolve_columns
from ldpem.client.sql import Block, Source, first_line, missing_extra
from ldpem.common.core.errors import UserError

__all__ = ["read_parquet"]


def read_parquet(path: Path, source: Source, *, model: str) -> tuple[list[str], Iterator[Block]]:
    """The chosen columns' names (covariates, then the response) and their batches."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise missing_extra("reading Parquet", "pyarrow", "parquet") from None
    label = str(path)
    try:
        reader = pq.ParquetFile(path)
        schema = reader.schema_arrow
    except (pa.ArrowException, OSError) as error:
        raise UserError(
            f"{label}: not a readable Parquet file ({first_line(error, None)})"
        ) from None
    covariates, response = resolve_columns(
        label, schema.names, model=model, columns=source.columns, target=source.target
    )
    names = [schema.names[j] for j in covariates] + (
        [] if response is None else [schema.names[response]]
    )
    for name in names:
        field = schema.field(name)
        kind = field.type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
        ):
            raise UserError(f"{label}, column {field.name!r}: not a number column (type {kind})")

    def blocks() -> Iterator[Block]:
        first = 1
        try:
            for batch in reader.iter_batches(batch_size=source.chunk_rows, columns=names):
                block = np.empty((batch.num_rows, len(names)), dtype=np.float64)
                for j, column in enumerate(batch.columns):
                    # Nulls become NaN: a missing value, as an empty CSV cell.
                    # safe=False: an integer beyond 2**53 rounds to the nearest double,
                    # as it does from CSV and SQL; the safe cast's error would quote it.
                    floats = pc.cast(column, pa.float64(), safe=False)
                    block[:, j] = floats.to_numpy(zero_copy_only=False)
                yield block
                first += batch.num_rows
        except (pa.ArrowException, OSError) as error:
            raise UserError(
                f"{label}: reading failed after row {first - 1}: {first_line(error, None)}"
            ) from None
        finally:
            reader.close()

    return names, blocks()
