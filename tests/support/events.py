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
    "identity": "5e" * 32,  # the SHA-256 of its public key
    "certificateSerial": "4b1d0c5e9a7f3e21",
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
    """Every transition that publishes, one per detail-type at least (the admin ones included)."""
    return machine_transitions() + admin_transitions()


def machine_transitions() -> list[tuple[str, dict | None, dict]]:
    approved = {
        **REQUEST,
        "state": "approved",
        "decidedAt": "2026-11-30T10:05:00Z",
        "decidedBy": "key_1",
        "reason": "ok",
        "poolId": "gpu",
        "approvals": {"key_1": {"at": "2026-11-30T10:05:00Z", "reason": "ok"}},
        "approvalsRequired": 1,
    }
    # One of two approvals: the request stays pending.
    half_approved = {
        **REQUEST,
        "approvals": {"key_2": {"at": "2026-11-30T10:04:00Z"}},
        "approvalsRequired": 2,
    }
    return [
        ("security.join-request.created", None, REQUEST),
        ("security.join-request.approval-recorded", REQUEST, half_approved),
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
            {
                **MACHINE,
                "tokenGeneration": 2,
                "rejoinedAt": "2026-11-30T11:00:00Z",
                "certificateSerial": "5c2e1d6f0b8a4f32",
            },
        ),
        (
            "security.machine.key-rotated",
            MACHINE,
            {
                **MACHINE,
                "identity": "7a" * 32,
                "certificateSerial": "6d3f2e7a1c9b5a43",
                "lastRenewedAt": "2026-11-30T11:30:00Z",
            },
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


# --- what operators administer -------------------------------------------------------------------

ACTOR = "key_01m8nyzdwtnzdtnbrhz7qbzdv5"  # the operator API key that acts (an id, never a secret)
TOKEN = {
    "pk": "JOINTOKEN#jtok_01m8nyzdwtnzdtnbrhz7qbzdv6",
    "sk": "JOINTOKEN",
    "gsi1pk": "TENANT#acme#POOL#gpu#JOINTOKENS",
    "gsi1sk": "jtok_01m8nyzdwtnzdtnbrhz7qbzdv6",
    "tokenId": "jtok_01m8nyzdwtnzdtnbrhz7qbzdv6",
    "tenantId": "acme",
    "siteId": "s1",
    "poolId": "gpu",
    "secretSha256": "9f" * 32,
    "description": "rack 4",
    "state": "active",
    "expiresAt": "2026-12-01T10:00:00Z",
    "expiresAtEpoch": 1796119200,
    "maxUses": 5,
    "usesRemaining": 5,
    "requireApproval": False,
    "attestation": {"discovery": "off", "tpm": "off", "identity": "key"},
    "createdAt": "2026-11-30T10:00:00Z",
    "createdBy": ACTOR,
    "ttl": 1799143200,
}
API_KEY = {
    "pk": "APIKEY#key_01m8nyzdwtnzdtnbrhz7qbzdv7",
    "sk": "APIKEY",
    "gsi1pk": "TENANT#acme#APIKEYS",
    "gsi1sk": "key_01m8nyzdwtnzdtnbrhz7qbzdv7",
    "keyId": "key_01m8nyzdwtnzdtnbrhz7qbzdv7",
    "tenantId": "acme",
    "grants": ["compute:pools:read@compute-pool/gpu"],
    "description": "ci",
    "secretSha256": "8e" * 32,
    "state": "active",
    "createdAt": "2026-11-30T10:00:00Z",
    "createdBy": ACTOR,
}
POOL = {
    "pk": "TENANT#acme",
    "sk": "POOL#gpu",
    "tenantId": "acme",
    "poolId": "gpu",
    "siteId": "s1",
    "name": "GPU",
    "workspaceId": "w",
    "state": "active",
    "bootstrap": {"billing": {"usageToken": "usage-secret"}},
    "joinRequestTtlSeconds": 86400,
    "certificateTtlSeconds": 86400,
    "createdAt": "2026-11-30T10:00:00Z",
    "updatedAt": "2026-11-30T10:00:00Z",
    "version": 1,
    "createdBy": ACTOR,
}
CLUSTER_KEY = {
    "pk": "CLUSTERKEY#ckey_01m8nyzdwtnzdtnbrhz7qbzdv8",
    "sk": "CLUSTERKEY",
    "keyId": "ckey_01m8nyzdwtnzdtnbrhz7qbzdv8",
    "tenantId": "acme",
    "poolId": "gpu",
    "siteId": "s1",
    "secretSha256": "7d" * 32,
    "state": "active",
    "createdAt": "2026-11-30T10:10:00Z",
    "createdBy": ACTOR,
    "previousKeyId": "ckey_01m8nyzdwtnzdtnbrhz7qbzdv9",
}
AUTHORITY = {
    "pk": "CA#ca_01m8nyzdwtnzdtnbrhz7qbzdv2",
    "sk": "CA",
    "caId": "ca_01m8nyzdwtnzdtnbrhz7qbzdv2",
    "tenantId": "acme",
    "siteId": "s1",
    "poolId": "gpu",
    "keyId": "1234abcd-12ab-34cd-56ef-1234567890ab",
    "certificatePem": "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n",
    "chainPem": [],
    "state": "active",
    "createdAt": "2026-11-30T10:20:00Z",
    "createdBy": "join",
    "activatedAt": "2026-11-30T10:20:00Z",
}
ROTATED_AUTHORITY = {
    **AUTHORITY,
    "pk": "CA#ca_01m8nz0k3f6q9s2v5x8z1c4e7h",
    "caId": "ca_01m8nz0k3f6q9s2v5x8z1c4e7h",
    "createdBy": ACTOR,
    "previousCaId": AUTHORITY["caId"],
}
PENDING_AUTHORITY = {
    **AUTHORITY,
    "pk": "CA#ca_01m8nz3r6t9w2y5b8d1f4h7k0m",
    "caId": "ca_01m8nz3r6t9w2y5b8d1f4h7k0m",
    "keyId": "5678efgh-56ef-78ab-90cd-567890abcdef",
    "certificatePem": "",
    "csrPem": "-----BEGIN CERTIFICATE REQUEST-----\n...\n-----END CERTIFICATE REQUEST-----\n",
    "state": "pending",
    "createdAt": "2026-12-01T08:00:00Z",
    "createdBy": ACTOR,
    "gsi1sk": "2026-12-01T08:00:00Z#ca_01m8nz3r6t9w2y5b8d1f4h7k0m",
}
del PENDING_AUTHORITY["activatedAt"]
PREPARED_AUTHORITY = {
    **ROTATED_AUTHORITY,
    "pk": "CA#ca_01m8nz9y2a5d8g1j4m7q0s3v6x",
    "caId": "ca_01m8nz9y2a5d8g1j4m7q0s3v6x",
    "state": "prepared",
    "createdAt": "2026-12-01T10:00:00Z",
    "activatesAt": 1796205600,
}
del PREPARED_AUTHORITY["activatedAt"]
ACTIVATED_AUTHORITY = {
    **PREPARED_AUTHORITY,
    "state": "active",
    "activatedAt": "2026-12-02T10:00:07Z",
    "activatedBy": "schedule",
}
# Another pool's CA, activated by an operator's call before its propagation period ended.
ACTIVATED_BY_HAND = {
    "pk": "CA#ca_01m8nzc5e8h1k4n7r0t3w6y9b2",
    "caId": "ca_01m8nzc5e8h1k4n7r0t3w6y9b2",
    "poolId": "cpu",
}
IMPORTED_AUTHORITY = {
    **PENDING_AUTHORITY,
    "certificatePem": "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n",
    "chainPem": ["-----BEGIN CERTIFICATE-----\n...root...\n-----END CERTIFICATE-----\n"],
    "state": "active",
    "activatedAt": "2026-12-01T09:30:00Z",
    "activatedBy": "key_01m8nz6v9x2z5c8e1g4j7m0p3r",
    "previousCaId": AUTHORITY["caId"],
}
RETIRED_AUTHORITY = {
    **AUTHORITY,
    "state": "retired",
    "retiredAt": "2026-12-01T09:00:00Z",
    "bundleUntil": 1799158500,
}

ENTRY = {
    "pk": "SITE#acme#s1#DISCOVERY",
    "sk": "ENTRY#disc_01m8nyzdwtnzdtnbrhz7qbzdva",
    "entryId": "disc_01m8nyzdwtnzdtnbrhz7qbzdva",
    "tenantId": "acme",
    "siteId": "s1",
    "serialNumber": "PF2ABCDE",
    "macAddresses": ["00:1a:2b:3c:4d:5e"],
    "hostname": "node-4",
    "description": "",
    "createdAt": "2026-11-30T10:00:00Z",
    "createdBy": ACTOR,
}
EK = {
    "pk": "SITE#acme#s1#TPMALLOW",
    "sk": "EK#" + "ab" * 32,
    "tenantId": "acme",
    "siteId": "s1",
    "ekPublicKeySha256": "ab" * 32,
    "addedFrom": "hash",
    "description": "",
    "createdAt": "2026-11-30T10:00:00Z",
    "createdBy": ACTOR,
}


def removal(kind: str, subject: str, added: dict[str, Any]) -> dict[str, Any]:
    sk = ("ENTRY#" if kind == "discovery-entry" else "EK#") + subject
    return {
        "pk": "REMOVED#acme#s1",
        "sk": sk if kind == "discovery-entry" else f"{sk}#{added['createdAt']}",
        "kind": kind,
        "tenantId": "acme",
        "siteId": "s1",
        "subjectId": subject,
        "addedAt": added["createdAt"],
        "addedBy": added["createdBy"],
        "removedAt": "2026-11-30T11:00:00Z",
        "removedBy": ACTOR,
        "ttl": 1796727600,
    }


def admin_transitions() -> list[tuple[str, dict | None, dict]]:
    revoked = {"state": "revoked", "revokedAt": "2026-11-30T11:00:00Z", "revokedBy": ACTOR}
    return [
        ("security.join-token.created", None, TOKEN),
        ("security.join-token.revoked", TOKEN, {**TOKEN, **revoked}),
        ("security.api-key.created", None, API_KEY),
        ("security.api-key.revoked", API_KEY, {**API_KEY, **revoked}),
        ("security.pool.created", None, POOL),
        (
            "security.pool.updated",
            POOL,
            {
                **POOL,
                "name": "GPU racks",
                "bootstrap": {"billing": {"usageToken": "rotated-secret"}},
                "version": 2,
                "updatedAt": "2026-11-30T10:30:00Z",
                "updatedBy": ACTOR,
            },
        ),
        (
            "security.pool.archived",
            POOL,
            {
                **POOL,
                "state": "archived",
                "version": 2,
                "archivedAt": "2026-11-30T12:00:00Z",
                "archivedBy": ACTOR,
                "updatedAt": "2026-11-30T12:00:00Z",
                "updatedBy": ACTOR,
            },
        ),
        ("security.cluster-key.rotated", None, CLUSTER_KEY),
        ("security.certificate-authority.created", None, AUTHORITY),
        ("security.certificate-authority.rotated", None, ROTATED_AUTHORITY),
        ("security.certificate-authority.requested", None, PENDING_AUTHORITY),
        ("security.certificate-authority.rotated", PENDING_AUTHORITY, IMPORTED_AUTHORITY),
        ("security.certificate-authority.prepared", None, PREPARED_AUTHORITY),
        (
            "security.certificate-authority.prepared",
            PENDING_AUTHORITY,
            {
                **{k: v for k, v in IMPORTED_AUTHORITY.items() if k not in ("activatedAt", "activatedBy")},
                "state": "prepared",
                "activatesAt": 1796205600,
                "importedAt": "2026-12-01T09:30:00Z",
                "importedBy": ACTOR,
            },
        ),
        ("security.certificate-authority.activated", PREPARED_AUTHORITY, ACTIVATED_AUTHORITY),
        (
            "security.certificate-authority.activated",
            {**PREPARED_AUTHORITY, **ACTIVATED_BY_HAND},
            {**ACTIVATED_AUTHORITY, **ACTIVATED_BY_HAND, "activatedBy": ACTOR},
        ),
        (
            "security.certificate-authority.created",
            PENDING_AUTHORITY,
            {key: value for key, value in IMPORTED_AUTHORITY.items() if key != "previousCaId"},
        ),
        (
            "security.certificate-authority.expired",
            RETIRED_AUTHORITY,
            {**RETIRED_AUTHORITY, "state": "expired", "expiredAt": "2027-01-05T14:20:00Z"},
        ),
        ("security.discovery-entry.registered", None, ENTRY),
        ("security.discovery-entry.removed", None, removal("discovery-entry", ENTRY["entryId"], ENTRY)),
        ("security.tpm-key.allowed", None, EK),
        ("security.tpm-key.removed", None, removal("tpm-key", EK["ekPublicKeySha256"], EK)),
    ]


def admin_non_transitions() -> list[tuple[dict, dict]]:
    """Writes to administered items that are no security transition: no event."""
    return [
        (TOKEN, {**TOKEN, "usesRemaining": 4}),  # a join spent a use
        (POOL, {**POOL, "clusterKeyId": CLUSTER_KEY["keyId"], "clusterKeyRotatedAt": "x"}),  # the rotation's
        (
            CLUSTER_KEY,
            {**CLUSTER_KEY, "state": "rotated", "rotatedAt": "2026-11-30T11:00:00Z", "ttl": 1},
        ),  # retired by the next rotation, whose new key's INSERT is the event
        ({**API_KEY, "state": "revoked"}, {**API_KEY, "state": "revoked", "description": "x"}),
        (AUTHORITY, RETIRED_AUTHORITY),  # retired by a rotation, whose new CA's INSERT is the event
        # abandoned for a newer request, whose INSERT is the event
        (PENDING_AUTHORITY, {**PENDING_AUTHORITY, "state": "abandoned"}),
    ]


# --- the table's own stream, as the publisher gets it ---------------------------------------------


def publisher_filters() -> list[Any]:
    """template.yaml's FilterCriteria of the publisher's stream, as predicates on a record."""
    from moto.events.models import EventPattern, EventPatternParser

    from joinplane_local.template import load

    function = load()["Resources"]["EventPublisherFunction"]["Properties"]
    (source,) = [e for e in function["Events"].values() if e["Type"] == "DynamoDB"]
    patterns = [f["Pattern"] for f in source["Properties"]["FilterCriteria"]["Filters"]]
    return [EventPattern(p, EventPatternParser(p).parse()) for p in patterns]


def table_stream() -> list[dict[str, Any]]:
    """Every change of the test's table that reaches the publisher, oldest first, as Lambda hands
    it over: read from the table's stream (moto), through the template's FilterCriteria."""
    from joinplane import aws
    from joinplane.settings import settings
    from joinplane_local.stream_poller import lambda_stream_record

    arn = aws.client("dynamodb").describe_table(TableName=settings().table_name)["Table"]["LatestStreamArn"]
    streams = aws.client("dynamodbstreams")
    filters = publisher_filters()
    found: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            for raw in page["Records"]:
                change = lambda_stream_record(raw, arn, "us-east-1")
                data = change["dynamodb"]
                # DynamoDB writes no record for a write that changed nothing; moto does.
                if change["eventName"] == "MODIFY" and data.get("NewImage") == data.get("OldImage"):
                    continue
                if any(f.matches_event(change) for f in filters):
                    found.append(change)
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return found


class Recorder:
    """The publisher's EventBridge, as the audit rule sees it: each published event is recorded
    in the audit trail (the consumer's code) and kept for the test to read."""

    def __init__(self) -> None:
        self.published: list[Any] = []

    def publish(self, batch: list[Any]) -> None:
        from joinplane import audit_trail

        for event in batch:
            audit_trail.record(
                {"source": "joinplane", "detail-type": event.detail_type, "detail": event.detail}
            )
        self.published += batch


def publish_table_stream() -> list[Any]:
    """Run the publisher over the whole stream so far (events the audit trail already holds are
    stored once); the events it published, oldest first."""
    from joinplane import events

    recorder = Recorder()
    assert events.publish_stream_batch(table_stream(), recorder) == []
    return recorder.published
