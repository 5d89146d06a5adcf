"""Keys, roster and agents of a federated secagg run (tests only)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ldpem.common.secagg import Roster, generate_signing_key, public_key_bytes, signing_key_to_pem
from ldpem.processes import Child, Processes
from tests.fedkit import AGENT_BUDGET, token_file


def tokens(k: int) -> list[str]:
    return [f"secagg-token-{i:03d}-abcdefghijklmnop" for i in range(k)]


def keys_and_roster(directory: Path, k: int) -> tuple[list[Path], Path, dict[str, Any]]:
    """K signing key files (mode 600) of hospitals h0 … h{K-1} and their roster."""
    paths, public = [], {}
    for i in range(k):
        key = generate_signing_key()
        path = directory / f"h{i}.key"
        path.write_bytes(signing_key_to_pem(key))
        os.chmod(path, 0o600)
        paths.append(path)
        public[f"h{i}"] = public_key_bytes(key)
    roster = Roster(public)
    roster_path = directory / "roster.json"
    roster_path.write_text(roster.to_json())
    return paths, roster_path, json.loads(roster.to_json())


def hospitals(counts: list[int]) -> list[dict[str, Any]]:
    names = tokens(len(counts))
    return [{"name": f"h{i}", "records": c, "token": names[i]} for i, c in enumerate(counts)]


def start_agent(
    procs: Processes,
    tmp_path: Path,
    url: str,
    i: int,
    data: Path,
    key: Path,
    roster: Path,
    *extra: str,
) -> Child:
    return procs.start(
        f"agent{i}",
        "client",
        "--coordinator",
        url,
        "--token-file",
        str(token_file(tmp_path, tokens(i + 1)[i], f"agent{i}.token")),
        "--data",
        str(data),
        "--model",
        "gmm",
        "--state",
        str(tmp_path / f"agent{i}"),
        *AGENT_BUDGET,
        "--signing-key",
        str(key),
        "--roster",
        str(roster),
        "--min-honest",
        "2",
        "--wait",
        "5",
        "--give-up",
        "120",
        *extra,
    )
