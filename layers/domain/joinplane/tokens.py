"""Join tokens: the secret a machine presents to ask to join one pool, or one site (then every
join is deferred until an operator's approval claims it for a pool).

Stored as `joinplane.dal.tokens.JoinToken`, listed per pool or per site. Uses are a counter that
only a conditional write decrements; the token outlives its expiry by a retention window so that
deferred joins can still be matched to the token they came with.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from joinplane import clock, credentials, errors, ids, pools
from joinplane.dal import tokens as tokens_db
from joinplane.dal.tokens import AttestationPolicyRecord, AwsRulesRecord, JoinTokenRecord
from joinplane.errors import InvalidState, NotFound
from joinplane.grants import Principal, Resource
from joinplane.wire import POOL_ID, SITE_ID, STRICT, TENANT_ID, TEXT

if TYPE_CHECKING:
    from joinplane import views

SECRET_PREFIX, ID_PREFIX = tokens_db.SECRET_PREFIX, tokens_db.ID_PREFIX
READ, CREATE = "compute:join-tokens:read", "compute:join-tokens:create"


# An ARN pattern: an ARN's characters, `*` for any run of them (joinplane.aws_rules).
AWS_ACCOUNT = r"^[0-9]{12}$"
# A pattern names its account: `arn:aws:sts::*:assumed-role/gpu-node/*` would admit anyone, in any
# AWS account, who names a role gpu-node (several accounts: a pattern each).
AWS_ARN_PATTERN = r"^arn:aws[a-z-]*:(sts|iam)::[0-9]{12}:[\x21-\x7e]{1,512}$"


class AwsAttestation(BaseModel):
    """Which AWS callers the IAM join method admits through this token: every list given must
    match (docs/aws.md)."""

    model_config = STRICT
    accounts: list[Annotated[str, Field(pattern=AWS_ACCOUNT)]] = Field(default_factory=list, max_length=100)
    arns: list[Annotated[str, Field(pattern=AWS_ARN_PATTERN)]] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _some_rule(self) -> AwsAttestation:
        if not self.accounts and not self.arns:
            raise ValueError("give accounts or arns: an empty rule would admit no one")
        return self


class Attestation(BaseModel):
    model_config = STRICT
    discovery: Literal["off", "defer-unknown"] = "off"
    tpm: Literal["off", "defer-unlisted", "require"] = "off"
    # `key`: every join must carry a CSR, so the identity is a key the machine can later prove it
    # holds (fingerprint-only joins, levers9 JoinMachine's plain form, are refused: a fingerprint
    # is no secret).
    identity: Literal["any", "key"] = "any"
    # Which activated EKs the `tpm` attestor admits: those on the site's allow-list, or also any
    # whose EK certificate chains to a TPM manufacturer the site lists (docs/tpm.md).
    tpmTrust: Literal["allow-list", "manufacturer"] = "allow-list"
    # `activate`: a machine that joined with an activated TPM must activate the same TPM again to
    # re-join through this token (the TPM is still there, not only the key).
    tpmRejoin: Literal["any", "activate"] = "any"
    # The AWS IAM join method's rules: set, the token is named by its id and takes only IAM joins.
    aws: AwsAttestation | None = None


class TokenTarget(BaseModel):
    """Exactly one of `poolId` (a pool token) or `siteId` (a site token)."""

    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    poolId: str | None = Field(default=None, pattern=POOL_ID)
    siteId: str | None = Field(default=None, pattern=SITE_ID)

    @model_validator(mode="after")
    def _one_target(self) -> TokenTarget:
        if (self.poolId is None) == (self.siteId is None):
            raise ValueError("give exactly one of poolId (a pool token) or siteId (a site token)")
        return self


class CreateJoinToken(TokenTarget):
    ttlSeconds: int = Field(default=86_400, ge=60, le=2_592_000)
    maxUses: int = Field(default=1, ge=1, le=10_000)
    requireApproval: bool = False
    attestation: Attestation = Field(default_factory=Attestation)
    description: str = Field(default="", max_length=256, pattern=TEXT)


class ListJoinTokens(TokenTarget):
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=ids.TOKEN_ID)


class RevokeJoinToken(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    tokenId: str = Field(pattern=ids.TOKEN_ID)


def state_now(token: JoinTokenRecord) -> views.TokenState:
    """The token's state as read now: expiry and exhaustion need no background job."""
    return token.state_at(clock.now())


