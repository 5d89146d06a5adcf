"""One simulated seed's records (``ldpem.common.planning.fastsim``): kept, or drawn as read.

Hospital k's records are drawn with the model's own ``sample_records`` from a generator of
its own, in blocks of ``CHUNK`` values (rows = CHUNK // d), block after block: that
sequence is the hospital's records, whatever reads them. A round of a study takes the next
rows of each hospital (``Reader.chunks``), as the schedule deals them.

When several studies run on the seed's records (the plan's mechanisms, the schedule
search's settings) and they fit in ``KEEP_LIMIT`` values, they are drawn once and kept, and
every study reads the same arrays. Otherwise (one study on them: a forecast of one
mechanism, a bootstrap draw; or a very large run) each study's ``Reader`` draws the same
blocks as it reads them, holding one block per hospital: the same records, in the memory
of one chunk, each block still in the cache when its gradients are taken (a study of
2·10⁵ records ~3–4% faster than reading kept ones back from memory).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.typing import NDArray

from ldpem.common.models import Model
from ldpem.common.models.base import Draw, Records
from ldpem.common.planning.holder_sum import CHUNK

__all__ = ["KEEP_LIMIT", "Reader", "SeedRecords"]

FloatArray = NDArray[np.float64]

#: Values (records × d) of a seed up to which its records are drawn once and kept
#: (2²⁴ values: 128 MiB).
KEEP_LIMIT = 1 << 24


class SeedRecords:
    """The records of one seed's hospitals of ``sizes``, drawn at β* = ``star`` with one
    generator per hospital (``generators``, not used after): kept when ``keep`` (several
    studies will read them) and they fit ``KEEP_LIMIT``, else drawn by each ``Reader``."""

    def __init__(
        self,
        model: Model,
        generators: Sequence[np.random.Generator],
        sizes: Sequence[int],
        *,
        star: FloatArray,
        sigma: float,
        missing: float,
        keep: bool = True,
    ) -> None:
        self.model = model
        self.sizes = tuple(sizes)
        self.star, self.sigma, self.missing = star, sigma, missing
        self.rows = max(1, CHUNK // star.size)
        self._generators = tuple(copy.deepcopy(g) for g in generators)
        self.kept: tuple[tuple[Records, ...], ...] | None = None
        if keep and sum(self.sizes) * star.size <= KEEP_LIMIT:
            self.kept = tuple(
                tuple(self._blocks(k, copy.deepcopy(self._generators[k])))
                for k in range(len(self.sizes))
            )

    def _blocks(self, k: int, rng: np.random.Generator) -> Iterator[Records]:
        """Hospital k's blocks, in order, drawn from ``rng`` (a copy of its generator)."""
        for start in range(0, self.sizes[k], self.rows):
            count = min(self.rows, self.sizes[k] - start)
            draw = Draw(
                n=count, beta_star=self.star, sigma=self.sigma, missing=self.missing, rng=rng
            )
            yield self.model.sample_records(draw)

    def reader(self) -> Reader:
        """A reader of these records for one study run."""
        return Reader(self)


class Reader:
    """One study's view of a ``SeedRecords``: rows in increasing order per hospital."""

    def __init__(self, records: SeedRecords) -> None:
        self._records = records
        self._streams = (
            None
            if records.kept is not None
            else [records._blocks(k, copy.deepcopy(g)) for k, g in enumerate(records._generators)]
        )
        self._current: list[tuple[int, Records | None]] = [(-1, None)] * len(records.sizes)

    def _block(self, k: int, index: int) -> Records:
        if self._records.kept is not None:
            return self._records.kept[k][index]
        assert self._streams is not None
        at, block = self._current[k]
        if index < at:
            raise ValueError(f"hospital {k}'s rows are read in order, got block {index} after {at}")
        while at < index:
            block = next(self._streams[k])
            at += 1
        self._current[k] = (at, block)
        assert block is not None
        return block

    def chunks(self, k: int, start: int, stop: int) -> Iterator[Records]:
        """Hospital k's rows [start, stop), as pieces of its blocks."""
        rows = self._records.rows
        for index in range(start // rows, (stop - 1) // rows + 1 if stop > start else 0):
            first = index * rows
            low, high = max(start, first) - first, min(stop, first + rows) - first
            yield self._block(k, index).take(slice(low, high))
