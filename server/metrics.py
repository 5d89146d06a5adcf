"""Prometheus metrics of the coordinator (``GET /metrics``), one registry per app.

A per-app ``CollectorRegistry`` (never the global one) so that several apps in one process
(the tests) count separately. What is observed where:

* reports accepted, duplicate and refused (by reason), secure-aggregation messages by step
  and outcome, and the open long-polls: by ``MetricsMiddleware``, an ASGI middleware
  outside all but the request clock (which only times requests for the access log), so a
  refusal by the body size limit, the token check or the request validation is counted
  like one by the coordinator;
* commit latency and group-commit batch size: by ``MeteredStore``, the store whose
  ``transaction`` times the COMMIT (the fsync) and counts the savepoints in it, one per
  report of a group commit (``Coordinator._flush``);
* runs by status and round durations: read from the state file at each scrape
  (``StateCollector``), so they include what happened before a restart;
* the process (CPU, memory, open files, start time), the Python runtime and its garbage
  collector: prometheus_client's own collectors, registered on this registry; the version
  as ``ldpem_build_info{version="…"} 1``.

No ``_created`` series: prometheus_client adds one per counter and histogram, written in
the text format as a gauge family of its own with the same HELP text again, and Prometheus
does not read it from that format. Its switch, ``disable_created_metrics()``, is a global of
the library (every registry of the process, the embedding program's too), so this
registry leaves the samples out of its own scrapes instead (``_Registry``).

Each run's health (progress, open round's age, late and missing hospitals) is read from
the state file at each scrape too, by ``ldpem.server.runmetrics.RunHealthCollector``.

docs/FEDERATED.md ("Metrics") lists every metric.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ldpem import __version__
from ldpem.common.secagg.steps import HOLDER_STEPS as SECAGG_STEPS
from ldpem.common.wire import API_PREFIX
from ldpem.server.runmetrics import RunHealthCollector
from ldpem.server.store import Store

__all__ = [
    "REFUSAL_REASONS",
    "SECAGG_OUTCOMES",
    "MeteredStore",
    "Metrics",
    "MetricsMiddleware",
    "refusal_reason",
    "secagg_outcome",
]

#: Values of the ``cause`` label of ldpem_secagg_lost_rounds_total (``SecAggRounds._lose``).
LOST_CAUSES = ("faulty", "unattributable", "short")
#: Values of the ``reason`` label of ldpem_reports_refused_total.
REFUSAL_REASONS = (
    "unauthenticated",
    "wrong_hospital",
    "unknown_run",
    "round_not_open",
    "conflicting_report",
    "out_of_range",
    "invalid",
    "too_large",
    "error",
)
#: Values of the ``outcome`` label of ldpem_secagg_messages_total (``secagg_outcome``).
SECAGG_OUTCOMES = ("accepted", "refused", "out_of_step", "error")
#: The ``step`` label of a message posted to a path with no step of the protocol (refused).
OTHER_STEP = "other"
#: Seconds: a round lasts from well under a second (a demo) to its deadline (default 600 s).
ROUND_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400)
#: Seconds: an fsync of the WAL, from a RAM disk to a busy spinning disk.
COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Reports per group commit.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
RUN_STATES = ("running", "paused", "finished", "failed", "cancelled")

_ROUND_PATH = re.compile(rf"{re.escape(API_PREFIX)}/runs/[^/]+/round")
_REPORT_PATH = re.compile(rf"{re.escape(API_PREFIX)}/runs/[^/]+/rounds/[^/]+/reports")
_SECAGG_PATH = re.compile(rf"{re.escape(API_PREFIX)}/runs/[^/]+/rounds/[^/]+/secagg/([^/]+)")


#: Suffix of the sample prometheus_client adds to a counter, histogram or summary with the
#: time it was created.
_CREATED = "_created"

_Metric = TypeVar("_Metric", Counter, Gauge, Histogram, Info)


class _Registry(CollectorRegistry):
    """A registry whose ``collect`` (what ``generate_latest`` writes) has no ``_created``
    samples, without the library-wide ``disable_created_metrics()``."""

    def collect(self) -> Iterable[Metric]:
        for metric in super().collect():
            created = metric.name + _CREATED
            # Each collect builds new Metric objects: filtering in place changes no state.
            metric.samples = [s for s in metric.samples if s.name != created]
            yield metric


class Metrics:
    """The registry of one app and the metrics the middleware and the store update."""

    def __init__(self) -> None:
        self.registry: CollectorRegistry = _Registry()
        # What the library's default registry has, but on this one: two apps in one
        # process (the tests) each expose them, and nothing global is registered.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)  # registers nothing where gc has no statistics
        build = self._metric(Info, "ldpem_build", "The ldpem version this coordinator runs.")
        build.info({"version": __version__})
        self.reports_accepted = self._metric(
            Counter,
            "ldpem_reports_accepted",
            "Reports accepted and committed (a retried duplicate is not counted again).",
        )
        self.reports_duplicate = self._metric(
            Counter,
            "ldpem_reports_duplicate",
            "Reports answered as an idempotent duplicate of one accepted before.",
        )
        self.reports_refused = self._metric(
            Counter, "ldpem_reports_refused", "Reports refused, by reason.", labelnames=["reason"]
        )
        for reason in REFUSAL_REASONS:
            self.reports_refused.labels(reason=reason)
        self.secagg_messages = self._metric(
            Counter,
            "ldpem_secagg_messages",
            "Secure-aggregation messages posted by holders, by step and outcome.",
            labelnames=["step", "outcome"],
        )
        # Every series from the start, at 0: increase() sees the first refusal.
        for step in (*SECAGG_STEPS, OTHER_STEP):
            for outcome in SECAGG_OUTCOMES:
                self.secagg_messages.labels(step=step, outcome=outcome)
        self.long_polls = self._metric(
            Gauge, "ldpem_long_polls_open", "Requests waiting in the round long-poll now."
        )
        self.commit_seconds = self._metric(
            Histogram,
            "ldpem_commit_seconds",
            "Duration of the COMMIT (with its fsync) of state transactions.",
            buckets=COMMIT_BUCKETS,
        )
        self.commit_batch = self._metric(
            Histogram,
            "ldpem_commit_batch_reports",
            "Reports applied in one group commit (refused ones included).",
            buckets=BATCH_BUCKETS,
        )

    def _metric(
        self, kind: type[_Metric], name: str, documentation: str, **options: Any
    ) -> _Metric:
        """A ``kind`` metric on this app's registry: every metric is made here, so none can
        end up on the library's global one (module docstring) for a forgotten argument."""
        return kind(name, documentation, registry=self.registry, **options)

    def attach(self, store: Store) -> None:
        """Also report runs by status, round durations and each run's health from ``store``
        at each scrape."""
        self.registry.register(StateCollector(store))
        self.registry.register(RunHealthCollector(store))

    def observe_report(self, status: int | None, body: bytes) -> None:
        """Count one answered ``POST …/reports`` by its status and JSON body."""
        detail: Any = None
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            detail = payload.get("detail")
        if status == 200:
            if isinstance(payload, dict) and payload.get("duplicate") is True:
                self.reports_duplicate.inc()
            else:
                self.reports_accepted.inc()
            return
        self.reports_refused.labels(reason=refusal_reason(status, detail)).inc()

    def observe_secagg(self, step: str, status: int | None) -> None:
        """Count one answered ``POST …/secagg/{step}`` by its HTTP status."""
        label = step if step in SECAGG_STEPS else OTHER_STEP
        self.secagg_messages.labels(step=label, outcome=secagg_outcome(status)).inc()


