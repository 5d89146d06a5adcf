"""The health of each run as Prometheus gauges, read from the state file at each scrape:
progress, the open round's age, and how many hospitals are late or missing
(``ldpem.server.health``, the numbers the status page shows).

The only label is ``run``: a hospital label would multiply the series by the hospitals a
run enrols (thousands, for some), so the names stay on the status page. A run adds six
series (seven with secure aggregation), kept after it ends with their final values (a
finished run with missing rounds stays visible).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ldpem.server import queries
from ldpem.server.health import RunHealth
from ldpem.server.store import Store

__all__ = ["RUN_GAUGES", "RunHealthCollector"]

#: Name, help text and value (None: no sample) of each per-run gauge.
RUN_GAUGES: list[tuple[str, str, Callable[[RunHealth], float | None]]] = [
    ("ldpem_run_rounds", "Rounds the run was created with.", lambda h: h.rounds),
    ("ldpem_run_rounds_closed", "Rounds of the run closed so far.", lambda h: h.closed),
    (
        "ldpem_run_open_round_age_seconds",
        "Seconds since the run's open round opened (no sample once the run ended).",
        lambda h: h.open_age,
    ),
    (
        "ldpem_run_hospitals_late",
        "Enrolled hospitals late in the run's open round.",
        lambda h: len(h.late),
    ),
    (
        "ldpem_run_hospitals_missing",
        "Enrolled hospitals that missed at least one closed round of the run.",
        lambda h: len(h.missing),
    ),
    (
        "ldpem_run_holders_lost",
        "Secure aggregation: holders of the run lost at a step (waited for, did not answer) "
        "or left out of a survivor set, so far (no sample for other runs).",
        lambda h: len({loss.name for loss in h.lost}) if h.secagg else None,
    ),
    (
        "ldpem_run_degraded",
        "1 while a hospital is late in the run's open round, missed a closed one or was "
        "lost at a secure-aggregation step, else 0.",
        lambda h: float(h.degraded),
    ),
]

Samples = list[float | None]


class RunHealthCollector(Collector):
    """The gauges of RUN_GAUGES for every run in the state file, at each scrape."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        #: The samples of the runs that ended: final, so computed once (a scrape runs on
        #: the event loop, and an ended run may hold thousands of reports per round).
        self._ended: dict[str, Samples] = {}

    def collect(self) -> Iterable[Metric]:
        now = self.clock()
        runs: list[tuple[str, Samples]] = []
        for run in self.store.list_runs():
            samples = self._ended.get(run.id)
            if samples is None:
                health = queries.health(self.store, run, now)
                samples = [value(health) for _, _, value in RUN_GAUGES]
                if run.status != "running":
                    self._ended[run.id] = samples
            runs.append((run.id, samples))
        for i, (name, text, _) in enumerate(RUN_GAUGES):
            family = GaugeMetricFamily(name, text, labels=["run"])
            for run_id, samples in runs:
                sample = samples[i]
                if sample is not None:
                    family.add_metric([run_id], sample)
            yield family
