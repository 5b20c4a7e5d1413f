"""Fixtures for machine joins: a pool, join tokens, and machines whose keys and CSRs the openssl CLI
makes (tests/support/csr.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import call
from tests.support.csr import csr_for_key, make_csr


class Machine:
    """A would-be machine: its private key on disk and CSRs for it, made with openssl."""

    def __init__(self, directory: Path, kind: str = "p256") -> None:
        self.dir = directory
        made = make_csr(directory, kind, "/CN=ignored", key_name="machine.key", csr_name="machine.csr")
        self.key, self.csr_path, self.csr = made.key_path, made.csr_path, made.pem

    def new_csr(self) -> str:
        """Another CSR for the same key (what a retry after a crash would send)."""
        return csr_for_key(self.key)


@pytest.fixture
def machine_factory(tmp_path: Path) -> Callable[..., Machine]:
    count = 0

    def make(kind: str = "p256") -> Machine:
        nonlocal count
        count += 1
        return Machine(tmp_path / f"m{count}", kind)

    return make


@pytest.fixture
def pool(admin_key: str) -> dict[str, Any]:
    reply = call(
        "/api/compute/pools/create",
        {
            "tenantId": "acme",
            "poolId": "gpu",
            "siteId": "rack-1",
            "name": "GPU pool",
            "workspaceId": "ws-42",
            "bootstrap": {
                "controlplaneHttpUrl": "https://cp.example",
                "controlplaneGrpcPort": 443,
                "imageClipVersion": 7,
                "workerImage": "worker:2.0",
            },
            "certificateTtlSeconds": 3600,
        },
        admin_key,
    )
    assert reply.status == 200, reply.body
    return dict(reply.body)


@pytest.fixture
def make_token(admin_key: str, pool: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    def make(**options: Any) -> dict[str, Any]:
        body = {"tenantId": "acme", "poolId": "gpu", **options}
        if "siteId" in options:
            body.pop("poolId")
        reply = call("/api/compute/joinTokens/create", body, admin_key)
        assert reply.status == 200, reply.body
        return dict(reply.body)

    return make


@pytest.fixture
def other_pool(admin_key: str, pool: dict[str, Any]) -> str:
    """A token (5 uses) of pool cpu, in another site (rack-2) of the same tenant."""
    reply = call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "cpu", "siteId": "rack-2", "name": "CPU pool", "workspaceId": "ws-9"},
        admin_key,
    )
    assert reply.status == 200
    return str(
        call(
            "/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "cpu", "maxUses": 5}, admin_key
        ).body["token"]
    )