def secagg_outcome(status: int | None) -> str:
    """The ``outcome`` label of a posted secure-aggregation message, from its HTTP status:
    ``accepted`` (200 with the step's answer or 202 while the step is open: stored either
    way), ``out_of_step`` (409: the run, round or step is not open to this holder, as for
    one that comes back after its step closed), ``refused`` (any other 4xx: no or a wrong
    token, an unknown run, a malformed or oversized message), ``error`` (5xx or no answer).
    Read from the status alone: the secure-aggregation code is not touched to count."""
    if status in (200, 202):
        return "accepted"
    if status == 409:
        return "out_of_step"
    if status is not None and 400 <= status < 500:
        return "refused"
    return "error"


def refusal_reason(status: int | None, detail: Any) -> str:
    """The ``reason`` label of a refused report, from its HTTP status and ``detail``."""
    text = detail if isinstance(detail, str) else ""
    if status == 401:
        return "unauthenticated"
    if status == 403:
        return "wrong_hospital"
    if status == 404:
        return "unknown_run"
    if status == 409:
        return "conflicting_report" if "already reported" in text else "round_not_open"
    if status == 413:
        return "too_large"
    if status == 422:
        # Unparseable bodies and failed checks alike: only the range check, the one a
        # hostile agent trying to move β would fail, has a reason of its own.
        return "out_of_range" if "outside the range" in text else "invalid"
    return "error"


