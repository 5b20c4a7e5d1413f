"""Operators' actions as security events: which writes to what operators administer (join tokens,
API keys, pools, cluster keys, certificate authorities, a site's discovery inventory and TPM
allow-list) are transitions, and the event each one is. What joins and machines do, and the
conventions (ids, the detail types), are in `joinplane.event_derivation`.

Each item stores the acting API key in the write that changes it, and the event names it as
`decidedBy`. Never a secret, nor a secret's hash: details are built field by field from what the
item says, and `secretSha256` is never one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from joinplane import clock
from joinplane.dal.apikeys import ApiKeyRecord
from joinplane.dal.authorities import CertificateAuthorityRecord
from joinplane.dal.clusters import ClusterKeyRecord
from joinplane.dal.discovery import DiscoveryEntryRecord
from joinplane.dal.pools import PoolRecord
from joinplane.dal.removals import RemovalRecord
from joinplane.dal.tokens import AttestationPolicyRecord, JoinTokenRecord
from joinplane.dal.tpm_allow import AllowedKeyRecord
from joinplane.event_derivation import Event, event_id, held, in_pool

if TYPE_CHECKING:
    from joinplane.admin_event_details import (
        ApiKeyCreatedDetail,
        ApiKeyRevokedDetail,
        CertificateAuthorityActivatedDetail,
        CertificateAuthorityCreatedDetail,
        CertificateAuthorityExpiredDetail,
        CertificateAuthorityPreparedDetail,
        CertificateAuthorityRequestedDetail,
        CertificateAuthorityRotatedDetail,
        ClusterKeyRotatedDetail,
        DiscoveryEntryRegisteredDetail,
        DiscoveryEntryRemovedDetail,
        JoinTokenCreatedDetail,
        JoinTokenRevokedDetail,
        PoolArchivedDetail,
        PoolCreatedDetail,
        PoolSetting,
        PoolUpdatedDetail,
        SiteScoped,
        TenantScoped,
        TokenAttestation,
        TokenScoped,
        TpmKeyAllowedDetail,
        TpmKeyRemovedDetail,
    )


# --- where it happened ---------------------------------------------------------------------------


def _of_token(eid: str, occurred_at: str, token: JoinTokenRecord) -> TokenScoped:
    return {
        "eventId": eid,
        "occurredAt": occurred_at,
        "tenantId": token.tenant_id,
        "siteId": token.site_id,
        "poolId": token.pool_id,
    }


def _in_site(
    eid: str, occurred_at: str, item: DiscoveryEntryRecord | AllowedKeyRecord | RemovalRecord
) -> SiteScoped:
    return {
        "eventId": eid,
        "occurredAt": occurred_at,
        "tenantId": item.tenant_id,
        "siteId": item.site_id,
        "poolId": None,
    }


def _of_tenant(eid: str, occurred_at: str, key: ApiKeyRecord) -> TenantScoped:
    # API keys belong to the tenant, not to a site or pool.
    return {
        "eventId": eid,
        "occurredAt": occurred_at,
        "tenantId": key.tenant_id,
        "siteId": None,
        "poolId": None,
    }


# --- what operators administer -------------------------------------------------------------------


def _attestation(policy: AttestationPolicyRecord) -> TokenAttestation:
    """The policy as the token stores it (`AttestationPolicy.to_dict`: a setting stored before it
    existed is absent), built here key by key so that mypy checks it against the detail's type."""
    stated: TokenAttestation = {"discovery": policy.discovery, "tpm": policy.tpm}
    if policy.identity is not None:
        stated["identity"] = policy.identity
    if policy.tpm_trust is not None:
        stated["tpmTrust"] = policy.tpm_trust
    if policy.tpm_rejoin is not None:
        stated["tpmRejoin"] = policy.tpm_rejoin
    if policy.aws is not None:
        stated["aws"] = {"accounts": list(policy.aws.accounts), "arns": list(policy.aws.arns)}
    return stated


