"""Typed details of the events of operators' actions: join tokens, API keys, pools, cluster keys,
certificate authorities, a site's discovery inventory and TPM allow-list. Conventions, and the
details of what joins and machines do, in `joinplane.event_details`; the same rule holds: imported
only by type checkers and the schema generator.

Each item stores the API key that acted on it in the write that changes it, and the event names it
as `decidedBy`: never a secret, nor a secret's hash.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field, with_config
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from joinplane.event_details import DETAIL, TIMESTAMP, ULID, Header, PoolScoped, Sha256, Timestamp

KeyId = Annotated[str, Field(pattern=rf"^key_{ULID}$")]
TokenId = Annotated[str, Field(pattern=rf"^jtok_{ULID}$")]
CaId = Annotated[str, Field(pattern=rf"^ca_{ULID}$")]
EntryId = Annotated[str, Field(pattern=rf"^disc_{ULID}$")]
KmsKeyId = Annotated[
    str, Field(description="The KMS key that holds the CA's private key (which never leaves KMS).")
]
Upstream = Annotated[
    bool,
    Field(
        description="True when the CA is an intermediate signed by an upstream root; false when self-signed."
    ),
]
# Who made an operator's change: an API key.
Operator = Annotated[
    str | None,
    Field(
        pattern=rf"^(key_{ULID}|bootstrap)$",
        description=(
            "The id of the operator API key that acted (`key_...`), or `bootstrap` for the key a "
            "deployment starts with: never a secret nor a hash of one. Null only for an item "
            "written before its actor was stored."
        ),
    ),
]
OperatorOnly = rf"^key_{ULID}$"  # an operator's call, never a job's


# --- where an operator's change happened ---------------------------------------------------------


class TokenScoped(Header):
    siteId: str
    poolId: Annotated[str | None, Field(description="Null for a site token.")]


class SiteScoped(Header):
    """A site's discovery inventory and TPM allow-list belong to no pool."""

    siteId: str
    poolId: None


class TenantScoped(Header):
    """API keys belong to the tenant, not to a site or pool."""

    siteId: None
    poolId: None


# --- what operators administer -------------------------------------------------------------------


@with_config(DETAIL)
class TokenAwsRules(TypedDict):
    """Which AWS callers the token admits by the AWS IAM join method (every list given must match)."""

    accounts: list[str]
    arns: list[str]


@with_config(DETAIL)
class TokenAttestation(TypedDict):
    """The token's attestation policy, as it stores it (a setting stored before it existed is absent)."""

    discovery: Literal["off", "defer-unknown"]
    tpm: Literal["off", "defer-unlisted", "require"]
    identity: NotRequired[Literal["any", "key"]]
    tpmTrust: NotRequired[Literal["allow-list", "manufacturer"]]
    tpmRejoin: NotRequired[Literal["any", "activate"]]
    aws: NotRequired[TokenAwsRules]


@with_config(DETAIL)
class JoinTokenCreatedDetail(TokenScoped):
    """a join token was created."""

    tokenId: TokenId
    state: Literal["active"]
    expiresAt: Timestamp
    maxUses: Annotated[int, Field(ge=1)]
    requireApproval: bool
    attestation: TokenAttestation
    decidedBy: Operator


@with_config(DETAIL)
class JoinTokenRevokedDetail(TokenScoped):
    """a join token was revoked."""

    tokenId: TokenId
    state: Literal["revoked"]
    decidedBy: Operator


@with_config(DETAIL)
class ApiKeyCreatedDetail(TenantScoped):
    """an operator API key was created."""

    keyId: KeyId
    state: Literal["active"]
    grants: list[str]
    decidedBy: Operator


@with_config(DETAIL)
class ApiKeyRevokedDetail(TenantScoped):
    """an operator API key was revoked."""

    keyId: KeyId
    state: Literal["revoked"]
    decidedBy: Operator


# A pool's settings, as the API names them: what `security.pool.updated` lists.
PoolSetting = Literal[
    "name",
    "workspaceId",
    "bootstrap",
    "joinRequestTtlSeconds",
    "certificateTtlSeconds",
    "caPropagationSeconds",
    "cluster",
    "approvalsRequired",
    "joinPolicy",
]

_POLICY_RULES = Field(
    description=(
        "The names of the pool's join policy's rules, in order (docs/policy.md); empty: no policy. The "
        "rules themselves are in the pool's view (pools/get)."
    )
)


