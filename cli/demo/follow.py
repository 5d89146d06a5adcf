"""``ldpem demo`` following its run: the rounds as they close (a line each, or a redrawn
bar on a terminal), then the coordinator's background forecast and confidence region."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import httpx

from ldpem.common.core.errors import UserError
from ldpem.processes import Processes
from ldpem.run.estimate import await_confidence

__all__ = ["FORECAST_TIMEOUT", "await_forecast", "final_region", "follow"]

#: Seconds the demo waits, once the run finished, for the forecast the coordinator computes
#: in the background (usually ready long before).
FORECAST_TIMEOUT = 300.0


class _Progress:
    """One line per closed round on a non-TTY; a redrawn bar on a TTY."""

    def __init__(self, stream: TextIO, rounds: int, names: list[str], quiet: bool) -> None:
        self.stream, self.rounds, self.names, self.quiet = stream, rounds, names, quiet
        self.shown = 0
        self.tty = stream.isatty()

    def update(self, closed: list[dict[str, Any]], open_round: dict[str, Any] | None) -> None:
        if self.quiet:
            return
        for summary in closed[self.shown :]:
            self._line(summary["round"] + 1, summary["reporters"], final=True)
            self.shown += 1
        if self.tty and open_round is not None:
            self._line(open_round["round"] + 1, open_round["reporters"], final=False)

    def _line(self, number: int, reporters: list[str], *, final: bool) -> None:
        width = 20
        filled = round(width * (number - (0 if final else 1)) / self.rounds)
        bar = "#" * filled + "-" * (width - filled)
        marks = " ".join(f"{name}{'✓' if name in reporters else '·'}" for name in self.names)
        text = f"round {number:>3}/{self.rounds} [{bar}] {marks}"
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        elif final:
            self.stream.write(text + "\n")
        self.stream.flush()


#: Seconds one long-poll of the open round may wait (the coordinator answers as soon as a
#: round closes or the run ends): how late a dead agent or the run's timeout is noticed.
#: On a terminal, how often the open round's reporters are redrawn.
FOLLOW_WAIT = 1.0
FOLLOW_WAIT_TTY = 0.2


def follow(
    client: httpx.Client,
    run_id: str,
    *,
    admin: str,
    rounds: int,
    names: list[str],
    processes: Processes,
    quiet: bool,
    timeout: float,
) -> dict[str, Any]:
    """Show rounds as they close until the run ends; fail fast if a process dies.

    Long-polls the open round as an agent does (``GET /v1/runs/{run}/round`` with
    ``after`` and ``wait``, the ``admin`` token), instead of asking for the run every few
    milliseconds: two requests a round (the round and the rounds' list), not forty a
    second, which the coordinator and the demo would each spend CPU on."""
    progress = _Progress(sys.stderr, rounds, names, quiet)
    deadline = time.monotonic() + timeout
    wait = FOLLOW_WAIT_TTY if progress.tty and not quiet else FOLLOW_WAIT
    auth = {"Authorization": f"Bearer {admin}"}
    seen = -1
    while True:
        info = client.get(
            f"/v1/runs/{run_id}/round",
            params={"after": seen, "wait": wait},
            headers=auth,
            timeout=wait + 30.0,
        ).json()
        if info["round"] > seen or info["status"] != "running" or progress.tty:
            listed = client.get(f"/v1/runs/{run_id}/rounds").json()
            closed = [r for r in listed if r["status"] == "closed"]
            open_rounds = [r for r in listed if r["status"] == "open"]
            progress.update(closed, open_rounds[0] if open_rounds else None)
        seen = max(seen, info["round"])
        if info["status"] == "finished":
            return dict(client.get(f"/v1/runs/{run_id}").json())
        if info["status"] in ("failed", "cancelled"):  # cancelled from another shell
            raise UserError(f"the run {info['status']}: {info.get('reason')}")
        problem = processes.failed()
        if problem is not None:
            raise UserError(problem)
        if time.monotonic() > deadline:
            raise UserError(f"the run did not finish within {timeout:.0f} s")


def await_forecast(client: httpx.Client, run_id: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The run's summary once its background forecast is stored (or FORECAST_TIMEOUT)."""
    deadline = time.monotonic() + FORECAST_TIMEOUT
    while "forecast" in summary.get("pending", []) and time.monotonic() < deadline:
        time.sleep(0.05)
        summary = client.get(f"/v1/runs/{run_id}").json()
    return summary


def final_region(
    fetch: Callable[[], dict[str, Any]], interval: float = 0.1
) -> dict[str, Any] | None:
    """A finished run's confidence region (``fetch`` gets its JSON) once no longer
    pending (as ``ldpem run status --wait`` waits for it); None when it has none."""
    region: dict[str, Any] | None = await_confidence(fetch(), fetch, interval).get("confidence")
    return region