class StateCollector(Collector):
    """Runs by status and the histogram of round durations, from the state file."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterable[Metric]:
        runs = self.store.list_runs()
        by_status = GaugeMetricFamily("ldpem_runs", "Runs by status.", labels=["status"])
        for state in RUN_STATES:
            by_status.add_metric([state], sum(r.status == state for r in runs))
        yield by_status
        lost = CounterMetricFamily(
            "ldpem_secagg_lost_rounds",
            "Secure-aggregation rounds that ended without a sum, by cause (faulty: named "
            "holders sent wrong material; unattributable: an out-of-range sum no holder can "
            "be named for; short: too few holders left). The run kept its beta and went on.",
            labels=["cause"],
        )
        causes = dict.fromkeys(LOST_CAUSES, 0)
        for run in runs:
            for _, kind, _, body in self.store.secagg_outline(run.id, ("lost",)):
                if kind == "lost":
                    cause = str(json.loads(body).get("cause"))
                    causes[cause] = causes.get(cause, 0) + 1
        for cause, count in causes.items():
            lost.add_metric([cause], float(count))
        yield lost
        durations = [
            r.closed_at - r.opened_at
            for run in runs
            for r in self.store.rounds(run.id)
            if r.closed_at is not None
        ]
        buckets = [
            (_bucket_label(bound), float(sum(d <= bound for d in durations)))
            for bound in ROUND_BUCKETS
        ]
        buckets.append(("+Inf", float(len(durations))))
        yield HistogramMetricFamily(
            "ldpem_round_duration_seconds",
            "Time from a round's opening to its closing, over all closed rounds.",
            buckets=buckets,
            sum_value=float(sum(durations)),
        )


def _bucket_label(bound: float) -> str:
    return repr(float(bound))


class MeteredStore(Store):
    """A Store whose transactions report their commit latency and group-commit size."""

    def __init__(self, path: str | Path, metrics: Metrics) -> None:
        super().__init__(path)
        self._metrics = metrics
        self._savepoints = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            self._savepoints = 0
            with super().transaction():
                yield
                committing = time.perf_counter()
            # Reached only when the COMMIT succeeded: a failed one raised out of the block.
            self._metrics.commit_seconds.observe(time.perf_counter() - committing)
            if self._savepoints:
                self._metrics.commit_batch.observe(self._savepoints)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        with super().savepoint():
            self._savepoints += 1
            yield


Scope = dict[str, Any]


class MetricsMiddleware:
    """ASGI middleware: counts report and secure-aggregation message outcomes and the
    long-polls in flight."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "")
        if method == "GET" and _ROUND_PATH.fullmatch(path):
            self.metrics.long_polls.inc()
            try:
                await self.app(scope, receive, send)
            finally:
                self.metrics.long_polls.dec()
            return
        secagg = _SECAGG_PATH.fullmatch(path) if method == "POST" else None
        if secagg is not None:
            await self._secagg(secagg[1], scope, receive, send)
            return
        if method != "POST" or not _REPORT_PATH.fullmatch(path):
            await self.app(scope, receive, send)
            return
        status: int | None = None
        body = bytearray()

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and len(body) < 65536:
                body.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.observe_report(status, bytes(body))

    async def _secagg(self, step: str, scope: Scope, receive: Any, send: Any) -> None:
        """Serve a holder's message of ``step``, counting it by the status it is answered
        with (no body is kept: the outcome is the status's)."""
        status: int | None = None

        async def watch(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.observe_secagg(step, status)