def _token_event(old: JoinTokenRecord | None, new: JoinTokenRecord) -> Event | None:
    if old is None:
        detail_type = "security.join-token.created"
        created: JoinTokenCreatedDetail = {
            **_of_token(event_id(detail_type, new.token_id), new.created_at, new),
            "tokenId": new.token_id,
            "state": "active",
            "expiresAt": new.expires_at,
            "maxUses": new.max_uses,
            "requireApproval": new.require_approval,
            "attestation": _attestation(new.attestation),
            "decidedBy": new.created_by,
        }
        return Event(detail_type, created)
    if new.state == "revoked" and old.state != "revoked":
        detail_type = "security.join-token.revoked"
        revoked: JoinTokenRevokedDetail = {
            **_of_token(event_id(detail_type, new.token_id), held(new.revoked_at), new),
            "tokenId": new.token_id,
            "state": "revoked",
            "decidedBy": new.revoked_by,
        }
        return Event(detail_type, revoked)
    return None  # a use spent, or nothing of note


def _api_key_event(old: ApiKeyRecord | None, new: ApiKeyRecord) -> Event | None:
    if old is None:
        detail_type = "security.api-key.created"
        created: ApiKeyCreatedDetail = {
            **_of_tenant(event_id(detail_type, new.key_id), new.created_at, new),
            "keyId": new.key_id,
            "state": "active",
            "grants": list(new.grants),
            "decidedBy": new.created_by,
        }
        return Event(detail_type, created)
    if new.state == "revoked" and old.state != "revoked":
        detail_type = "security.api-key.revoked"
        revoked: ApiKeyRevokedDetail = {
            **_of_tenant(event_id(detail_type, new.key_id), held(new.revoked_at), new),
            "keyId": new.key_id,
            "state": "revoked",
            "decidedBy": new.revoked_by,
        }
        return Event(detail_type, revoked)
    return None


# A pool's settings, as the API names them (the stored names are the same): what `changed` lists.
_POOL_SETTINGS: dict[str, PoolSetting] = {
    "name": "name",
    "workspace_id": "workspaceId",
    "bootstrap": "bootstrap",
    "join_request_ttl_seconds": "joinRequestTtlSeconds",
    "certificate_ttl_seconds": "certificateTtlSeconds",
    "ca_propagation_seconds": "caPropagationSeconds",
    "cluster": "cluster",
    "approvals_required": "approvalsRequired",
    "join_policy": "joinPolicy",
}


def _pool_event(old: PoolRecord | None, new: PoolRecord) -> Event | None:
    if old is None:
        # A pool is created active.
        detail_type = "security.pool.created"
        created: PoolCreatedDetail = {
            **in_pool(event_id(detail_type, new.tenant_id, new.pool_id), new.created_at, new),
            "state": "active",
            "version": new.version,
            "name": new.name,
            "workspaceId": new.workspace_id,
            "joinPolicyRules": [rule.name for rule in new.join_policy],
            "decidedBy": new.created_by,
        }
        return Event(detail_type, created)
    if new.state == "archived" and old.state != "archived":
        detail_type = "security.pool.archived"
        archived: PoolArchivedDetail = {
            **in_pool(
                event_id(detail_type, new.tenant_id, new.pool_id), new.archived_at or new.updated_at, new
            ),
            "state": "archived",
            "version": new.version,
            "decidedBy": new.archived_by,
        }
        return Event(detail_type, archived)
    if new.state == "active" and new.version != old.version:
        detail_type = "security.pool.updated"
        updated: PoolUpdatedDetail = {
            **in_pool(
                event_id(detail_type, new.tenant_id, new.pool_id, str(new.version)), new.updated_at, new
            ),
            "state": "active",
            "version": new.version,
            # Names only: a pool's bootstrap holds credentials (telemetry, billing tokens).
            "changed": [
                name for field, name in _POOL_SETTINGS.items() if getattr(old, field) != getattr(new, field)
            ],
            "joinPolicyRules": [rule.name for rule in new.join_policy],
            "decidedBy": new.updated_by,
        }
        return Event(detail_type, updated)
    return None  # a cluster key repointed (its own event), or nothing of note


