"""Fixtures for the CA tests: an isolated environment, Secrets Manager in moto (in-process, or one
threaded moto server for the races), and CSRs made by the `openssl` CLI as a real machine would
(tests/support/csr.py)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from moto.secretsmanager.models import SecretsManagerBackend
from moto.server import ThreadedMotoServer

from joinplane import aws, container
from tests.support.csr import Csrs, OpensslTool


def _reset_process_state() -> None:
    container.reset()


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("TABLE_NAME", "unused")
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "CA_SECRET_PREFIX",
        "SPIFFE_TRUST_DOMAIN",
    ):
        monkeypatch.delenv(name, raising=False)
    _reset_process_state()
    yield
    _reset_process_state()


@pytest.fixture
def secretsmanager() -> Iterator[Any]:
    """Secrets Manager emulated in-process; yields the same client the CA module uses."""
    with mock_aws():
        yield aws.client("secretsmanager")
        container.reset()  # its clients were mock_aws's


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """One moto server on a free port shared by every thread, as separate Lambdas share one AWS."""
    # Real CreateSecret is atomic; moto's checks for the name and then inserts, so two concurrent
    # creates can both "succeed" (seen about once in 30 eight-way races). Serialising it restores
    # the service's contract, so a failing race test means our code is wrong, not the emulator.
    create_lock = threading.Lock()
    unlocked_create = SecretsManagerBackend.create_secret

    @functools.wraps(unlocked_create)
    def atomic_create(self: SecretsManagerBackend, *args: Any, **kwargs: Any) -> Any:
        with create_lock:
            return unlocked_create(self, *args, **kwargs)

    monkeypatch.setattr(SecretsManagerBackend, "create_secret", atomic_create)
    request_log = logging.getLogger("werkzeug")
    previous_level = request_log.level
    request_log.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    container.reset()  # clients for the new endpoint
    try:
        yield endpoint
    finally:
        # No moto reset here: its backends are process-global, and the session's embedded emulator
        # (tests/conftest.py) may share them. Race tests use fresh pool ids instead.
        server.stop()
        container.reset()
        request_log.setLevel(previous_level)


# --- openssl: CSRs by kind, and the CLI to check what the CA issued --------------------------------


@pytest.fixture(scope="session")
def csrs(tmp_path_factory: pytest.TempPathFactory) -> Csrs:
    return Csrs(tmp_path_factory.mktemp("csrs"))


@pytest.fixture
def ossl(tmp_path: Path) -> OpensslTool:
    return OpensslTool(tmp_path)
