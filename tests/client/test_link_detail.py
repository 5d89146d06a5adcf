"""The coordinator's words in an agent's one-line error (issue 43, finding 11): a refusal
of ours is shown whole, its fix included, with its characters as written (no "\\u2026"
escapes); only a hostile coordinator's flood is cut, at DETAIL_BOUND."""

from __future__ import annotations

import httpx

from ldpem.client.link import DETAIL_BOUND, CoordinatorLink


def test_a_long_refusal_is_whole_and_a_flood_is_bounded() -> None:
    fix = "use secagg_topology mesh (auto picks it)"
    long = "secagg_topology expander cannot be met: " + "the degree is too high, " * 12 + fix
    assert 300 < len(long) < DETAIL_BOUND
    assert CoordinatorLink.detail(httpx.Response(409, json={"detail": long})).endswith(fix)
    flood = CoordinatorLink.detail(httpx.Response(409, json={"detail": "x" * 10**6}))
    assert len(flood) == DETAIL_BOUND + 1 and flood.endswith("…")


def test_structured_details_keep_their_characters() -> None:
    body = {"detail": [{"msg": "ε must be > 0 …", "loc": ["body", "epsilon"]}]}
    text = CoordinatorLink.detail(httpx.Response(422, json=body))
    assert "ε must be > 0 …" in text and "\\u" not in text
