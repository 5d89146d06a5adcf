"""How the coordinator's responses travel: gzip for a client that accepts it, from
``GZIP_MINIMUM_BYTES`` up (docs/SECAGG.md, "Compressed responses": why it leaks nothing).

What a secure-aggregation holder fetches (``/v1/runs/{run}/rounds/{t}/secagg/…``) is
mostly the base64 of keys, signatures and ciphertexts: random bytes, which only Huffman
coding shrinks (base64 spends 8 bits on 6). Those answers are compressed with zlib's
Huffman-only strategy, which skips the search for repeated strings that finds almost none
there: on a bundle-like answer it ran 4× faster than level 1 for a 2.4% larger body
(docs/PERFORMANCE.md, "The coordinator's CPU at K = 1000, third pass"). Every other
response (pages, schemas, run lists: text that repeats itself) is compressed at
``GZIP_LEVEL``. Either way the body is an ordinary gzip stream.
"""

from __future__ import annotations

import zlib

from starlette.datastructures import Headers
from starlette.middleware.gzip import GZipMiddleware, GZipResponder
from starlette.types import ASGIApp, Receive, Scope, Send

from ldpem.common.wire import API_PREFIX

__all__ = ["GZIP_LEVEL", "GZIP_MINIMUM_BYTES", "Compression", "gzip_answer", "is_secagg_path"]

#: Responses of at least this many bytes are gzip-compressed for a client that accepts it
#: (smaller ones gain too little to pay the header and the CPU).
GZIP_MINIMUM_BYTES = 1024
#: zlib's fastest level, for the responses that are not secure-aggregation answers: level 6
#: made a holder's answers 2% smaller for 30% more of the coordinator's CPU per byte
#: (docs/PERFORMANCE.md).
GZIP_LEVEL = 1

_SECAGG_PREFIX = API_PREFIX + "/runs/"


def is_secagg_path(path: str) -> bool:
    """Whether ``path`` is one of the secure-aggregation routes' (``server/routes/secagg.py``)."""
    return path.startswith(_SECAGG_PREFIX) and "/secagg/" in path


def _huffman() -> zlib._Compress:
    return zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 8, zlib.Z_HUFFMAN_ONLY)


def gzip_answer(body: bytes) -> bytes:
    """``body`` as a secure-aggregation answer travels to a client that accepts gzip (what
    the benchmarks count as a holder's received bytes)."""
    if len(body) < GZIP_MINIMUM_BYTES:
        return body
    compressor = _huffman()
    return compressor.compress(body) + compressor.flush()


class _HuffmanResponder(GZipResponder):
    """Starlette's gzip responder with the Huffman-only strategy."""

    @property
    def compressor(self) -> zlib._Compress:
        if self._compressor is None:
            self._compressor = _huffman()
        return self._compressor


class Compression(GZipMiddleware):
    """Starlette's ``GZipMiddleware`` at ``GZIP_LEVEL``, except for the secure-aggregation
    answers, compressed Huffman-only."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, minimum_size=GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and is_secagg_path(scope["path"])
            and "gzip" in Headers(scope=scope).get("Accept-Encoding", "")
        ):
            responder = _HuffmanResponder(
                self.app,
                self.minimum_size,
                thread_minimum_size=self.thread_minimum_size,
                exclude_content_types=self.exclude_content_types,
            )
            await responder(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
