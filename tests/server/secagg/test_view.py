"""The coordinator's view of a secagg round reads the stored survivor set: a bitmap over
the roster's names (the compact wire), or the names of a round stored before it."""

from __future__ import annotations

import json

from ldpem.common.secagg import ConsistencyCheck
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
