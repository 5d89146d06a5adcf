"""How ``ldpem run status`` reads a run: once, or (``--wait``) through a coordinator that
restarts or cannot be reached for a while.

A watcher must not report a failure that did not happen: the agents of the run retry a
coordinator they cannot reach for ``GIVE_UP`` seconds (``ldpem.client.retry``), and the run
goes on once it is back. So ``--wait`` retries connection errors and 5xx answers, with the
agents' backoff, for as long (``--give-up``, default ``GIVE_UP``), saying once on stderr that
it does; if the coordinator stays away that long it exits with ``UNREACHABLE``, a status of
its own: the run's outcome is unknown, which is not "the run failed" (2). A certificate
that does not verify is not retried (it will not verify later either), nor is a refusal.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.run.shared import refused, unreachable

__all__ = ["UNREACHABLE", "CoordinatorGone", "RunReader"]

#: The exit status of ``run status --wait`` when the coordinator could not be reached for
#: ``--give-up`` seconds: EX_TEMPFAIL of sysexits.h (a temporary failure; try again later).
UNREACHABLE = 75


class CoordinatorGone(Exception):
    """The coordinator could not be reached for the whole ``give_up``; the message is the
    one line the command prints."""


class RunReader:
    """GETs of a coordinator's run state with ``headers`` and TLS ``verify``; with
    ``give_up`` > 0, connection errors and 5xx are retried for that many seconds."""

    def __init__(self, coordinator: str, verify: Any, headers: dict[str, str], give_up: float):
        self.coordinator = coordinator
        self.verify = verify
        self.headers = headers
        self.give_up = give_up

    def get(self, url: str, what: str) -> Any:
        """The JSON of ``GET url`` (200); UserError, one line, for a refusal or (without
        retries) no answer; ``CoordinatorGone`` after ``give_up`` seconds without one."""
        import httpx

        from ldpem.client.link import backoff_delay, untrusted

        down_since: float | None = None
        attempt = 0
        while True:
            try:
                response = httpx.get(url, timeout=30.0, verify=self.verify, headers=self.headers)
            except httpx.TransportError as error:
                if self.give_up <= 0 or untrusted(error, url) is not None:
                    raise unreachable(error, url) from None
                problem = f"{type(error).__name__}: {error}"
            except httpx.HTTPError as error:
                raise unreachable(error, url) from None
            else:
                if response.status_code < 500 or self.give_up <= 0:
                    return self._answer(response, what, down_since)
                problem = f"HTTP {response.status_code}"
            now = time.monotonic()
            if down_since is None:
                down_since = now
                print(
                    f"cannot reach {self.coordinator} ({problem}); retrying for up to "
                    f"{self.give_up:g} s, as the run's agents do",
                    file=sys.stderr,
                    flush=True,
                )
            elapsed = now - down_since
            if elapsed >= self.give_up:
                raise CoordinatorGone(
                    f"coordinator {self.coordinator} unreachable for {elapsed:.0f} s (last "
                    f"error: {problem}); the run's outcome is unknown: run ldpem run status "
                    "again once the coordinator is back"
                )
            time.sleep(min(backoff_delay(attempt), self.give_up - elapsed))
            attempt += 1

    def _answer(self, response: Any, what: str, down_since: float | None) -> Any:
        if down_since is not None:
            print(f"{self.coordinator} answers again", file=sys.stderr, flush=True)
        if response.status_code != 200:
            raise refused(response, what)
        try:
            return response.json()
        except ValueError:
            raise UserError(f"{what}: the coordinator's answer is not JSON") from None
