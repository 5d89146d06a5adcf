"""The agent's link drops idle connections before the coordinator's server does: a pooled
connection that uvicorn is closing would be reused and the request lost (seen at K = 200
and 1000 as "server disconnected without sending a response", docs/PERFORMANCE.md)."""

from __future__ import annotations

import uvicorn

from ldpem.client.link import KEEPALIVE_EXPIRY, CoordinatorLink
from ldpem.commands.coordinator import KEEP_ALIVE


def test_idle_connections_expire_before_the_servers_keep_alive() -> None:
    link = CoordinatorLink("http://127.0.0.1:9", "token", give_up=1.0, wait=1.0)
    try:
        # httpx's pool (no public accessor): the expiry the link actually uses.
        expiry = link.http._transport._pool._keepalive_expiry  # type: ignore[attr-defined]
    finally:
        link.close()
    assert expiry == KEEPALIVE_EXPIRY
    # Below the coordinator's, and long enough to span an agent's pause between requests
    # (longer than uvicorn's default 5 s, with which most of a loaded holder's requests
    # opened a new connection).
    assert uvicorn.Config(app="ldpem.server.app:app").timeout_keep_alive < expiry < KEEP_ALIVE
