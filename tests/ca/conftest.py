"""Fixtures for the CA tests: CSRs made by the `openssl` CLI as a real machine would
(tests/support/csr.py). Tests that issue certificates use the session's emulator (tests/conftest.py):
one moto server for DynamoDB and KMS, shared by every thread of a race as Lambdas share one AWS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from joinplane import container
from tests.support import call
from tests.support.csr import Csrs, OpensslTool

POOL = {"tenantId": "acme", "poolId": "gpu"}


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("KMS_ALIAS_PREFIX", "KMS_STACK_TAG", "SPIFFE_TRUST_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    container.reset(keep_clients=True)
    yield
    container.reset(keep_clients=True)


@pytest.fixture(scope="session")
def csrs(tmp_path_factory: pytest.TempPathFactory) -> Csrs:
    return Csrs(tmp_path_factory.mktemp("csrs"))


@pytest.fixture
def ossl(tmp_path: Path) -> OpensslTool:
    return OpensslTool(tmp_path)


# The pool `gpu` of tenant acme and a 10-use join token for it, made over the operator API (the
# API tests' starting point; test_kms_authorities and test_crl define their own `pool` / `token`).
@pytest.fixture
def pool(admin_key: str) -> str:
    reply = call(
        "/api/compute/pools/create", {**POOL, "siteId": "s1", "name": "GPU", "workspaceId": "w"}, admin_key
    )
    assert reply.status == 200, reply.body
    return "gpu"


@pytest.fixture
def token(admin_key: str, pool: str) -> str:
    reply = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 10}, admin_key)
    assert reply.status == 200, reply.body
    return str(reply.body["token"])
