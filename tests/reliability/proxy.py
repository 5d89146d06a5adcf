"""A hostile network for tests: a threaded TCP proxy on 127.0.0.1 that, with seeded
randomness, refuses connections, delays data, cuts a request after forwarding part of it,
and cuts a connection after the request reached the server but before its response got
back (the case that makes a client resend a report the server already committed)."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Faults:
    drop_connection: float = 0.08
    delay: float = 0.15
    cut_request: float = 0.08
    cut_response: float = 0.08
    max_delay: float = 0.6
    counts: Counter[str] = field(default_factory=Counter)


class FlakyProxy:
    def __init__(self, upstream_port: int, faults: Faults, *, seed: int) -> None:
        self.upstream_port = upstream_port
        self.faults = faults
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _random(self) -> float:
        with self._lock:
            return self._rng.random()

    def _count(self, what: str) -> None:
        with self._lock:
            self.faults.counts[what] += 1

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._count("connections")
            if self._random() < self.faults.drop_connection:
                self._count("dropped connections")
                _close(client)
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            for src, dst, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._pump, args=(src, dst, client, server, upstream), daemon=True
                ).start()

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        client: socket.socket,
        server: socket.socket,
        upstream: bool,
    ) -> None:
        f = self.faults
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                r = self._random()
                if upstream and r < f.cut_request:
                    # Forward part of the request, then cut both sides.
                    dst.sendall(data[: max(1, len(data) // 2)])
                    self._count("requests cut midway")
                    break
                if not upstream and r < f.cut_response:
                    # The server handled the request; its response never arrives.
                    self._count("responses cut")
                    break
                if r > 1.0 - f.delay:
                    self._count("delays")
                    self._stop.wait(self._random() * f.max_delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(client)
            _close(server)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
