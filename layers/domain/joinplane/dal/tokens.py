"""Join tokens in the table.

- Token: `JOINTOKEN#<tokenId>` / `JOINTOKEN`, found by the id embedded in its secret.
- Listing (gsi1): `TENANT#<t>#POOL#<p>#JOINTOKENS` for a pool token, `TENANT#<t>#SITE#<s>#JOINTOKENS`
  for a site token, sorted by tokenId.
- Uses are a counter, `usesRemaining`, that only a conditional write decrements (`spend_use`).
- `ttl`: the item outlives its expiry by `RETENTION_SECONDS` (DynamoDB TTL deletes it later), so
  deferred joins can still be matched to the token they came with.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NamedTuple

from joinplane import clock
from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

# A token's id is `jtok_<ulid>`; its secret `jpt_<the same ulid>_<random>` (joinplane.credentials),
# so a join finds the token by the id its secret carries, in one GetItem.
ID_PREFIX = "jtok"
SECRET_PREFIX = "jpt"
RETENTION_SECONDS = 35 * 86_400  # longest deferral (30 days) plus a margin

TokenState = Literal["active", "expired", "exhausted", "revoked"]  # as read, see `state_at`


class AwsRulesRecord(NamedTuple):
    """The AWS callers a token admits by the IAM join method (joinplane.aws_rules matches them)."""

    accounts: tuple[str, ...] = ()
    arns: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, stored: dict[str, Any] | None) -> AwsRulesRecord | None:
        if not stored:
            return None
        return cls(tuple(stored.get("accounts", ())), tuple(stored.get("arns", ())))

    def to_dict(self) -> dict[str, list[str]]:
        return {"accounts": list(self.accounts), "arns": list(self.arns)}


class AttestationPolicyRecord(NamedTuple):
    """What a token asks of the attestors. `identity` is None on tokens made before the setting
    existed (stored without it, shown without it; read as "any")."""

    discovery: Literal["off", "defer-unknown"] = "off"
    tpm: Literal["off", "defer-unlisted", "require"] = "off"
    identity: Literal["any", "key"] | None = None
    # None on tokens made before the TPM settings existed: read as "allow-list" and "any".
    tpm_trust: Literal["allow-list", "manufacturer"] | None = None
    tpm_rejoin: Literal["any", "activate"] | None = None
    # None: the token takes no AWS IAM joins (and joins with its secret are not asked for one).
    aws: AwsRulesRecord | None = None

    @property
    def identity_policy(self) -> str:
        return self.identity or "any"

    @property
    def trusts_manufacturers(self) -> bool:
        return self.tpm_trust == "manufacturer"

    @property
    def rejoin_activates(self) -> bool:
        return self.tpm_rejoin == "activate"

    @classmethod
    def from_dict(cls, stored: dict[str, Any] | None) -> AttestationPolicyRecord:
        stored = stored or {}
        return cls(
            discovery=stored.get("discovery", "off"),
            tpm=stored.get("tpm", "off"),
            identity=stored.get("identity"),
            tpm_trust=stored.get("tpmTrust"),
            tpm_rejoin=stored.get("tpmRejoin"),
            aws=AwsRulesRecord.from_dict(stored.get("aws")),
        )

    def to_dict(self) -> dict[str, Any]:
        stored: dict[str, Any] = {"discovery": self.discovery, "tpm": self.tpm}
        if self.identity is not None:
            stored["identity"] = self.identity
        if self.tpm_trust is not None:
            stored["tpmTrust"] = self.tpm_trust
        if self.tpm_rejoin is not None:
            stored["tpmRejoin"] = self.tpm_rejoin
        if self.aws is not None:
            stored["aws"] = self.aws.to_dict()
        return stored


class JoinTokenRecord(NamedTuple):
    token_id: str
    tenant_id: str
    site_id: str
    pool_id: str | None  # None: a site token
    secret_sha256: str
    description: str
    state: str  # stored: "active" | "revoked"; see `state_at` for the state as read
    expires_at: str
    expires_at_epoch: int
    max_uses: int
    uses_remaining: int
    require_approval: bool
    attestation: AttestationPolicyRecord
    created_at: str
    created_by: str | None = None
    revoked_at: str | None = None
    revoked_by: str | None = None

    @property
    def ttl(self) -> int:
        return self.expires_at_epoch + RETENTION_SECONDS

    def state_at(self, now: datetime) -> TokenState:
        """The token's state as read at `now`: expiry and exhaustion need no background job."""
        if self.state == "revoked":
            return "revoked"
        if self.expires_at_epoch <= clock.seconds(now):
            return "expired"
        if self.uses_remaining <= 0:
            return "exhausted"
        return "active"

    def usable_at(self, now: datetime) -> bool:
        """Unexpired with a use left (whether it is revoked is the caller's separate question)."""
        return self.expires_at_epoch > clock.seconds(now) and self.uses_remaining > 0

    @classmethod
    def from_item(cls, item: Item) -> JoinTokenRecord:
        return cls(
            token_id=item["tokenId"],
            tenant_id=item["tenantId"],
            site_id=item["siteId"],
            pool_id=item.get("poolId"),
            secret_sha256=item["secretSha256"],
            description=item.get("description", ""),
            state=item["state"],
            expires_at=item["expiresAt"],
            expires_at_epoch=int(item["expiresAtEpoch"]),
            max_uses=int(item["maxUses"]),
            uses_remaining=int(item["usesRemaining"]),
            require_approval=bool(item.get("requireApproval", False)),
            attestation=AttestationPolicyRecord.from_dict(item.get("attestation")),
            created_at=item["createdAt"],
            created_by=item.get("createdBy"),
            revoked_at=item.get("revokedAt"),
            revoked_by=item.get("revokedBy"),
        )

    def to_item(self) -> Item:
        pk, sk = token_key(self.token_id)
        return {
            "pk": pk,
            "sk": sk,
            "gsi1pk": list_key(self.tenant_id, self.pool_id, self.site_id),
            "gsi1sk": self.token_id,
            "tokenId": self.token_id,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "poolId": self.pool_id,
            "secretSha256": self.secret_sha256,
            "description": self.description,
            "state": self.state,
            "expiresAt": self.expires_at,
            "expiresAtEpoch": self.expires_at_epoch,
            "maxUses": self.max_uses,
            "usesRemaining": self.uses_remaining,
            "requireApproval": self.require_approval,
            "attestation": self.attestation.to_dict(),
            "createdAt": self.created_at,
            "createdBy": self.created_by,
            "revokedAt": self.revoked_at,
            "revokedBy": self.revoked_by,
            "ttl": self.ttl,
        }


