"""The agent's link drops idle connections before the coordinator's server does: a pooled
connection that uvicorn is closing would be reused and the request lost (seen at K = 200
and 1000 as "server disconnected without sending a response", docs/PERFORMANCE.md)."""

from __future__ import annotations

import uvicorn

from ldpem.client.link import KEEPALIVE_EXPIRY, CoordinatorLink


def test_idle_connections_expire_before_the_servers_keep_alive() -> None:
    server_timeout = uvicorn.Config(
        app="ldpem.server.app:app"
    ).timeout_keep_alive  # the coordinator's server
    link = CoordinatorLink("http://127.0.0.1:9", "token", give_up=1.0, wait=1.0)
    try:
        # httpx's pool (no public accessor): the expiry the link actually uses.
        expiry = link.http._transport._pool._keepalive_expiry  # type: ignore[attr-defined]
    finally:
        link.close()
    assert expiry == KEEPALIVE_EXPIRY
    assert 0 < expiry < server_timeout
