"""What every test process shares from tests/prefect_db.py: a trust store of one certificate."""

from __future__ import annotations

import os
import ssl
from typing import Any

import certifi
import pytest

from tests.prefect_db import one_certificate_bundle, trust_env


def test_the_bundle_holds_one_certificate_of_certifis() -> None:
    bundle = one_certificate_bundle()
    loaded = ssl.create_default_context(cafile=str(bundle)).get_ca_certs(binary_form=True)
    assert len(loaded) == 1
    everything = ssl.create_default_context(cafile=certifi.where()).get_ca_certs(binary_form=True)
    assert len(everything) > 100 and loaded[0] in everything


def test_prefect_clients_and_httpx_transports_of_a_test_process_load_only_that_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx
    from prefect.client.orchestration import get_client

    bundle = str(one_certificate_bundle())
    assert {name: os.environ[name] for name in trust_env()} == {
        "SSL_CERT_FILE": bundle,
        "PREFECT_API_SSL_CERT_FILE": bundle,
    }
    made: list[Any] = []
    original = ssl.create_default_context

    def recording(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(kwargs.get("cafile"))
        return original(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", recording)
    with get_client(sync_client=True):
        pass
    httpx.HTTPTransport()  # what importing prefect.blocks makes twice
    assert len(made) >= 2 and set(made) == {bundle}