def _attestation_view(policy: AttestationPolicyRecord) -> views.TokenAttestation:
    """The policy as stored: `identity` is absent on tokens made before the setting existed."""
    view: views.TokenAttestation = {"discovery": policy.discovery, "tpm": policy.tpm}
    if policy.identity is not None:
        view["identity"] = policy.identity
    if policy.tpm_trust is not None:
        view["tpmTrust"] = policy.tpm_trust
    if policy.tpm_rejoin is not None:
        view["tpmRejoin"] = policy.tpm_rejoin
    if policy.aws is not None:
        view["aws"] = {"accounts": list(policy.aws.accounts), "arns": list(policy.aws.arns)}
    return view


def view(token: JoinTokenRecord) -> views.JoinToken:
    return {
        "tokenId": token.token_id,
        "tenantId": token.tenant_id,
        "siteId": token.site_id,
        "poolId": token.pool_id,
        "description": token.description,
        "state": state_now(token),
        "expiresAt": token.expires_at,
        "maxUses": token.max_uses,
        "usesRemaining": token.uses_remaining,
        "requireApproval": token.require_approval,
        "attestation": _attestation_view(token.attestation),
        "createdAt": token.created_at,
        "createdBy": token.created_by,
        "revokedAt": token.revoked_at,
        "revokedBy": token.revoked_by,
    }


def _target(principal: Principal, request: TokenTarget, permission: str) -> Resource:
    """The pool or site a token request is about, authorized; NOT_FOUND when out of sight."""
    if request.poolId is not None:
        return pools.resource_of(pools.load(principal, request.tenantId, request.poolId, permission))
    assert request.siteId is not None
    return pools.load_site(principal, request.tenantId, request.siteId, permission)


def create(principal: Principal, request: CreateJoinToken) -> views.JoinTokenCreated:
    target = _target(principal, request, CREATE)
    if target.pool_id is not None:
        pool = pools.get_active(target.tenant_id, target.pool_id)
        if pool is None or not pool.active:
            raise InvalidState(
                "pool is archived; archived pools take no new joins", reason=errors.POOL_ARCHIVED
            )
    assert target.site_id is not None  # a pool's or a site's resource always names its site
    ulid = ids.new_ulid()
    secret = credentials.mint(SECRET_PREFIX, ulid)
    now = clock.now()
    expires = now + timedelta(seconds=request.ttlSeconds)
    policy = request.attestation
    token = JoinTokenRecord(
        token_id=f"{ID_PREFIX}_{ulid}",
        tenant_id=target.tenant_id,
        site_id=target.site_id,
        pool_id=target.pool_id,
        secret_sha256=credentials.digest(secret),
        description=request.description,
        state="active",
        expires_at=clock.rfc3339(expires),
        expires_at_epoch=clock.seconds(expires),
        max_uses=request.maxUses,
        uses_remaining=request.maxUses,
        require_approval=request.requireApproval,
        attestation=AttestationPolicyRecord(
            policy.discovery,
            policy.tpm,
            policy.identity,
            policy.tpmTrust,
            policy.tpmRejoin,
            AwsRulesRecord(tuple(policy.aws.accounts), tuple(policy.aws.arns)) if policy.aws else None,
        ),
        created_at=clock.rfc3339(now),
        created_by=principal.key_id,
    )
    tokens_db.create(token)
    return {**view(token), "token": secret}


def list_tokens(principal: Principal, request: ListJoinTokens) -> views.JoinTokenList:
    target = _target(principal, request, READ)
    assert target.site_id is not None
    page = tokens_db.list_tokens(
        target.tenant_id,
        pool_id=target.pool_id,
        site_id=target.site_id,
        after=request.cursor,
        limit=request.limit,
    )
    result: views.JoinTokenList = {"joinTokens": [view(token) for token in page.tokens]}
    if not page.complete and page.tokens:
        result["nextCursor"] = page.tokens[-1].token_id
    return result


def revoke(principal: Principal, request: RevokeJoinToken) -> views.JoinToken:
    principal.check_tenant(request.tenantId)
    token = tokens_db.get(request.tokenId)
    if token is None or token.tenant_id != request.tenantId:
        raise NotFound("join token not found")
    principal.authorize(CREATE, Resource(token.tenant_id, token.site_id, token.pool_id, kind="join token"))
    try:
        token = tokens_db.revoke(request.tokenId, now=clock.now(), by=principal.key_id)
    except tokens_db.TokenLost as lost:
        if lost.current is None:
            raise NotFound("join token not found") from None
        token = lost.current  # already revoked
    return view(token)
