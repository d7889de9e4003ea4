"""The Prefect settings every test process shares (tests/prefect_db.py): its clients' one-certificate CA bundle."""

from __future__ import annotations

import os
import ssl
from typing import Any

import certifi
import pytest

from tests.prefect_db import client_env, one_certificate_bundle


def test_the_bundle_holds_one_certificate_of_certifis() -> None:
    bundle = one_certificate_bundle()
    loaded = ssl.create_default_context(cafile=str(bundle)).get_ca_certs(binary_form=True)
    assert len(loaded) == 1
    everything = ssl.create_default_context(cafile=certifi.where()).get_ca_certs(binary_form=True)
    assert len(everything) > 100 and loaded[0] in everything


def test_a_prefect_client_of_a_test_process_loads_the_one_certificate_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.client.orchestration import get_client

    assert os.environ["PREFECT_API_SSL_CERT_FILE"] == client_env()["PREFECT_API_SSL_CERT_FILE"]
    made: list[Any] = []
    original = ssl.create_default_context

    def recording(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(kwargs.get("cafile"))
        return original(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", recording)
    with get_client(sync_client=True):
        pass
    assert str(one_certificate_bundle()) in made and certifi.where() not in made
