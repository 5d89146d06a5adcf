"""The coordinator gzips its responses of at least GZIP_MINIMUM_BYTES for a client that
accepts gzip (docs/SECAGG.md "Compressed responses"), and only for such a client: the
decoded body is the one an identity client gets, a small body travels as it is, and what
a holder fetches in a secagg round (base64 of ciphertexts and keys) loses base64's third
on the wire."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from ldpem.common.secagg.steps import Step
from ldpem.server.app import GZIP_LEVEL, GZIP_MINIMUM_BYTES, create_app
from ldpem.server.compression import gzip_answer, is_secagg_path
from tests.fedkit import settings
from tests.secaggdriver import NAMES, create_run, play_round

GZIP = {"Accept-Encoding": "gzip"}
IDENTITY = {"Accept-Encoding": "identity"}


@dataclass
class Wire:
    """A response as it travelled: status, headers, the body's bytes on the wire."""

    status: int
    headers: httpx.Headers
    raw: bytes

    def json(self) -> Any:
        gzipped = self.headers.get("content-encoding") == "gzip"
        return json.loads(gzip.decompress(self.raw) if gzipped else self.raw)


def fetch(client: TestClient, url: str, headers: dict[str, str]) -> Wire:
    with client.stream("GET", url, headers=headers) as response:
        return Wire(response.status_code, response.headers, b"".join(response.iter_raw()))


def test_a_large_json_body_is_gzipped_and_decodes_to_the_identity_body(
    client: TestClient,
) -> None:
    zipped = fetch(client, "/openapi.json", GZIP)
    plain = fetch(client, "/openapi.json", IDENTITY)
    assert len(plain.raw) >= GZIP_MINIMUM_BYTES
    assert zipped.headers["content-encoding"] == "gzip"
    assert "content-encoding" not in plain.headers
    assert zipped.json() == plain.json()
    assert len(zipped.raw) < len(plain.raw) / 2  # a JSON schema is repetitive text
    # At the level the app sets (gzip's header is the same size whatever its time stamp).
    assert len(zipped.raw) == len(gzip.compress(plain.raw, compresslevel=GZIP_LEVEL))


def test_a_small_body_travels_uncompressed(client: TestClient) -> None:
    response = fetch(client, "/healthz", GZIP)
    assert response.status == 200
    assert len(response.raw) < GZIP_MINIMUM_BYTES
    assert "content-encoding" not in response.headers


def test_a_413_still_answers_through_the_compression(client: TestClient) -> None:
    limit = client.app.state.settings.max_body  # type: ignore[attr-defined]
    response = client.post("/v1/runs", content=b"x" * (limit + 1), headers=GZIP)
    assert response.status_code == 413
    assert "larger than the limit" in response.json()["detail"]


def test_a_holders_participant_list_is_gzipped_to_about_its_raw_bytes(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        run = create_run(client, "gz")
        play_round(run, 0, run.inputs(0), until=Step.ADVERTISE)
        url = run.url(0, "participants") + "?wait=5"
        headers = run.headers(NAMES[0])
        zipped = fetch(client, url, {**headers, **GZIP})
        plain = fetch(client, url, {**headers, **IDENTITY})
    assert zipped.status == plain.status == 200
    assert zipped.json() == plain.json()
    assert zipped.headers["content-encoding"] == "gzip"
    # Base64 spends 4 characters on 3 random bytes; gzip's Huffman codes give most of the
    # extra quarter of each character back (names and field keys compress further).
    assert len(zipped.raw) < 0.85 * len(plain.raw)
    # Huffman-only (no search for repeats, which random bytes lack): the stream the
    # benchmarks count, not level 1's.
    assert len(zipped.raw) == len(gzip_answer(plain.raw))
    assert len(zipped.raw) != len(gzip.compress(plain.raw, compresslevel=GZIP_LEVEL))


def test_only_the_secure_aggregation_routes_are_compressed_huffman_only() -> None:
    assert is_secagg_path("/v1/runs/abc/rounds/3/secagg/participants")
    assert is_secagg_path("/v1/runs/abc/rounds/3/secagg/advertise")
    assert not is_secagg_path("/v1/runs/abc/round")
    assert not is_secagg_path("/runs/abc")  # a status page: text, level 1
    assert not is_secagg_path("/openapi.json")
