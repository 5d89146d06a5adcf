"""The agent's link to its coordinator: requests with retries and backoff, strict answers.

A connection error or a 5xx is retried with exponential backoff and jitter until
``give_up`` seconds have passed; a 4xx is the caller's to judge. A TLS certificate that
does not verify is not retried: it will not verify later either (``untrusted``). Every 200
answer is parsed with the wire's strict schemas, and anything else is a one-line refusal:
the coordinator's words in a message are bounded to one line of DETAIL_BOUND characters.
"""

from __future__ import annotations

import json
import logging
import random
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

import httpx
from pydantic import BaseModel, ValidationError

from ldpem.client.trust import AgentError
from ldpem.common.core.errors import UserError
from ldpem.common.wire import API_PREFIX, Identity, RoundInfo, describe_errors

__all__ = [
    "READ_MARGIN",
    "CoordinatorLink",
    "LinkHooks",
    "backoff_delay",
    "link_tls",
    "long_poll_timeout",
    "tls_context",
    "untrusted",
]

log = logging.getLogger("ldpem.client")
#: Seconds an idle pooled connection is kept: below the coordinator's 75 s keep-alive
#: timeout (``ldpem coordinator``'s KEEP_ALIVE), so the agent never reuses a connection
#: the server is closing; a server that closes sooner costs a retried request.
KEEPALIVE_EXPIRY = 60.0
#: Characters of a coordinator's refusal an agent's message shows (``detail``).
DETAIL_BOUND = 1000
#: Seconds beyond a long-poll's asked wait before its read times out: the coordinator's
#: answer may leave after the full wait, then crosses the network.
READ_MARGIN = 30.0

Answer = TypeVar("Answer", bound=BaseModel)


def tls_context(ca_cert: Path | None) -> ssl.SSLContext:
    """TLS verification with ``ca_cert`` (a self-signed coordinator) or the system CAs."""
    if ca_cert is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_cert))
    except (OSError, ssl.SSLError) as error:
        raise UserError(f"{ca_cert}: not a readable CA certificate ({error})") from None


def long_poll_timeout(wait: float) -> httpx.Timeout:
    """The timeouts of a request the coordinator may hold ``wait`` seconds (a long-poll)."""
    return httpx.Timeout(30.0, read=wait + READ_MARGIN)


def link_tls(coordinator: str, ca_cert: Path | None) -> ssl.SSLContext:
    """The TLS context of a link to ``coordinator``: ``tls_context(ca_cert)`` for HTTPS (or
    when a CA certificate is given: it is checked either way); for a plain ``http://``
    coordinator, which no TLS is spoken to, a context that trusts no certificate instead
    of the system's store (loading it costs ~30 ms of CPU an agent): it could never
    complete a handshake, so it fails closed if TLS were ever asked of it."""
    if ca_cert is None and httpx.URL(coordinator).scheme == "http":
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return tls_context(ca_cert)


def untrusted(error: BaseException, url: str) -> str | None:
    """One line when ``error`` (an httpx error) is a TLS certificate that did not verify, a
    permanent failure that names its fix; None for any other error."""
    seen: BaseException | None = error
    while seen is not None and not isinstance(seen, ssl.SSLCertVerificationError):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return None
    if seen.verify_code in _NAME_MISMATCH:
        return _wrong_name(url)
    reason = seen.verify_message or seen.reason or "verification failed"
    return (
        f"certificate not trusted: the TLS certificate of {url} did not verify ({reason}); "
        "pass --ca-cert with the CA certificate that signed it (the ca.pem of ldpem "
        "coordinator init --self-signed)"
    )


#: OpenSSL's verify codes of a certificate that verifies but names another host
#: (X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH): --ca-cert is not the fix.
_NAME_MISMATCH = (62, 64)


def _wrong_name(url: str) -> str:
    """One line for a certificate that is not valid for the host of ``url``: the names it
    holds (read from the coordinator, unverified: only to say which to use) and the two
    fixes, a URL with one of them, or a certificate made for this name."""
    target = httpx.URL(url)
    host = target.host
    names = certificate_names(host, target.port or 443)
    held = f"it is for {', '.join(names)} only" if names else "it names other hosts"
    use = f"connect to https://{names[0]}:{target.port or 443}, or " if names else ""
    local = host in ("127.0.0.1", "localhost", "::1")
    remake = (
        f"make it again with ldpem coordinator init NEW_DIR --self-signed "
        f"{names[0] if names else 'HOST'} --with-localhost (valid for 127.0.0.1 and localhost "
        "too)"
        if local
        else f"make one for {host}: ldpem coordinator init NEW_DIR --self-signed {host}"
    )
    return (
        f"certificate not valid for {host}: the TLS certificate of {url} verifies but "
        f"{held}; {use}{remake}"
    )


