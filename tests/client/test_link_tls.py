"""The agent's TLS context: the system's certificate store (or --ca-cert) for HTTPS; for a
plain http:// coordinator none loaded (~30 ms of CPU an agent), and nothing trusted."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ldpem.client.link import CoordinatorLink, link_tls
from ldpem.common.core.errors import UserError


def refuse_store(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("the system's certificate store was loaded")


def test_a_plain_http_link_loads_no_certificate_store_and_trusts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ssl, "create_default_context", refuse_store)
    context = link_tls("http://127.0.0.1:8765", None)
    # Fails closed: TLS asked of it could never verify a certificate.
    assert context.cert_store_stats()["x509_ca"] == 0
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    link = CoordinatorLink("HTTP://127.0.0.1:8765/", "token", give_up=1.0, wait=1.0)
    link.close()


def test_https_or_a_given_ca_certificate_still_loads_a_store_and_checks_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(UserError, match=r"missing\.pem: not a readable CA certificate"):
        link_tls("http://127.0.0.1:8765", tmp_path / "missing.pem")
    monkeypatch.setattr(ssl, "create_default_context", refuse_store)
    with pytest.raises(AssertionError, match="certificate store was loaded"):
        CoordinatorLink("https://coordinator.example", "token", give_up=1.0, wait=1.0)
