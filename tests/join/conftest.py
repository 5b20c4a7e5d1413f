"""Fixtures for machine joins: a pool, join tokens, and keys/CSRs made with the openssl CLI."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import call

KEY_ARGS = {
    "ec": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
    "p384": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
    "ed25519": ["-newkey", "ed25519"],
    "rsa2048": ["-newkey", "rsa:2048"],
    "rsa1024": ["-newkey", "rsa:1024"],
}


class Machine:
    """A would-be machine: its private key on disk and CSRs for it, made with openssl."""

    def __init__(self, directory: Path, kind: str = "ec") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = directory / "machine.key"
        self.csr_path = directory / "machine.csr"
        subprocess.run(
            [
                "openssl",
                "req",
                "-new",
                *KEY_ARGS[kind],
                "-nodes",
                "-subj",
                "/CN=ignored",
                "-keyout",
                str(self.key),
                "-out",
                str(self.csr_path),
            ],
            check=True,
            capture_output=True,
        )
        self.csr = self.csr_path.read_text()

    def new_csr(self) -> str:
        """Another CSR for the same key (what a retry after a crash would send)."""
        out = subprocess.run(
            ["openssl", "req", "-new", "-key", str(self.key), "-subj", "/CN=again"],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout


@pytest.fixture
def machine_factory(tmp_path: Path) -> Callable[..., Machine]:
    count = 0

    def make(kind: str = "ec") -> Machine:
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


def openssl_verify(tmp_path: Path, ca_pem: str, cert_pem: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ca.crt").write_text(ca_pem)
    (tmp_path / "machine.crt").write_text(cert_pem)
    return subprocess.run(
        [
            "openssl",
            "verify",
            "-purpose",
            "sslclient",
            "-CAfile",
            str(tmp_path / "ca.crt"),
            str(tmp_path / "machine.crt"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
