"""The coordinator's view of a secagg round reads the stored survivor set: a bitmap over
the roster's names (the compact wire), or the names of a round stored before it."""

from __future__ import annotations

import json

from ldpem.common.secagg import ConsistencyCheck
from ldpem.server.health import RoundView
from ldpem.server.pages.secagg import round_cells
from ldpem.server.secagg.view import read_round

ENROLLED = ["h0", "h1", "h2", "h3"]
ORDER = ("h0", "h1", "h2", "h3", "h4")  # the roster may name more than the run enrols


def rows(check_body: str) -> list[tuple[str, str, str]]:
    return [("masked", name, "") for name in ENROLLED] + [("consistency_check", "", check_body)]


def test_the_stored_survivor_bitmap_is_read_over_the_roster() -> None:
    check = ConsistencyCheck("run", 0, ("h0", "h1", "h3"), ORDER)
    view = read_round(0, rows(json.dumps(check.to_dict())), ENROLLED, order=ORDER)
    assert view.checked == ("h0", "h1", "h3")
    assert view.excluded == {"h2": "masked"}  # it masked, a peer left it out of S
    assert read_round(0, rows(json.dumps(check.to_dict())), ENROLLED).checked is None


def test_a_survivor_list_stored_before_the_bitmap_is_still_read() -> None:
    body = json.dumps({"run_id": "run", "round": 0, "survivors": ["h0", "h1", "h3"]})
    view = read_round(0, rows(body), ENROLLED, order=ORDER)
    assert view.checked == ("h0", "h1", "h3") and view.excluded == {"h2": "masked"}


def test_every_holder_list_of_the_view_and_page_is_in_natural_order() -> None:
    """Issue 43, finding 12: hospitals are listed h1, h2, h10, never h1, h10, h2, whatever
    order the rows and bodies name them in."""
    enrolled = [f"h{i}" for i in (1, 2, 3, 10, 11, 12)]
    late = ["h12", "h3", "h11"]
    closed = {"step": "advertise", "by": "deadline", "at": 1.0}
    closed |= {"waited_for": ["h10", "h2", "h1", *late], "missing": late}
    rows = [("advertise", name, "") for name in ("h10", "h2", "h1")]
    rows += [("closed", "", json.dumps(closed))]
    rows += [("returned", name, "") for name in ("h11", "h3")]
    rows += [("sum", "", json.dumps({"survivors": ["h10", "h2", "h1"]}))]
    rows += [("disputed", "", json.dumps({"h10": "accused", "h2": "accused"}))]
    view = read_round(0, rows, enrolled)
    assert view.answered["advertise"] == ("h1", "h2", "h10")
    assert view.closings[0].missing == ("h3", "h11", "h12")
    assert view.returned == ("h3", "h11")
    assert view.survivors == ("h1", "h2", "h10")
    row = {"run_id": "r", "t": 0, "status": "open", "beta": [0.0], "opened_at": 0.0}
    row |= {"deadline": 1.0, "closed_at": None, "beta_next": None, "noise": None}
    r = RoundView(**row, reports=(), secagg=view)  # type: ignore[arg-type]
    count, took, lost = round_cells(r, enrolled, t_min=3)
    assert count == "3/6 survivors (t_min 3)"
    assert "sum of h1, h2, h10" in took
    assert "lost: h3 (did not advertise keys), h11 (did not advertise keys), h12 (" in lost
    assert "h2 (left out of S: accused), h10 (left out of S: accused)" in lost
    assert "came back: h3, h11" in lost