def certificate_names(host: str, port: int) -> list[str]:
    """The DNS names and IP addresses the TLS certificate served at ``host``:``port`` is
    for, read without verifying it (best effort: empty when it cannot be read)."""
    from cryptography import x509

    try:
        pem = ssl.get_server_certificate((host, port), timeout=5)
        certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return []
    return [*names.get_values_for_type(x509.DNSName)] + [
        str(ip) for ip in names.get_values_for_type(x509.IPAddress)
    ]


def backoff_delay(attempt: int, *, first: float = 0.2, cap: float = 5.0) -> float:
    """Seconds to wait before retry ``attempt`` (0, 1, …): first·2^attempt capped at ``cap``,
    times a uniform jitter in [0.75, 1.25) so that agents do not retry in lockstep."""
    return min(first * 2.0 ** min(attempt, 30), cap) * (0.75 + 0.5 * random.random())


class LinkHooks(TypedDict, total=False):
    """What a test puts in place of the network (``transport``) and of time (``sleep``,
    ``clock``: by default ``time.sleep`` and ``time.monotonic``) under a link, and an agent
    passes on to its link."""

    transport: httpx.BaseTransport | None
    sleep: Callable[[float], None]
    clock: Callable[[], float]


class CoordinatorLink:
    """HTTP to one coordinator as one hospital (its bearer token), with retries."""

    def __init__(
        self,
        coordinator: str,
        token: str,
        *,
        give_up: float,
        wait: float,
        ca_cert: Path | None = None,
        **hooks: Unpack[LinkHooks],
    ) -> None:
        self.base = coordinator.rstrip("/")
        self.give_up = give_up
        self.wait = wait
        self.sleep = hooks.get("sleep", time.sleep)
        self.clock = hooks.get("clock", time.monotonic)
        self.http = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {token}"},
            verify=link_tls(self.base, ca_cert),
            transport=hooks.get("transport"),
            timeout=long_poll_timeout(wait),
            # Below uvicorn's 5 s keep-alive: a pooled connection the server is about to
            # close would otherwise be reused and fail (measured at K = 1000 as retried
            # requests, docs/PERFORMANCE.md).
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
        )

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response to a request, retrying connection errors and 5xx with backoff; a 4xx
        is returned to the caller. Raises AgentError after ``give_up`` s without success."""
        started = self.clock()
        attempt = 0
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
                if response.status_code < 500:
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.TransportError as error:
                certificate = untrusted(error, self.base)
                if certificate is not None:  # permanent: no retry
                    raise AgentError(certificate) from None
                problem = f"{type(error).__name__}: {error}"
            elapsed = self.clock() - started
            if elapsed >= self.give_up:
                raise AgentError(
                    f"coordinator {self.base} unreachable for {elapsed:.0f} s, giving up "
                    f"(last error: {problem})"
                )
            delay = backoff_delay(attempt)
            attempt += 1
            log.warning("%s %s failed (%s); retrying in %.1f s", method, path, problem, delay)
            self.sleep(min(delay, max(0.0, self.give_up - elapsed)))

    @staticmethod
    def detail(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        detail = body.get("detail", body) if isinstance(body, dict) else body
        text = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
        # The coordinator's words end up in this agent's one-line error: one line, bounded
        # (a hostile coordinator's megabyte is not printed), above any refusal of ours, so
        # that none is cut before its fix.
        text = " ".join(text.split())
        return text if len(text) <= DETAIL_BOUND else text[:DETAIL_BOUND] + "…"

    def answer(self, model: type[Answer], response: httpx.Response, what: str) -> Answer:
        """The coordinator's 200 answer as ``model`` (strict types); AgentError, one line,
        when it is not one."""
        try:
            return model.model_validate_json(response.content)
        except ValidationError as error:
            raise AgentError(
                f"coordinator {self.base} sent an invalid answer to {what}: "
                f"{describe_errors(error.errors())}; refusing"
            ) from None

    def identity(self) -> Identity:
        response = self.request("GET", f"{API_PREFIX}/me")
        if response.status_code != 200:
            raise AgentError(
                f"coordinator {self.base} refused the token: HTTP {response.status_code} "
                f"{self.detail(response)}"
            )
        return self.answer(Identity, response, "GET /me")

    def poll(self, run_id: str, after: int) -> RoundInfo:
        response = self.request(
            "GET",
            f"{API_PREFIX}/runs/{run_id}/round",
            params={"after": after, "wait": self.wait},
        )
        if response.status_code != 200:
            raise AgentError(
                f"cannot follow run {run_id}: HTTP {response.status_code} {self.detail(response)}"
            )
        return self.answer(RoundInfo, response, f"GET /runs/{run_id}/round")