def _cluster_key_event(old: ClusterKeyRecord | None, new: ClusterKeyRecord) -> Event | None:
    # One rotation writes the new key and retires the previous one: the new key's INSERT is its
    # event; the previous key's change to `rotated` is the same transition, not another event.
    if old is not None:
        return None
    detail_type = "security.cluster-key.rotated"
    detail: ClusterKeyRotatedDetail = {
        **in_pool(event_id(detail_type, new.key_id), new.created_at, new),
        "clusterKeyId": new.key_id,
        "previousClusterKeyId": new.previous_key_id,
        "state": "active",
        "decidedBy": new.created_by,
    }
    return Event(detail_type, detail)


def _certificate_authority_event(
    old: CertificateAuthorityRecord | None, new: CertificateAuthorityRecord
) -> Event | None:
    # A CA put as `active` is the pool's first (created) or an emergency rotation's (rotated); so is
    # an upstream CA's import into a pool without a CA (pending -> active), with `upstream: true`.
    # A rotation in phases is `prepared` (put as prepared, or an import's pending -> prepared), then
    # `activated` (prepared -> active). The retirement of the CA replaced is the same transaction
    # as the activation, not another event. A `pending` CA put is a certificate request
    # (requested); abandoning it for a newer one is part of that newer request's transaction. Once
    # the bundle lets a retired CA go (`expired`), that is the CA's last event. Only a retired CA
    # has `bundleUntil`, so it is null in every event but `expired`.
    def eid(detail_type: str) -> str:
        return event_id(detail_type, new.ca_id)

    # A pending CA is always an upstream one: its request awaits the organisation's CA.
    upstream = bool(new.chain_pem) or new.state == "pending"
    activates_at = clock.rfc3339(new.activates_at) if new.activates_at is not None else None
    # The acting API key; `join` for a first CA a join made, `retention` for an expiry.
    if new.state == "active" and (old is None or old.state == "pending"):
        occurred_at = new.created_at if old is None else new.activated_at or ""
        decided_by = new.created_by if old is None else new.activated_by or ""
        if new.previous_ca_id:
            detail_type = "security.certificate-authority.rotated"
            rotated: CertificateAuthorityRotatedDetail = {
                **in_pool(eid(detail_type), occurred_at, new),
                "caId": new.ca_id,
                "previousCaId": new.previous_ca_id,
                "kmsKeyId": new.key_id,
                "upstream": upstream,
                "state": "active",
                "bundleUntil": None,
                "decidedBy": decided_by,
            }
            return Event(detail_type, rotated)
        detail_type = "security.certificate-authority.created"
        created: CertificateAuthorityCreatedDetail = {
            **in_pool(eid(detail_type), occurred_at, new),
            "caId": new.ca_id,
            "previousCaId": None,
            "kmsKeyId": new.key_id,
            "upstream": upstream,
            "state": "active",
            "bundleUntil": None,
            "decidedBy": decided_by,
        }
        return Event(detail_type, created)
    if old is None and new.state == "pending":
        detail_type = "security.certificate-authority.requested"
        requested: CertificateAuthorityRequestedDetail = {
            **in_pool(eid(detail_type), new.created_at, new),
            "caId": new.ca_id,
            "previousCaId": None,  # a request replaces nothing until it is imported
            "kmsKeyId": new.key_id,
            "upstream": True,
            "state": "pending",
            "bundleUntil": None,
            "decidedBy": new.created_by,
        }
        return Event(detail_type, requested)
    if new.state == "prepared" and (old is None or old.state == "pending"):
        # A rotation's next CA (put as prepared), or an import's (pending -> prepared): in the
        # bundle, signing nothing until activatesAt or an explicit activation.
        detail_type = "security.certificate-authority.prepared"
        prepared: CertificateAuthorityPreparedDetail = {
            **in_pool(eid(detail_type), new.created_at if old is None else new.imported_at or "", new),
            "caId": new.ca_id,
            "previousCaId": held(new.previous_ca_id),
            "kmsKeyId": new.key_id,
            "upstream": upstream,
            "state": "prepared",
            "bundleUntil": None,
            "activatesAt": held(activates_at),
            "decidedBy": new.created_by if old is None else new.imported_by or "",
        }
        return Event(detail_type, prepared)
    if old is not None and old.state == "prepared" and new.state == "active":
        detail_type = "security.certificate-authority.activated"
        activated: CertificateAuthorityActivatedDetail = {
            **in_pool(eid(detail_type), new.activated_at or "", new),
            "caId": new.ca_id,
            "previousCaId": held(new.previous_ca_id),
            "kmsKeyId": new.key_id,
            "upstream": upstream,
            "state": "active",
            "bundleUntil": None,
            "activatesAt": held(activates_at),
            "decidedBy": new.activated_by or "",
        }
        return Event(detail_type, activated)
    if old is not None and old.state == "retired" and new.state == "expired":
        detail_type = "security.certificate-authority.expired"
        expired: CertificateAuthorityExpiredDetail = {
            **in_pool(eid(detail_type), new.expired_at or "", new),
            "caId": new.ca_id,
            "previousCaId": new.previous_ca_id,
            "kmsKeyId": new.key_id,
            "upstream": upstream,
            "state": "expired",
            "bundleUntil": held(clock.rfc3339(new.bundle_until) if new.bundle_until is not None else None),
            "decidedBy": "retention",
        }
        return Event(detail_type, expired)
    return None


