"""Typed records of the data-access layer: stored items keep their attribute names and key formats
(no migration), and the states derived from a record read the clock only through their argument."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from joinplane.dal.apikeys import ApiKeyRecord
from joinplane.dal.machines import MachineRecord
from joinplane.dal.pools import PoolRecord
from joinplane.dal.requests import JoinRequestRecord
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.dal.tpm_challenges import ChallengeRecord
from joinplane.dal.tpm_manufacturers import ManufacturerRecord

# Items as the table holds them today, attribute for attribute.
TOKEN_ITEM: dict[str, Any] = {
    "pk": "JOINTOKEN#jtok_01hzz",
    "sk": "JOINTOKEN",
    "gsi1pk": "TENANT#acme#POOL#gpu#JOINTOKENS",
    "gsi1sk": "jtok_01hzz",
    "tokenId": "jtok_01hzz",
    "tenantId": "acme",
    "siteId": "eu-1",
    "poolId": "gpu",
    "secretSha256": "ab" * 32,
    "description": "rack 4",
    "state": "active",
    "expiresAt": "2026-01-02T00:00:00Z",
    "expiresAtEpoch": 1_767_312_000,
    "maxUses": 3,
    "usesRemaining": 2,
    "requireApproval": True,
    "attestation": {
        "discovery": "defer-unknown",
        "tpm": "require",
        "identity": "key",
        "tpmTrust": "manufacturer",
        "tpmRejoin": "activate",
    },
    "createdAt": "2026-01-01T00:00:00Z",
    "createdBy": "key_01hzz",
    "ttl": 1_767_312_000 + 35 * 86_400,
}

REQUEST_ITEM: dict[str, Any] = {
    "pk": "JREQ#jreq_01hzz",
    "sk": "JREQ",
    "gsi1pk": "JREQS#acme#SITE#eu-1#pending",
    "gsi1sk": "jreq_01hzz",
    "gsi2pk": "OPENJREQ#3",
    "gsi2sk": "001767312000#jreq_01hzz",
    "gsi3pk": "JREQQ#acme",
    "gsi3sk": "jreq_01hzz",
    "requestId": "jreq_01hzz",
    "tenantId": "acme",
    "siteId": "eu-1",
    "tokenId": "jtok_01hzz",
    "identity": "spki-00",
    "state": "pending",
    "reasons": [{"attestor": "token", "code": "site_token", "message": "a site token defers"}],
    # Every fact a join writes (joinplane.machines.facts_of): the stored document is whole.
    "machine": {
        "fingerprint": "fp",
        "hostname": "h1",
        "os": "linux",
        "arch": "amd64",
        "cpuCount": 64,
        "memoryMb": 524_288,
        "gpu": ["H100"],
        "gpuCount": 1,
        "gpuIds": ["GPU-0"],
        "executor": "containerd",
        "cpuMillicores": 64_000,
        "networkSlotPoolSize": 0,
        "containerStartConcurrency": 4,
        "capabilities": ["gpu"],
        "schedulable": True,
        "workerImage": "",
        "hardware": {"serialNumber": "PF2ABCDE", "systemUuid": "", "macAddresses": ["aa:bb:cc:dd:ee:f0"]},
        "tpm": {
            "ekPublicKeySha256": "ef" * 32,
            "activated": True,
            "verifiedBy": "manufacturer",
            "manufacturer": "CN=Acme TPM Root CA",
            "ekCertificateIssuer": "CN=Acme TPM EK CA",
            "ekCertificateSerial": "1f",
            "akName": "000b" + "ab" * 32,
        },
        "preflight": [{"name": "disk", "ok": True, "message": "", "severity": ""}],
    },
    "csrPublicKeySha256": "cd" * 32,
    "createdAt": "2026-01-01T00:00:00Z",
    "expiresAt": "2026-01-02T00:00:00Z",
    "expiresAtEpoch": 1_767_312_000,
    "tokenDescription": "rack 12 batch",
    "sourceIp": "203.0.113.7",
    "verdicts": [{"attestor": "token", "verdict": "defer"}, {"attestor": "tpm", "verdict": "admit"}],
    "approvals": {
        "key_b": {"at": "2026-11-30T10:01:00Z", "reason": "serials checked", "seq": 1},
        "key_a": {"at": "2026-11-30T10:01:00Z", "seq": 2},
    },
    "approvalsRequired": 3,
    "ttl": 1_767_312_000 + 30 * 86_400,
}

MACHINE_ITEM: dict[str, Any] = {
    "pk": "MACHINE#mach_01hzz",
    "sk": "MACHINE",
    "gsi1pk": "MACHINES#acme#gpu",
    "gsi1sk": "mach_01hzz",
    "machineId": "mach_01hzz",
    "tenantId": "acme",
    "siteId": "eu-1",
    "poolId": "gpu",
    "identity": "spki-00",
    "tokenId": "jtok_01hzz",
    "requestId": "jreq_01hzz",
    "state": "revoked",
    "machineTokenSha256": "ab" * 32,
    "tokenGeneration": 2,
    "schedulable": False,
    "facts": REQUEST_ITEM["machine"],
    "workerImageBaseline": "w:1",
    "claims": [["serial", "PF2ABCDE"]],
    "certificateSerial": "0a1b",
    "certificateExpiresAt": "2026-01-02T00:00:00Z",
    "joinedAt": "2026-01-01T00:00:00Z",
    "rejoinedAt": "2026-01-01T01:00:00Z",
    "revokedAt": "2026-01-01T02:00:00Z",
    "revokedBy": "key_01hzz",
    "revokeReason": "cloned",
}

# A pool whose operator set some bootstrap defaults (only those are stored), cluster settings and a
# join policy.
POOL_ITEM: dict[str, Any] = {
    "pk": "TENANT#acme",
    "sk": "POOL#gpu",
    "tenantId": "acme",
    "poolId": "gpu",
    "siteId": "eu-1",
    "name": "GPU",
    "workspaceId": "ws",
    "state": "active",
    "bootstrap": {
        "controlplaneGrpcPort": 443,
        "disabledServices": ["metrics"],
        "telemetry": {"enabled": True, "logs": {"destination": "cw"}},
        "billing": {"billableMarginPct": 12.5},
        "workerImage": "w:1",
    },
    "joinRequestTtlSeconds": 3600,
    "certificateTtlSeconds": 86_400,
    "caPropagationSeconds": 86_400,
    "approvalsRequired": 2,
    "cluster": {"requiredNodeVersion": "0.9.1"},
    "joinPolicy": [
        {"name": "gpu", "when": 'request.hostname.startsWith("gpu-")', "decision": "approve", "reason": ""},
        {"name": "night", "when": "now.getHours() < 6", "decision": "deny", "reason": "not at night"},
    ],
    "createdAt": "2026-01-01T00:00:00Z",
    "updatedAt": "2026-01-01T00:00:00Z",
    "version": 3,
}

API_KEY_ITEM: dict[str, Any] = {
    "pk": "APIKEY#key_01hzz",
    "sk": "APIKEY",
    "gsi1pk": "TENANT#acme#APIKEYS",
    "gsi1sk": "key_01hzz",
    "keyId": "key_01hzz",
    "tenantId": "acme",
    "grants": ["compute:*@tenant"],
    "description": "",
    "secretSha256": "ef" * 32,
    "state": "active",
    "createdAt": "2026-01-01T00:00:00Z",
    "createdBy": "bootstrap",
}


# A TPM join's challenge: only the secret's digest, and what it is bound to.
CHALLENGE_ITEM: dict[str, Any] = {
    "pk": "TPMCHALLENGE#acme#" + "a" * 64,
    "sk": "TPMCHALLENGE",
    "tenantId": "acme",
    "identity": "a" * 64,
    "tokenId": "jtok_01hzz",
    "secretSha256": "b" * 64,
    "ekSha256": "c" * 64,
    "akName": "000b" + "d" * 64,
    "expiresAtEpoch": 1_800_000_300,
    "ttl": 1_800_000_300,
}

MANUFACTURER_ITEM: dict[str, Any] = {
    "pk": "SITE#acme#eu-1#TPMCA",
    "sk": "CA#" + "e" * 64,
    "tenantId": "acme",
    "siteId": "eu-1",
    "certificateSha256": "e" * 64,
    "certificatePem": "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n",
    "subject": "CN=Acme TPM Root CA",
    "issuer": "CN=Acme TPM Root CA",
    "root": True,
    "notAfter": "2036-01-01T00:00:00Z",
    "description": "Acme",
    "createdAt": "2026-01-01T00:00:00Z",
    "createdBy": "key_01hzz",
}


def stored(item: dict[str, Any]) -> dict[str, Any]:
    """What DynamoDB keeps of an item: None-valued attributes are never written."""
    return {k: v for k, v in item.items() if v is not None}


@pytest.mark.parametrize(
    ("record", "item"),
    [
        (JoinTokenRecord, TOKEN_ITEM),
        (JoinRequestRecord, REQUEST_ITEM),
        (ApiKeyRecord, API_KEY_ITEM),
        (PoolRecord, POOL_ITEM),
        (MachineRecord, MACHINE_ITEM),
        (ChallengeRecord, CHALLENGE_ITEM),
        (ManufacturerRecord, MANUFACTURER_ITEM),
    ],
    ids=["join token", "join request", "api key", "pool", "machine", "tpm challenge", "tpm manufacturer"],
)
def test_a_stored_item_reads_and_writes_back_unchanged(record: Any, item: dict[str, Any]) -> None:
    assert stored(record.from_item(item).to_item()) == item


def test_a_token_made_before_the_identity_setting_is_written_back_without_it() -> None:
    old = {**TOKEN_ITEM, "attestation": {"discovery": "off", "tpm": "off"}}
    token = JoinTokenRecord.from_item(old)
    assert token.attestation.identity_policy == "any"
    assert stored(token.to_item())["attestation"] == {"discovery": "off", "tpm": "off"}


EXPIRES = TOKEN_ITEM["expiresAtEpoch"]


@pytest.mark.parametrize(
    ("state", "uses", "now", "read"),
    [
        ("active", 2, EXPIRES - 1, "active"),
        ("active", 2, EXPIRES, "expired"),
        ("active", 0, EXPIRES - 1, "exhausted"),
        ("active", 0, EXPIRES, "expired"),
        ("revoked", 2, EXPIRES - 1, "revoked"),
        ("revoked", 0, EXPIRES + 1, "revoked"),
    ],
)
def test_a_tokens_state_is_read_at_the_time_given(state: str, uses: int, now: int, read: str) -> None:
    token = JoinTokenRecord.from_item({**TOKEN_ITEM, "state": state, "usesRemaining": uses})
    at = datetime.fromtimestamp(now, UTC)
    assert token.state_at(at) == read
    assert token.usable_at(at) == (uses > 0 and now < EXPIRES)


@pytest.mark.parametrize(
    ("state", "now", "read"),
    [
        ("pending", EXPIRES - 1, "pending"),
        ("pending", EXPIRES, "expired"),
        ("approved", EXPIRES, "expired"),
        ("rejected", EXPIRES + 1, "rejected"),
        ("consumed", EXPIRES + 1, "consumed"),
    ],
)
def test_an_open_request_past_its_expiry_reads_expired(state: str, now: int, read: str) -> None:
    at = datetime.fromtimestamp(now, UTC)
    assert JoinRequestRecord.from_item({**REQUEST_ITEM, "state": state}).state_at(at) == read


def test_a_closed_request_leaves_the_open_requests_index() -> None:
    request = JoinRequestRecord.from_item({**REQUEST_ITEM, "state": "rejected"})
    item = request.to_item()
    assert "gsi2pk" not in item and "gsi2sk" not in item
    assert "gsi3pk" not in item and "gsi3sk" not in item  # nor its tenant's queue
    assert item["gsi1pk"] == "JREQS#acme#SITE#eu-1#rejected"


def test_a_stored_item_without_a_required_attribute_is_refused() -> None:
    # A record's attribute table (dal.items) still names what an item cannot lack
    lacking = {k: v for k, v in MACHINE_ITEM.items() if k != "machineTokenSha256"}
    with pytest.raises(KeyError, match="machineTokenSha256"):
        MachineRecord.from_item(lacking)


def test_a_requests_approvals_read_in_the_order_they_were_given_within_one_second() -> None:
    # Given a request two keys approved in the same second, the second key's id sorting first
    # When it is read, Then its approvals are in the order they were recorded (their `seq`)
    approvals = JoinRequestRecord.from_item(REQUEST_ITEM).approvals
    assert [(a.by, a.seq) for a in approvals] == [("key_b", 1), ("key_a", 2)]
