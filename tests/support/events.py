"""Table items and the stream records DynamoDB makes of their changes, for the event tests: one
item per kind that publishes, each transition that publishes, and the event schemas they meet."""

from __future__ import annotations

import json
from typing import Any

from joinplane.dal import dynamo

from .functions import ROOT

SCHEMAS = {
    p.name.removesuffix(".schema.json"): json.loads(p.read_text())
    for p in (ROOT / "shared" / "events").glob("*.schema.json")
}

REQUEST = {
    "pk": "JREQ#jreq_01m8nyzdwtnzdtnbrhz7qbzdv4",
    "sk": "JREQ",
    "requestId": "jreq_01m8nyzdwtnzdtnbrhz7qbzdv4",
    "tenantId": "acme",
    "siteId": "s1",
    "poolId": "gpu",
    "state": "pending",
    "createdAt": "2026-11-30T10:00:00Z",
    "expiresAt": "2026-12-01T10:00:00Z",
    "expiresAtEpoch": 1,
    "reasons": [{"attestor": "token", "code": "approval_required", "message": "m"}],
}
MACHINE = {
    "pk": "MACHINE#mach_01m8nyzdzjpxb1y6bbpfkyxvqx",
    "sk": "MACHINE",
    "machineId": "mach_01m8nyzdzjpxb1y6bbpfkyxvqx",
    "tenantId": "acme",
    "siteId": "s1",
    "poolId": "gpu",
    "state": "active",
    "tokenGeneration": 1,
    "joinedAt": "2026-11-30T10:00:01Z",
    "tokenId": "jtok_x",
    "requestId": None,
}


def record(old: dict[str, Any] | None, new: dict[str, Any] | None, sequence: str = "1") -> dict[str, Any]:
    change: dict[str, Any] = {
        "SequenceNumber": sequence,
        "Keys": dynamo.serialize({"pk": (new or old)["pk"], "sk": (new or old)["sk"]}),
    }
    if new is not None:
        change["NewImage"] = dynamo.serialize(new)
    if old is not None:
        change["OldImage"] = dynamo.serialize(old)
    return {"eventName": "MODIFY" if old and new else ("INSERT" if new else "REMOVE"), "dynamodb": change}


def transitions() -> list[tuple[str, dict | None, dict]]:
    approved = {
        **REQUEST,
        "state": "approved",
        "decidedAt": "2026-11-30T10:05:00Z",
        "decidedBy": "key_1",
        "reason": "ok",
        "poolId": "gpu",
    }
    return [
        ("security.join-request.created", None, REQUEST),
        ("security.join-request.approved", REQUEST, approved),
        ("security.join-request.rejected", approved, {**approved, "state": "rejected"}),
        (
            "security.join-request.consumed",
            approved,
            {
                **approved,
                "state": "consumed",
                "consumedAt": "2026-11-30T10:06:00Z",
                "machineId": MACHINE["machineId"],
            },
        ),
        (
            "security.join-request.expired",
            REQUEST,
            {**REQUEST, "state": "expired", "expiredAt": "2026-12-01T10:00:00Z"},
        ),
        ("security.machine.joined", None, MACHINE),
        (
            "security.machine.joined",
            MACHINE,
            {**MACHINE, "tokenGeneration": 2, "rejoinedAt": "2026-11-30T11:00:00Z"},
        ),
        (
            "security.machine.revoked",
            MACHINE,
            {
                **MACHINE,
                "state": "revoked",
                "revokedAt": "2026-11-30T12:00:00Z",
                "revokedBy": "key_2",
                "revokeReason": "stolen",
            },
        ),
        (
            "security.cluster.node-joined",
            None,
            {
                "pk": "CLUSTERNODE#acme#gpu#n1",
                "sk": "NODE",
                "tenantId": "acme",
                "siteId": "s1",
                "poolId": "gpu",
                "nodeId": "n1",
                "nodeIp": "10.0.0.1",
                "nodeVersion": "0.9",
                "digest": "ab",
                "guestCount": 3,
                "joinedAt": "2026-11-30T10:00:00Z",
            },
        ),
    ]
