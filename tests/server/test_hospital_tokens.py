"""A hospital's token is looked up in the store once: the coordinator keeps the enrolled
hospitals it found by token digest (their rows never change), and never a token it did
not find, so that bogus tokens cannot grow what it keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ldpem.server.app import create_app
from ldpem.server.coordinator import Coordinator
from ldpem.server.store import HospitalRow
from tests.fedkit import TOKENS, admin_headers, run_request
from tests.fedkit import settings as app_settings


def test_a_token_is_looked_up_once_and_a_bogus_one_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(create_app(app_settings(tmp_path))) as client:
        created = client.post(
            "/v1/runs", json=run_request(records=100, d=3), headers=admin_headers()
        )
        assert created.status_code == 201, created.text
        coordinator = client.app.state.coordinator  # type: ignore[attr-defined]
        assert isinstance(coordinator, Coordinator)
        looked_up: list[str] = []
        lookup = coordinator.store.hospital_by_token_hash

        def counted(digest: str) -> HospitalRow | None:
            looked_up.append(digest)
            return lookup(digest)

        monkeypatch.setattr(coordinator.store, "hospital_by_token_hash", counted)
        for _ in range(3):
            me = client.get("/v1/me", headers={"Authorization": f"Bearer {TOKENS[0]}"})
            assert me.status_code == 200, me.text
        assert len(looked_up) == 1
        for _ in range(3):
            refused = client.get("/v1/me", headers={"Authorization": "Bearer no-such-token-000"})
            assert refused.status_code == 401
        assert len(looked_up) == 4
        assert coordinator.hospital_for("no-such-token-000") is None
        found = coordinator.hospital_for(TOKENS[0])
        assert found is not None and found.name == me.json()["hospital"]
