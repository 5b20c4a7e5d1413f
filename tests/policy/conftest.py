"""Fixtures for join policies: a pool of tenant `acme`, its tokens, and its policy set through
the operator API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support import call


@pytest.fixture
def pool(admin_key: str) -> dict[str, Any]:
    body = {"tenantId": "acme", "poolId": "gpu", "siteId": "lab", "name": "GPU", "workspaceId": "ws"}
    reply = call("/api/compute/pools/create", body, admin_key)
    assert reply.status == 200, reply.body
    return dict(reply.body)


@pytest.fixture
def make_token(admin_key: str, pool: dict[str, Any]) -> Callable[..., str]:
    """A join token of the pool (5 uses), its secret."""

    def make(**options: Any) -> str:
        body = {"tenantId": "acme", "poolId": "gpu", "maxUses": 5, **options}
        reply = call("/api/compute/joinTokens/create", body, admin_key)
        assert reply.status == 200, reply.body
        return str(reply.body["token"])

    return make


@pytest.fixture
def set_policy(admin_key: str, pool: dict[str, Any]) -> Callable[[Any], Any]:
    """pools/update with this `joinPolicy`: the reply."""

    def update(rules: Any) -> Any:
        return call(
            "/api/compute/pools/update", {"tenantId": "acme", "poolId": "gpu", "joinPolicy": rules}, admin_key
        )

    return update


def rule(name: str, when: str, decision: str, reason: str = "") -> dict[str, str]:
    return {"name": name, "when": when, "decision": decision, "reason": reason}