def token_key(token_id: str) -> tuple[str, str]:
    return f"JOINTOKEN#{token_id}", "JOINTOKEN"


def list_key(tenant_id: str, pool_id: str | None, site_id: str) -> str:
    return (
        f"TENANT#{tenant_id}#POOL#{pool_id}#JOINTOKENS"
        if pool_id
        else f"TENANT#{tenant_id}#SITE#{site_id}#JOINTOKENS"
    )


class TokenExists(Exception):
    pass


class TokenLost(Exception):
    """A conditional change found the token absent (`current` None) or no longer active."""

    def __init__(self, current: JoinTokenRecord | None) -> None:
        super().__init__("join token changed")
        self.current = current


def get(token_id: str) -> JoinTokenRecord | None:
    item = dynamo.get(*token_key(token_id))
    return JoinTokenRecord.from_item(item) if item else None


def create(token: JoinTokenRecord) -> None:
    """Store a new token; TokenExists when the id is taken."""
    try:
        dynamo.put(token.to_item(), condition="attribute_not_exists(pk)")
    except dynamo.ConditionFailed:
        raise TokenExists(token.token_id) from None


def revoke(token_id: str, *, now: datetime, by: str) -> JoinTokenRecord:
    """active → revoked; TokenLost when the token is absent or already revoked."""
    try:
        item = dynamo.update(
            *token_key(token_id),
            update="SET #state = :revoked, revokedAt = :now, revokedBy = :by",
            condition="#state = :active",
            names={"#state": "state"},
            values={":revoked": "revoked", ":active": "active", ":now": clock.rfc3339(now), ":by": by},
        )
    except dynamo.ConditionFailed as lost:
        raise TokenLost(JoinTokenRecord.from_item(lost.current) if lost.current else None) from None
    return JoinTokenRecord.from_item(item)


class TokenPage(NamedTuple):
    tokens: list[JoinTokenRecord]
    complete: bool  # no page follows


def list_tokens(
    tenant_id: str, *, pool_id: str | None, site_id: str, after: str | None, limit: int
) -> TokenPage:
    """One page of a pool's (or, `pool_id` None, a site's) tokens in tokenId order, after `after`."""
    page = dynamo.query(pk=list_key(tenant_id, pool_id, site_id), index="gsi1", limit=limit, sk_after=after)
    return TokenPage([JoinTokenRecord.from_item(item) for item in page.items], page.last_key is None)


def spend_use(token: JoinTokenRecord, *, now: datetime, name: str = "token") -> dynamo.Write:
    """A transaction action taking one use of the token: holds only while it is active, unexpired
    at `now` and has a use left."""
    pk, sk = token_key(token.token_id)
    return dynamo.Write(
        "Update",
        pk=pk,
        sk=sk,
        update="SET usesRemaining = usesRemaining - :one",
        condition="#state = :active AND expiresAtEpoch > :now AND usesRemaining > :zero",
        names={"#state": "state"},
        values={":one": 1, ":zero": 0, ":active": "active", ":now": clock.seconds(now)},
        name=name,
    )
