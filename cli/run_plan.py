"""``ldpem run create --plan``: the run request with the rounds, round schedule and
reported estimate that ``ldpem.common.planning.schedule_search`` recommends for it (the search of
``ldpem plan --search-schedule``, on the problem the coordinator's forecast simulates:
``ldpem.server.forecast.run_problem``)."""

from __future__ import annotations

import sys
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.common.planning.executor import make_executor
from ldpem.common.planning.schedule_search import DEFAULT_GRID, search_schedule
from ldpem.common.protocol import EQUAL, LAST
from ldpem.common.wire import RunCreate, public_parameters
from ldpem.server.forecast import DEFAULT_MAX_RECORDS, run_problem

__all__ = ["planned_request"]


def planned_request(request: Any, *, seeds: int, workers: int | None) -> dict[str, Any]:
    """``request`` with the rounds, schedule and final rule that ``search_schedule``
    recommends for its model, d, hospitals, budget, snr and mechanism (printed on stderr)."""
    if not isinstance(request, dict):
        raise UserError("the run request must be a JSON object")
    if seeds < 1:
        raise UserError(f"--plan-seeds must be >= 1, got {seeds}")
    # The searched fields are replaced: validate the rest with the grid's fewest rounds.
    first = min(DEFAULT_GRID, key=lambda s: s.rounds)
    try:
        run = RunCreate.model_validate(
            {**request, "rounds": first.rounds, "schedule": EQUAL, "final": LAST}
        )
        problem = run_problem(run, public_parameters(run))
        with make_executor(workers=workers) as executor:
            search = search_schedule(
                problem,
                run.mechanism,
                seeds=seeds,
                max_records=DEFAULT_MAX_RECORDS,
                executor=executor,
            )
    except ValueError as error:  # pydantic's ValidationError too
        raise UserError(f"--plan: {error}") from None
    print(search.format(), file=sys.stderr)
    chosen = search.setting
    print(
        f"--plan: rounds {chosen.rounds}, schedule {chosen.schedule}, final {chosen.final}",
        file=sys.stderr,
    )
    return {**request, **chosen.as_dict()}