@with_config(DETAIL)
class PoolCreatedDetail(PoolScoped):
    """a pool was created."""

    state: Literal["active"]
    version: int
    name: str
    workspaceId: str
    joinPolicyRules: Annotated[list[str], _POLICY_RULES]
    decidedBy: Operator


@with_config(DETAIL)
class PoolUpdatedDetail(PoolScoped):
    """a pool's settings were changed (its version bumped)."""

    state: Literal["active"]
    version: int
    changed: Annotated[
        list[PoolSetting],
        Field(
            description=(
                "The settings whose stored value changed: names only (a pool's bootstrap holds credentials)."
            )
        ),
    ]
    joinPolicyRules: Annotated[list[str], _POLICY_RULES]
    decidedBy: Operator


@with_config(DETAIL)
class PoolArchivedDetail(PoolScoped):
    """a pool was archived."""

    state: Literal["archived"]
    version: int
    decidedBy: Operator


@with_config(DETAIL)
class ClusterKeyRotatedDetail(PoolScoped):
    """a pool's cluster key was issued, replacing the previous one if any."""

    clusterKeyId: Annotated[str, Field(pattern=rf"^ckey_{ULID}$")]
    previousClusterKeyId: Annotated[
        str | None,
        Field(description="The key it replaced, which stops working now; null for the pool's first key."),
    ]
    state: Literal["active"]
    decidedBy: Operator


# --- certificate authorities ---------------------------------------------------------------------


class AuthorityScoped(PoolScoped):
    caId: CaId
    kmsKeyId: KmsKeyId


@with_config(DETAIL)
class CertificateAuthorityCreatedDetail(AuthorityScoped):
    """a pool's first certificate authority was made: a new KMS key (ECC_NIST_P256) and its
    self-signed CA certificate, by the pool's first join or an operator's
    certificateAuthorities/get. Or the import of a signed certificate
    (certificateAuthorities/importCertificate) for a pool that had no CA yet: then `upstream` is
    true and `decidedBy` the key that imported it."""

    previousCaId: Annotated[None, Field(description="A pool's first CA replaces none.")]
    upstream: Upstream
    state: Literal["active"]
    bundleUntil: None
    decidedBy: Annotated[
        str,
        Field(
            pattern=rf"^(key_{ULID}|join)$",
            description=(
                "The id of the operator API key that acted (`key_...`), or `join` for a first CA "
                "made by a pool's first join: never a secret nor a hash of one."
            ),
        ),
    ]


@with_config(DETAIL)
class CertificateAuthorityRequestedDetail(AuthorityScoped):
    """an operator asked for a pool CA signed by the organisation's own root
    (certificateAuthorities/createCsr): a new KMS key (ECC_NIST_P256) was made and a certificate
    request for it returned. The pool keeps issuing from its active CA until the signed
    certificate is imported (then `created` or `rotated`, with `upstream: true`). A newer request
    abandons this one and schedules its key for deletion."""

    previousCaId: Annotated[
        None,
        Field(description="Set when the request is imported (the `rotated` event names the CA it replaced)."),
    ]
    upstream: Annotated[Literal[True], Field(description="A request is always for an upstream-signed CA.")]
    state: Literal["pending"]
    bundleUntil: None
    decidedBy: Annotated[
        str,
        Field(
            pattern=OperatorOnly,
            description="The id of the operator API key that asked: never a secret nor a hash of one.",
        ),
    ]


@with_config(DETAIL)
class CertificateAuthorityPreparedDetail(AuthorityScoped):
    """a rotation (certificateAuthorities/rotate) or an import
    (certificateAuthorities/importCertificate, `upstream: true`) made the pool's next CA. It is in
    the pool's bundle from now on (join and renew answers, certificateAuthorities/get, the public
    bundle URL) and signs nothing until `activatesAt` (the pool's caPropagationSeconds later) or an
    explicit certificateAuthorities/activate: verifiers that refresh their bundle meanwhile trust it
    before its first certificate exists."""

    previousCaId: Annotated[
        str,
        Field(
            pattern=rf"^ca_{ULID}$",
            description="The active CA it will replace (retired when this one activates).",
        ),
    ]
    upstream: Upstream
    state: Literal["prepared"]
    bundleUntil: None
    activatesAt: Annotated[
        str,
        Field(
            pattern=TIMESTAMP,
            description=(
                "When the CA signs at the latest: the first use of the pool's CA after it activates "
                "it (earlier with certificateAuthorities/activate)."
            ),
        ),
    ]
    decidedBy: Annotated[
        str,
        Field(
            pattern=OperatorOnly,
            description=(
                "The id of the operator API key that rotated the CA or imported its certificate: "
                "never a secret nor a hash of one."
            ),
        ),
    ]


