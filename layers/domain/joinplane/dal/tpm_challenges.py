"""Credential-activation challenges in the table: `TPMCHALLENGE#<tenantId>#<identity>` /
`TPMCHALLENGE`, one per join identity (a new challenge for the key replaces the one before). The
item holds only the SHA-256 of the secret, never the secret, with what the activation is bound to:
the token, the EK and the AK's name. It expires with the attempt (`ttl` lets DynamoDB delete it
afterwards; `expiresAtEpoch` is what the consuming condition reads, so an expired challenge is
dead before DynamoDB gets round to deleting it).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from joinplane import clock
from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

PREFIX = "TPMCHALLENGE#"


class ChallengeRecord(NamedTuple):
    tenant_id: str
    identity: str  # the join identity: SHA-256 of the CSR's SubjectPublicKeyInfo
    token_id: str
    secret_sha256: str
    ek_sha256: str
    ak_name: str  # hex of the AK's TPM name (nameAlg || digest)
    expires_at_epoch: int

    def to_item(self) -> Item:
        pk, sk = key_of(self.tenant_id, self.identity)
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "identity": self.identity,
            "tokenId": self.token_id,
            "secretSha256": self.secret_sha256,
            "ekSha256": self.ek_sha256,
            "akName": self.ak_name,
            "expiresAtEpoch": self.expires_at_epoch,
            "ttl": self.expires_at_epoch,
        }

    @classmethod
    def from_item(cls, item: Item) -> ChallengeRecord:
        return cls(
            tenant_id=item["tenantId"],
            identity=item["identity"],
            token_id=item["tokenId"],
            secret_sha256=item["secretSha256"],
            ek_sha256=item["ekSha256"],
            ak_name=item["akName"],
            expires_at_epoch=int(item["expiresAtEpoch"]),
        )


def key_of(tenant_id: str, identity: str) -> tuple[str, str]:
    return f"{PREFIX}{tenant_id}#{identity}", "TPMCHALLENGE"


def put(challenge: ChallengeRecord) -> None:
    """One PutItem: the identity's challenge, replacing any earlier one."""
    dynamo.put(challenge.to_item())


def consume(expected: ChallengeRecord, now: datetime) -> ChallengeRecord | None:
    """Delete the identity's challenge if it is exactly `expected` (the secret's digest, token, EK
    and AK name) and unexpired: one conditional DeleteItem, so of concurrent retries with the same
    secret exactly one gets it. The challenge as it was, or None when there was no such challenge."""
    pk, sk = key_of(expected.tenant_id, expected.identity)
    try:
        old = dynamo.delete(
            pk,
            sk,
            condition="secretSha256 = :secret AND tokenId = :token AND ekSha256 = :ek AND akName = :ak "
            "AND expiresAtEpoch > :now",
            values={
                ":secret": expected.secret_sha256,
                ":token": expected.token_id,
                ":ek": expected.ek_sha256,
                ":ak": expected.ak_name,
                ":now": clock.seconds(now),
            },
        )
    except dynamo.ConditionFailed:
        return None
    return ChallengeRecord.from_item(old) if old else None