def _discovery_event(old: DiscoveryEntryRecord | None, new: DiscoveryEntryRecord) -> Event | None:
    if old is not None:
        return None  # entries are never changed in place
    detail_type = "security.discovery-entry.registered"
    detail: DiscoveryEntryRegisteredDetail = {
        **_in_site(event_id(detail_type, new.tenant_id, new.site_id, new.entry_id), new.created_at, new),
        "entryId": new.entry_id,
        "state": "registered",
        "serialNumber": new.serial_number,
        "systemUuid": new.system_uuid,
        "macAddresses": list(new.mac_addresses),
        "machineFingerprint": new.machine_fingerprint,
        "hostname": new.hostname,
        "decidedBy": new.created_by,
    }
    return Event(detail_type, detail)


def _tpm_key_event(old: AllowedKeyRecord | None, new: AllowedKeyRecord) -> Event | None:
    if old is not None:
        return None  # keys are never changed in place
    detail_type = "security.tpm-key.allowed"
    detail: TpmKeyAllowedDetail = {
        # A key can be added again once removed: each addition is its own (createdAt).
        **_in_site(
            event_id(detail_type, new.tenant_id, new.site_id, new.ek_sha256, new.created_at),
            new.created_at,
            new,
        ),
        "ekPublicKeySha256": new.ek_sha256,
        "addedFrom": new.added_from,
        "state": "allowed",
        "decidedBy": new.created_by,
    }
    return Event(detail_type, detail)


def _removal_event(old: RemovalRecord | None, new: RemovalRecord) -> Event | None:
    if old is not None:
        return None
    detail_type = f"security.{new.kind}.removed"
    # The addition it ends (addedAt) tells apart two removals of one re-added TPM key.
    eid = event_id(detail_type, new.tenant_id, new.site_id, new.subject_id, new.added_at)
    if new.kind == "discovery-entry":
        entry: DiscoveryEntryRemovedDetail = {
            **_in_site(eid, new.removed_at, new),
            "entryId": new.subject_id,
            "state": "removed",
            "addedAt": new.added_at,
            "decidedBy": new.removed_by,
        }
        return Event(detail_type, entry)
    key: TpmKeyRemovedDetail = {
        **_in_site(eid, new.removed_at, new),
        "ekPublicKeySha256": new.subject_id,
        "state": "removed",
        "addedAt": new.added_at,
        "decidedBy": new.removed_by,
    }
    return Event(detail_type, key)


# Each image type and the event it makes (old None: the item is new).


# Each image type of what operators administer, and the event it makes (old None: the item is new).
BUILDERS: dict[type[Any], Any] = {
    JoinTokenRecord: _token_event,
    ApiKeyRecord: _api_key_event,
    PoolRecord: _pool_event,
    ClusterKeyRecord: _cluster_key_event,
    CertificateAuthorityRecord: _certificate_authority_event,
    DiscoveryEntryRecord: _discovery_event,
    AllowedKeyRecord: _tpm_key_event,
    RemovalRecord: _removal_event,
}