@with_config(DETAIL)
class CertificateAuthorityActivatedDetail(AuthorityScoped):
    """the pool's prepared CA signs every certificate from now on; the CA it replaced
    (previousCaId) is retired and stays in the pool's bundle until every certificate it issued has
    expired. `decidedBy` is the operator key that called certificateAuthorities/activate, or
    `schedule` when the propagation period ended (the first use of the pool's CA after
    `activatesAt`)."""

    previousCaId: Annotated[
        str,
        Field(pattern=rf"^ca_{ULID}$", description="The CA it replaced, now retired (still in the bundle)."),
    ]
    upstream: Upstream
    state: Literal["active"]
    bundleUntil: None
    activatesAt: Annotated[
        str,
        Field(
            pattern=TIMESTAMP,
            description="When the CA was due to sign at the latest (the end of its propagation period).",
        ),
    ]
    decidedBy: Annotated[
        str,
        Field(
            pattern=rf"^(key_{ULID}|schedule)$",
            description=(
                "The id of the operator API key that activated the CA (`key_...`), or `schedule` "
                "when its propagation period ended: never a secret nor a hash of one."
            ),
        ),
    ]


@with_config(DETAIL)
class CertificateAuthorityRotatedDetail(AuthorityScoped):
    """a pool's certificate authority was rotated: a new KMS key and CA sign every certificate from
    now on; the previous CA (previousCaId) is retired and stays in the pool's bundle until every
    certificate it issued has expired. Also the import of a signed certificate
    (certificateAuthorities/importCertificate): the pool's CA becomes an intermediate of the
    organisation's root (`upstream: true`), and `decidedBy` is the key that imported it."""

    previousCaId: Annotated[
        str,
        Field(
            pattern=rf"^ca_{ULID}$",
            description="The CA this one replaced, now retired (still in the bundle).",
        ),
    ]
    upstream: Upstream
    state: Literal["active"]
    bundleUntil: None
    decidedBy: Annotated[
        str,
        Field(
            pattern=OperatorOnly,
            description=(
                "The id of the operator API key that rotated the CA: never a secret nor a hash of one."
            ),
        ),
    ]


@with_config(DETAIL)
class CertificateAuthorityExpiredDetail(AuthorityScoped):
    """a retired certificate authority left its pool's bundle: every certificate it issued has
    expired (bundleUntil passed), and its KMS key is scheduled for deletion (7 days)."""

    previousCaId: Annotated[
        str | None, Field(pattern=rf"^ca_{ULID}$", description="The CA the expired one had replaced, if any.")
    ]
    upstream: Upstream
    state: Literal["expired"]
    bundleUntil: Annotated[
        str,
        Field(
            pattern=TIMESTAMP,
            description=(
                "When it left the bundle: its retirement + the longest certificate lifetime + clock "
                "skew + the containers' CA cache."
            ),
        ),
    ]
    decidedBy: Annotated[Literal["retention"], Field(description="The retention job.")]


# --- a site's discovery inventory and TPM allow-list ---------------------------------------------


@with_config(DETAIL)
class DiscoveryEntryRegisteredDetail(SiteScoped):
    """a machine was registered in a site's discovery inventory."""

    entryId: EntryId
    state: Literal["registered"]
    serialNumber: str | None
    systemUuid: str | None
    macAddresses: list[str]
    machineFingerprint: str | None
    hostname: str | None
    decidedBy: Operator


@with_config(DETAIL)
class DiscoveryEntryRemovedDetail(SiteScoped):
    """a discovery entry was removed."""

    entryId: EntryId
    state: Literal["removed"]
    addedAt: Timestamp
    decidedBy: Operator


@with_config(DETAIL)
class TpmKeyAllowedDetail(SiteScoped):
    """an endorsement key was added to a site's TPM allow-list."""

    ekPublicKeySha256: Sha256
    addedFrom: Literal["hash", "certificate"]
    state: Literal["allowed"]
    decidedBy: Operator


@with_config(DETAIL)
class TpmKeyRemovedDetail(SiteScoped):
    """an endorsement key was removed from a site's TPM allow-list."""

    ekPublicKeySha256: Sha256
    state: Literal["removed"]
    addedAt: Annotated[str, Field(pattern=TIMESTAMP, description="When the removed addition was made.")]
    decidedBy: Operator
