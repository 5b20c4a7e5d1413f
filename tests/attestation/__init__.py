"""Attestation data the operators maintain per site: the discovery inventory and the TPM
allow-list. `call` runs these route families through the real authorizer and their own functions
(tests.support.call knows the older families only) and hands every other family to it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from joinplane import aws
from tests import support
from tests.support import LambdaContext, Reply, http_event, load_function

FOLDER_OF = {"discovery": "discovery", "tpmAllowList": "tpm_allow_list"}


def call(path: str, body: Any, key: str | None, *, raw: bytes | None = None) -> Reply:
    family = path.split("/")[3]
    if family not in FOLDER_OF:
        return support.call(path, body, key, raw=raw)
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    authorizer = load_function("authorizer").lambda_handler(http_event(path, b"", headers), LambdaContext())
    assert authorizer["isAuthorized"] is True
    payload = raw if raw is not None else json.dumps(body).encode()
    event = http_event(path, payload, headers, authorizer=authorizer["context"])
    result = load_function(FOLDER_OF[family]).lambda_handler(event, LambdaContext())
    return Reply(result["statusCode"], json.loads(result["body"]) if result.get("body") else None)


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
