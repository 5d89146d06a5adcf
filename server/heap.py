"""The coordinator process's garbage collector, set for its heap (docs/PERFORMANCE.md, "The
coordinator's CPU at K = 1000, fourth pass").

CPython frees almost all of the coordinator's garbage by reference counting; the cyclic
collector only finds what refers to itself. Its default thresholds (700, 10, 10) run a
full collection every ~70,000 net container allocations, and each full collection walks
every tracked object: the ~130,000 the imports made (FastAPI, pydantic, numpy, scipy,
cryptography), which never die, plus an open secure-aggregation round's messages. At
K = 1000 a round allocates millions of containers (every holder's parsed JSON, messages,
answers), so it ran ~4 full collections a round: 0.7–1.5 s of the coordinator's CPU a
round in collections (measured with ``gc.callbacks``).

``tune_collector``, called once the app is built and before it serves: one collection,
then ``gc.freeze()`` moves every object alive at that point into a generation that is
never walked again, and larger thresholds space the collections out. Cyclic garbage then
waits longer to be freed (up to one full collection every ``FULL_EVERY`` container
allocations); the K = 1000 runs' peak RSS was 500–506 MiB with this and without it.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_EVERY", "THRESHOLDS", "tune_collector"]

#: gc.set_threshold: a young collection every 20,000 net container allocations, a middle
#: one every 20 young ones, a full one every 20 middle ones.
THRESHOLDS = (20_000, 20, 20)
#: Net container allocations between two full collections at ``THRESHOLDS``.
FULL_EVERY = THRESHOLDS[0] * THRESHOLDS[1] * THRESHOLDS[2]


def tune_collector() -> None:
    """Collect once, freeze what survives (the imports, the app) and space collections out
    (``THRESHOLDS``). For a process that serves; not for a test process or a library."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
