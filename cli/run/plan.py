"""``ldpem run create --plan``: the run request with the rounds, round schedule and
reported estimate that ``ldpem.common.planning.schedule_search`` recommends for it (the search of
``ldpem plan --search-schedule``, on the problem the coordinator's forecast simulates:
``ldpem.server.forecast.run_problem``).

The request's own setting is simulated too, first, so that it is what the grid's other
settings must beat clearly (on the same seeds) to replace it: --plan changes a request
only for a gain the seeds can tell, and says what it changed and by how much."""

from __future__ import annotations

import sys
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.schedule_search import (
    DEFAULT_GRID,
    ScheduleSearch,
    Setting,
    search_schedule,
)
from ldpem.common.protocol import EQUAL, LAST
from ldpem.common.wire import RunCreate, public_parameters
from ldpem.server.forecast import DEFAULT_MAX_RECORDS, run_problem

__all__ = ["planned_request", "request_grid"]


def request_grid(own: Setting | None) -> tuple[Setting, ...]:
    """The searched settings: the request's ``own`` first (the reference the others must
    beat clearly), then the default grid without it; the default grid alone when the
    request's setting is not valid for its run."""
    if own is None:
        return DEFAULT_GRID
    return (own, *(s for s in DEFAULT_GRID if s != own))


def _own_run(request: dict[str, Any]) -> tuple[RunCreate, Setting | None]:
    """The request validated with its own rounds, schedule and final, and that setting; if
    only they make it invalid (--plan replaces them), validated with the grid's fewest
    rounds instead and no own setting. ValueError for anything else."""
    try:
        run = RunCreate.model_validate(request)
        return run, Setting(run.rounds, str(run.schedule), str(run.final))
    except ValueError:
        first = min(DEFAULT_GRID, key=lambda s: s.rounds)
        replaced = {**request, "rounds": first.rounds, "schedule": EQUAL, "final": LAST}
        return RunCreate.model_validate(replaced), None


def planned_request(request: Any, *, seeds: int, workers: int | None) -> dict[str, Any]:
    """``request`` with the rounds, schedule and final rule that ``search_schedule``
    recommends for its model, d, hospitals, budget, snr and mechanism over its own setting
    and the default grid (the table and what changed printed on stderr)."""
    if not isinstance(request, dict):
        raise UserError("the run request must be a JSON object")
    if seeds < 1:
        raise UserError(f"--plan-seeds must be >= 1, got {seeds}")
    try:
        run, own = _own_run(request)
        problem = run_problem(run, public_parameters(run))
        with make_executor(workers=workers) as executor:
            search = search_schedule(
                problem,
                run.mechanism,
                grid=request_grid(own),
                seeds=seeds,
                max_records=DEFAULT_MAX_RECORDS,
                executor=executor,
            )
    except ValueError as error:  # pydantic's ValidationError too
        raise UserError(f"--plan: {error}") from None
    print(search.format(), file=sys.stderr)
    print(f"--plan: {what_changed(search, own)}", file=sys.stderr)
    return {**request, **search.setting.as_dict()}


def what_changed(search: ScheduleSearch, own: Setting | None) -> str:
    """``rounds 5 -> 10, schedule equal, final last: 0.0123 ± 0.004 lower than the
    request's T = 5, equal, last``, or that the request's setting is kept, and why."""
    chosen = search.setting
    fields = chosen.as_dict()
    before = {} if own is None else own.as_dict()
    parts = [
        f"{name} {before[name]} -> {value}"
        if name in before and before[name] != value
        else f"{name} {value}"
        for name, value in fields.items()
    ]
    setting = ", ".join(parts)
    if own is None:
        return (
            f"{setting} (the request's own rounds, schedule or final do not fit its run; "
            f"the grid's {search.reference[0].label} is the reference)"
        )
    if chosen == own:
        return f"{setting}: the request's own setting, kept (no other is clearly lower)"
    gain = search.gain(search.prediction)
    return (
        f"{setting}: expected error {gain.mean:.3g} ± {gain.se:.2g} lower than the "
        f"request's {own.label}, on the same {search.seeds} simulated runs"
    )
