"""Attestation data the operators maintain per site (the discovery inventory, the TPM allow-list):
keys with given grants, sites, and the DynamoDB calls a request makes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from joinplane import aws

from .http import call


def make_key(admin: str, *grants: str, tenant: str = "acme") -> str:
    reply = call("/api/compute/apiKeys/create", {"tenantId": tenant, "grants": list(grants)}, admin)
    assert reply.status == 200, reply.body
    return str(reply.body["key"])


def make_site(admin: str, site: str, *, tenant: str = "acme", pool: str | None = None) -> None:
    """A site exists once a pool names it."""
    body = {
        "tenantId": tenant,
        "poolId": pool or f"{site}-pool",
        "siteId": site,
        "name": "P",
        "workspaceId": "ws",
    }
    reply = call("/api/compute/pools/create", body, admin)
    assert reply.status == 200, reply.body


@contextlib.contextmanager
def dynamodb_calls() -> Iterator[list[str]]:
    """The DynamoDB operations made inside the block, by name, as botocore sends them."""
    calls: list[str] = []
    events = aws.client("dynamodb").meta.events

    def record(model: Any, **_: Any) -> None:
        calls.append(model.name)

    events.register("before-call.dynamodb.*", record, unique_id="attestation-call-counter")
    try:
        yield calls
    finally:
        events.unregister("before-call.dynamodb.*", unique_id="attestation-call-counter")
