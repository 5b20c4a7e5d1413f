"""Which writes are security transitions, and the event each one is: derived from the old and new
image of a stream record (`dal.stream`), never from a second write in a request path. Here what
joins and machines do (join requests, machines, cluster nodes); operators' actions are in
`joinplane.admin_event_derivation`.

`eventId` is a digest of what the transition *is* (subject, detail-type, the state or generation
reached), so a replayed stream record yields the same id and consumers deduplicate on it.

Each detail is annotated with its type in `joinplane.event_details` or
`joinplane.admin_event_details` (for mypy only: the types are imported under TYPE_CHECKING and
cost the publisher nothing at cold start), from which `joinplane.event_schemas` generates the
schemas in shared/events.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast

from joinplane.dal.clusters import ClusterNodeRecord
from joinplane.dal.machines import public_key_sha256
from joinplane.dal.stream import MachineImage, RequestImage

if TYPE_CHECKING:
    from collections.abc import Mapping

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
        PoolUpdatedDetail,
        TpmKeyAllowedDetail,
        TpmKeyRemovedDetail,
    )
    from joinplane.event_details import (
        Approver,
        ClusterNodeJoinedDetail,
        JoinRequestApprovalRecordedDetail,
        JoinRequestApprovedDetail,
        JoinRequestConsumedDetail,
        JoinRequestCreatedDetail,
        JoinRequestExpiredDetail,
        JoinRequestRejectedDetail,
        MachineAws,
        MachineJoinedDetail,
        MachineKeyRotatedDetail,
        MachineRevokedDetail,
        MachineTpm,
        PoolScoped,
        RequestScoped,
    )

    # Every event's detail: a detail built and not listed here is a type error.
    Detail = (
        JoinRequestCreatedDetail
        | JoinRequestApprovalRecordedDetail
        | JoinRequestApprovedDetail
        | JoinRequestRejectedDetail
        | JoinRequestConsumedDetail
        | JoinRequestExpiredDetail
        | MachineJoinedDetail
        | MachineKeyRotatedDetail
        | MachineRevokedDetail
        | ClusterNodeJoinedDetail
        | JoinTokenCreatedDetail
        | JoinTokenRevokedDetail
        | ApiKeyCreatedDetail
        | ApiKeyRevokedDetail
        | PoolCreatedDetail
        | PoolUpdatedDetail
        | PoolArchivedDetail
        | ClusterKeyRotatedDetail
        | CertificateAuthorityCreatedDetail
        | CertificateAuthorityRequestedDetail
        | CertificateAuthorityPreparedDetail
        | CertificateAuthorityActivatedDetail
        | CertificateAuthorityRotatedDetail
        | CertificateAuthorityExpiredDetail
        | DiscoveryEntryRegisteredDetail
        | DiscoveryEntryRemovedDetail
        | TpmKeyAllowedDetail
        | TpmKeyRemovedDetail
    )

T = TypeVar("T")


class Event(NamedTuple):
    detail_type: str
    detail: Detail
    sequence: str = ""  # the stream record it came from, for partial batch failures

    @property
    def event_id(self) -> str:
        return self.detail["eventId"]


def event_id(*parts: str) -> str:
    return "evt_" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def held(value: T | None) -> T:
    """A value the item always holds in this transition (its record, or the state machine, writes
    it with the state), typed as present where the record's type cannot say so. Not checked at run
    time: the stream's images of requests and machines are read tolerantly (dal.stream), and a
    partial image publishes what it has, as it always did."""
    return cast("T", value)


# --- where it happened: the keys every detail starts with ---------------------------------------


class _InPool(Protocol):
    @property
    def tenant_id(self) -> str: ...
    @property
    def site_id(self) -> str: ...
    @property
    def pool_id(self) -> str: ...


def in_pool(eid: str, occurred_at: str, item: _InPool) -> PoolScoped:
    return {
        "eventId": eid,
        "occurredAt": occurred_at,
        "tenantId": item.tenant_id,
        "siteId": item.site_id,
        "poolId": item.pool_id,
    }


def _of_request(eid: str, occurred_at: str, image: RequestImage | MachineImage) -> RequestScoped:
    return {
        "eventId": eid,
        "occurredAt": occurred_at,
        "tenantId": held(image.tenant_id),
        "siteId": image.site_id,
        "poolId": image.pool_id,
    }


# --- what joins and machines do -------------------------------------------------------------------


def _approvers(image: RequestImage) -> list[Approver]:
    return [{"by": approval.by, "at": approval.at} for approval in image.approvals]


def _approval_recorded(old: RequestImage, new: RequestImage) -> Event | None:
    """A pending request that gained an approval and stays pending: one step of several approvals.
    The approvals never shrink, so the new one is the one the old image lacks."""
    known = {approval.by for approval in old.approvals}
    added = [approval for approval in new.approvals if approval.by not in known]
    if not added:
        return None
    approval = added[-1]
    detail_type = "security.join-request.approval-recorded"
    recorded: JoinRequestApprovalRecordedDetail = {
        **_of_request(event_id(detail_type, new.request_id, approval.by), approval.at, new),
        "requestId": new.request_id,
        "state": "pending",
        "approvedBy": approval.by,
        "approvals": _approvers(new),
        "approvalsRequired": held(new.approvals_required),
    }
    return Event(detail_type, recorded)


def _request_event(old: RequestImage | None, new: RequestImage) -> Event | None:
    state = new.state
    if old is not None and old.state == state == "pending":
        return _approval_recorded(old, new)
    if old is not None and old.state == state:
        return None  # not a transition (e.g. a retry touched nothing of note)
    detail_type = f"security.join-request.{'created' if state == 'pending' else state}"
    eid = event_id(detail_type, new.request_id, str(state))
    occurred_at = held(
        {"pending": new.created_at, "consumed": new.consumed_at}.get(str(state))
        or new.decided_at
        or new.expired_at
        or new.created_at
    )
    if state == "pending":
        created: JoinRequestCreatedDetail = {
            # Spelt out: mypy takes no unpacked header where a key is only sometimes present.
            "eventId": eid,
            "occurredAt": occurred_at,
            "tenantId": held(new.tenant_id),
            "siteId": new.site_id,
            "poolId": new.pool_id,
            "requestId": new.request_id,
            "state": "pending",
            "decidedBy": new.decided_by,
            "expiresAt": held(new.expires_at),
            "reasons": new.reasons,
        }
        if new.policy_rule:
            created["policyRule"] = new.policy_rule
        if new.approvals:
            created["approvals"] = _approvers(new)
            created["approvalsRequired"] = held(new.approvals_required)
        return Event(detail_type, created)
    if state == "approved":
        approved: JoinRequestApprovedDetail = {
            # Spelt out: mypy takes no unpacked header where a key is only sometimes present.
            "eventId": eid,
            "occurredAt": occurred_at,
            "tenantId": held(new.tenant_id),
            "siteId": new.site_id,
            "poolId": new.pool_id,
            "requestId": new.request_id,
            "state": "approved",
            "decidedBy": new.decided_by,
            "expiresAt": held(new.expires_at),
            "approvals": _approvers(new),
        }
        if new.reason:
            approved["reason"] = new.reason
        return Event(detail_type, approved)
    if state == "rejected":
        rejected: JoinRequestRejectedDetail = {
            # Spelt out: mypy takes no unpacked header where a key is only sometimes present.
            "eventId": eid,
            "occurredAt": occurred_at,
            "tenantId": held(new.tenant_id),
            "siteId": new.site_id,
            "poolId": new.pool_id,
            "requestId": new.request_id,
            "state": "rejected",
            "decidedBy": new.decided_by,
        }
        if new.reason:
            rejected["reason"] = new.reason
        return Event(detail_type, rejected)
    if state == "consumed":
        consumed: JoinRequestConsumedDetail = {
            # Spelt out: mypy takes no unpacked header where a key is only sometimes present.
            "eventId": eid,
            "occurredAt": occurred_at,
            "tenantId": held(new.tenant_id),
            "siteId": new.site_id,
            "poolId": new.pool_id,
            "requestId": new.request_id,
            "state": "consumed",
            "decidedBy": new.decided_by,
            "machineId": held(new.machine_id),
        }
        if new.policy_rule:
            consumed["policyRule"] = new.policy_rule
        return Event(detail_type, consumed)
    if state == "expired":
        expired: JoinRequestExpiredDetail = {
            **_of_request(eid, held(new.expired_at), new),
            "requestId": new.request_id,
            "state": "expired",
            "decidedBy": "retention",
        }
        return Event(detail_type, expired)
    return None  # no state a request is ever stored in


def _machine_event(old: MachineImage | None, new: MachineImage) -> Event | None:
    if new.state == "revoked" and (old is None or old.state != "revoked"):
        detail_type = "security.machine.revoked"
        revoked: MachineRevokedDetail = {
            **_of_request(event_id(detail_type, new.machine_id), held(new.revoked_at), new),
            "machineId": new.machine_id,
            "state": "revoked",
            "decidedBy": new.revoked_by,
            "reason": new.revoke_reason or None,
        }
        return Event(detail_type, revoked)
    generation = new.token_generation
    if new.state == "active" and (old is None or old.token_generation != generation):
        detail_type = "security.machine.joined"
        # What the change of the machine's credentials replaced and what it put in place: the
        # public keys' SHA-256 (null for a machine that joined with a fingerprint only, which has
        # no key) and the certificates' serials (null: none, or nothing before a first join).
        joined: MachineJoinedDetail = {
            # Spelt out: mypy takes no unpacked header where a key is only sometimes present.
            "eventId": event_id(detail_type, new.machine_id, str(generation)),
            "occurredAt": held(new.rejoined_at if old is not None else new.joined_at),
            "tenantId": held(new.tenant_id),
            "siteId": new.site_id,
            "poolId": new.pool_id,
            "machineId": new.machine_id,
            "state": "active",
            "requestId": new.request_id,
            "tokenId": new.token_id,
            "rejoin": old is not None,
            "publicKeySha256": public_key_sha256(new.identity),
            "previousPublicKeySha256": public_key_sha256(old.identity) if old is not None else None,
            "certificateSerial": new.certificate_serial,
            "previousCertificateSerial": old.certificate_serial if old is not None else None,
            "decidedBy": "policy" if new.policy_rule else "operator" if new.request_id else "attestors",
        }
        if new.policy_rule:
            joined["policyRule"] = new.policy_rule
        tpm = _tpm(new.facts)
        if tpm is not None:
            joined["tpm"] = tpm
        caller = _aws(new.facts)
        if caller is not None:
            joined["aws"] = caller
        return Event(detail_type, joined)
    if (
        new.state == "active"
        and old is not None
        and old.identity is not None
        and new.identity is not None
        and old.identity != new.identity
    ):
        # A renewal onto a new key. A renewal that keeps the key is no event: it is counted
        # (Renewals) and shown on the machine (lastRenewedAt, its certificates). The new key's
        # identity can be taken once only, so it names the transition. Only a machine with a key
        # (and so a certificate) can renew.
        detail_type = "security.machine.key-rotated"
        rotated: MachineKeyRotatedDetail = {
            **_of_request(
                event_id(detail_type, new.machine_id, new.identity), held(new.last_renewed_at), new
            ),
            "machineId": new.machine_id,
            "state": "active",
            "publicKeySha256": held(public_key_sha256(new.identity)),
            "previousPublicKeySha256": held(public_key_sha256(old.identity)),
            "certificateSerial": held(new.certificate_serial),
            "previousCertificateSerial": old.certificate_serial,
            # The machine's own call, made with its token and proofs by both keys.
            "decidedBy": "machine",
        }
        return Event(detail_type, rotated)
    return None


def _tpm(facts: Mapping[str, Any] | None) -> MachineTpm | None:
    """`tpm` of a machine's join event, when it presented one: whether the TPM proved its EK
    (credential activation) and how the EK was trusted (docs/tpm.md)."""
    tpm = (facts or {}).get("tpm") or {}
    if not tpm.get("ekPublicKeySha256"):
        return None
    return {
        "ekPublicKeySha256": tpm["ekPublicKeySha256"],
        "activated": bool(tpm.get("activated", False)),
        "verifiedBy": tpm.get("verifiedBy"),
    }


def _aws(facts: Mapping[str, Any] | None) -> MachineAws | None:
    """`aws` of a machine's join event, when it joined by the AWS IAM method (docs/aws.md): the
    account and ARN STS named, and the EC2 instance whose profile signed."""
    aws = (facts or {}).get("aws") or {}
    if not aws.get("account"):
        return None
    caller: MachineAws = {"account": aws["account"], "arn": aws["arn"]}
    if aws.get("instanceId"):
        caller["instanceId"] = aws["instanceId"]
    return caller


def _cluster_event(old: ClusterNodeRecord | None, new: ClusterNodeRecord) -> Event | None:
    if old is not None:
        return None
    detail_type = "security.cluster.node-joined"
    detail: ClusterNodeJoinedDetail = {
        **in_pool(
            event_id(detail_type, new.tenant_id, new.pool_id, new.node_id, new.digest), new.joined_at, new
        ),
        "nodeId": new.node_id,
        "state": "member",
        "nodeIp": new.node_ip,
        "nodeVersion": new.node_version,
        "digest": new.digest,
        "guestCount": new.guest_count,
        "decidedBy": "cluster-key",
    }
    return Event(detail_type, detail)


# Each image type of what joins and machines do, and the event it makes (old None: the item is new).
BUILDERS: dict[type[Any], Any] = {
    RequestImage: _request_event,
    MachineImage: _machine_event,
    ClusterNodeRecord: _cluster_event,
}
