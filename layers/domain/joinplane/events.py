"""Security events: derived from the table's stream, published to EventBridge.

The DynamoDB write of a transition is the source of truth. The publisher reads the stream (old and
new image of every write) and turns transitions into events; it never runs in a request path, so a
request cannot succeed without its event eventually following, and EventBridge being down delays
events instead of losing them. Delivery is at least once: `eventId` is a digest of what the
transition *is* (subject, detail-type, the state or generation reached), so a replayed stream record
yields the same id and consumers deduplicate on it.

Operators' actions are events too (join tokens, API keys, pools, cluster keys, discovery entries,
TPM allow-list keys): each item stores the acting API key in the write that changes it, and the
event names it as `decidedBy`. Never a secret, nor a secret's hash: details are built field by
field from what the item says, and `secretSha256` is never one of them.

What the publisher cannot ever decode (a corrupt image, a shape no record reads) is set aside,
logged by its keys and counted (RecordsSetAside), instead of holding its shard for the stream's
24 h; what it could not publish is retried, as the stream redelivers it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from joinplane import aws, clock, observe
from joinplane.dal import stream
from joinplane.dal.apikeys import ApiKeyRecord
from joinplane.dal.authorities import CertificateAuthority
from joinplane.dal.clusters import ClusterKeyRecord, ClusterNodeRecord
from joinplane.dal.discovery import DiscoveryEntryRecord
from joinplane.dal.machines import public_key_sha256
from joinplane.dal.pools import PoolRecord
from joinplane.dal.removals import RemovalRecord
from joinplane.dal.stream import MachineImage, RequestImage
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.dal.tpm_allow import AllowedKeyRecord
from joinplane.settings import settings

SOURCE = "joinplane"
BATCH = 10  # PutEvents takes at most 10 entries
# The operators' actions: counted as AdminActions (by action) when their events are published.
ADMIN = (
    "security.join-token.",
    "security.api-key.",
    "security.pool.",
    "security.cluster-key.",
    "security.certificate-authority.",
    "security.discovery-entry.",
    "security.tpm-key.",
    "security.machine.revoked",
)


class Event(NamedTuple):
    detail_type: str
    detail: dict[str, Any]
    sequence: str = ""  # the stream record it came from, for partial batch failures

    @property
    def event_id(self) -> str:
        return str(self.detail["eventId"])


def event_id(*parts: str) -> str:
    return "evt_" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _common(
    image: RequestImage
    | MachineImage
    | ClusterNodeRecord
    | PoolRecord
    | ClusterKeyRecord
    | CertificateAuthority,
) -> dict[str, Any]:
    return {"tenantId": image.tenant_id, "siteId": image.site_id, "poolId": image.pool_id}


def _request_event(old: RequestImage | None, new: RequestImage) -> Event | None:
    state = new.state
    if old is not None and old.state == state:
        return None  # not a transition (e.g. a retry touched nothing of note)
    name = "created" if state == "pending" else str(state)
    detail_type = f"security.join-request.{name}"
    detail: dict[str, Any] = {
        "eventId": event_id(detail_type, new.request_id, str(state)),
        "occurredAt": {"pending": new.created_at, "consumed": new.consumed_at}.get(str(state))
        or new.decided_at
        or new.expired_at
        or new.created_at,
        **_common(new),
        "requestId": new.request_id,
        "state": state,
        "decidedBy": new.decided_by,
    }
    if state == "pending":
        detail["expiresAt"] = new.expires_at
        detail["reasons"] = new.reasons
    if state == "approved":
        detail["expiresAt"] = new.expires_at
    if state in ("approved", "rejected") and new.reason:
        detail["reason"] = new.reason
    if state == "consumed":
        detail["machineId"] = new.machine_id
    if state == "expired":
        detail["decidedBy"] = "retention"
        detail["occurredAt"] = new.expired_at
    return Event(detail_type, detail)


def _credentials(old: MachineImage | None, new: MachineImage) -> dict[str, Any]:
    """What a change of a machine's credentials replaced and what it put in place: the public
    keys' SHA-256 (null for a machine that joined with a fingerprint only, which has no key) and
    the certificates' serials (null: none, or nothing before a first join)."""
    return {
        "publicKeySha256": public_key_sha256(new.identity),
        "previousPublicKeySha256": public_key_sha256(old.identity) if old is not None else None,
        "certificateSerial": new.certificate_serial,
        "previousCertificateSerial": old.certificate_serial if old is not None else None,
    }


def _machine_event(old: MachineImage | None, new: MachineImage) -> Event | None:
    base = {**_common(new), "machineId": new.machine_id, "state": new.state}
    if new.state == "revoked" and (old is None or old.state != "revoked"):
        detail_type = "security.machine.revoked"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.machine_id),
                "occurredAt": new.revoked_at,
                **base,
                "decidedBy": new.revoked_by,
                "reason": new.revoke_reason or None,
            },
        )
    generation = new.token_generation
    if new.state == "active" and (old is None or old.token_generation != generation):
        detail_type = "security.machine.joined"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.machine_id, str(generation)),
                "occurredAt": new.rejoined_at if old is not None else new.joined_at,
                **base,
                "requestId": new.request_id,
                "tokenId": new.token_id,
                "rejoin": old is not None,
                **_credentials(old, new),
                "decidedBy": "attestors" if not new.request_id else "operator",
                **_tpm_detail(new.facts),
            },
        )
    if (
        new.state == "active"
        and old is not None
        and old.identity is not None
        and new.identity is not None
        and old.identity != new.identity
    ):
        # A renewal onto a new key. A renewal that keeps the key is no event: it is counted
        # (Renewals) and shown on the machine (lastRenewedAt, its certificates). The new key's
        # identity can be taken once only, so it names the transition.
        detail_type = "security.machine.key-rotated"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.machine_id, new.identity),
                "occurredAt": new.last_renewed_at,
                **base,
                **_credentials(old, new),
                # The machine's own call, made with its token and proofs by both keys.
                "decidedBy": "machine",
            },
        )
    return None


def _tpm_detail(facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """`tpm` of a machine's join event, when it presented one: whether the TPM proved its EK
    (credential activation) and how the EK was trusted (docs/tpm.md)."""
    tpm = (facts or {}).get("tpm") or {}
    if not tpm.get("ekPublicKeySha256"):
        return {}
    return {
        "tpm": {
            "ekPublicKeySha256": tpm["ekPublicKeySha256"],
            "activated": bool(tpm.get("activated", False)),
            "verifiedBy": tpm.get("verifiedBy"),
        }
    }


def _cluster_event(old: ClusterNodeRecord | None, new: ClusterNodeRecord) -> Event | None:
    if old is not None:
        return None
    detail_type = "security.cluster.node-joined"
    return Event(
        detail_type,
        {
            "eventId": event_id(detail_type, new.tenant_id, new.pool_id, new.node_id, new.digest),
            "occurredAt": new.joined_at,
            **_common(new),
            "nodeId": new.node_id,
            "state": "member",
            "nodeIp": new.node_ip,
            "nodeVersion": new.node_version,
            "digest": new.digest,
            "guestCount": new.guest_count,
            "decidedBy": "cluster-key",
        },
    )


def _token_event(old: JoinTokenRecord | None, new: JoinTokenRecord) -> Event | None:
    base = {"tenantId": new.tenant_id, "siteId": new.site_id, "poolId": new.pool_id, "tokenId": new.token_id}
    if old is None:
        detail_type = "security.join-token.created"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.token_id),
                "occurredAt": new.created_at,
                **base,
                "state": "active",
                "expiresAt": new.expires_at,
                "maxUses": new.max_uses,
                "requireApproval": new.require_approval,
                "attestation": new.attestation.to_dict(),
                "decidedBy": new.created_by,
            },
        )
    if new.state == "revoked" and old.state != "revoked":
        detail_type = "security.join-token.revoked"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.token_id),
                "occurredAt": new.revoked_at,
                **base,
                "state": "revoked",
                "decidedBy": new.revoked_by,
            },
        )
    return None  # a use spent, or nothing of note


def _api_key_event(old: ApiKeyRecord | None, new: ApiKeyRecord) -> Event | None:
    # API keys belong to the tenant, not to a site or pool.
    base = {"tenantId": new.tenant_id, "siteId": None, "poolId": None, "keyId": new.key_id}
    if old is None:
        detail_type = "security.api-key.created"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.key_id),
                "occurredAt": new.created_at,
                **base,
                "state": "active",
                "grants": list(new.grants),
                "decidedBy": new.created_by,
            },
        )
    if new.state == "revoked" and old.state != "revoked":
        detail_type = "security.api-key.revoked"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.key_id),
                "occurredAt": new.revoked_at,
                **base,
                "state": "revoked",
                "decidedBy": new.revoked_by,
            },
        )
    return None


# A pool's settings, as the API names them (the stored names are the same): what `changed` lists.
_POOL_SETTINGS = {
    "name": "name",
    "workspace_id": "workspaceId",
    "bootstrap": "bootstrap",
    "join_request_ttl_seconds": "joinRequestTtlSeconds",
    "certificate_ttl_seconds": "certificateTtlSeconds",
    "ca_propagation_seconds": "caPropagationSeconds",
    "cluster": "cluster",
}


def _pool_event(old: PoolRecord | None, new: PoolRecord) -> Event | None:
    base = {**_common(new), "state": new.state, "version": new.version}
    if old is None:
        detail_type = "security.pool.created"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.tenant_id, new.pool_id),
                "occurredAt": new.created_at,
                **base,
                "name": new.name,
                "workspaceId": new.workspace_id,
                "decidedBy": new.created_by,
            },
        )
    if new.state == "archived" and old.state != "archived":
        detail_type = "security.pool.archived"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.tenant_id, new.pool_id),
                "occurredAt": new.archived_at or new.updated_at,
                **base,
                "decidedBy": new.archived_by,
            },
        )
    if new.state == "active" and new.version != old.version:
        # Names only: a pool's bootstrap holds credentials (telemetry, billing tokens).
        changed = [
            name for field, name in _POOL_SETTINGS.items() if getattr(old, field) != getattr(new, field)
        ]
        detail_type = "security.pool.updated"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, new.tenant_id, new.pool_id, str(new.version)),
                "occurredAt": new.updated_at,
                **base,
                "changed": changed,
                "decidedBy": new.updated_by,
            },
        )
    return None  # a cluster key repointed (its own event), or nothing of note


def _cluster_key_event(old: ClusterKeyRecord | None, new: ClusterKeyRecord) -> Event | None:
    # One rotation writes the new key and retires the previous one: the new key's INSERT is its
    # event; the previous key's change to `rotated` is the same transition, not another event.
    if old is not None:
        return None
    detail_type = "security.cluster-key.rotated"
    return Event(
        detail_type,
        {
            "eventId": event_id(detail_type, new.key_id),
            "occurredAt": new.created_at,
            **_common(new),
            "clusterKeyId": new.key_id,
            "previousClusterKeyId": new.previous_key_id,
            "state": "active",
            "decidedBy": new.created_by,
        },
    )


# The events of a rotation in phases carry when the CA signs (prepared) or was due to (activated).
_PHASED = frozenset({"security.certificate-authority.prepared", "security.certificate-authority.activated"})


def _certificate_authority_event(old: CertificateAuthority | None, new: CertificateAuthority) -> Event | None:
    # A CA put as `active` is the pool's first (created) or an emergency rotation's (rotated); so is
    # an upstream CA's import into a pool without a CA (pending -> active), with `upstream: true`.
    # A rotation in phases is `prepared` (put as prepared, or an import's pending -> prepared), then
    # `activated` (prepared -> active). The retirement of the CA replaced is the same transaction
    # as the activation, not another event. A `pending` CA put is a certificate request
    # (requested); abandoning it for a newer one is part of that newer request's transaction. Once
    # the bundle lets a retired CA go (`expired`), that is the CA's last event.
    decided_by = new.created_by
    if new.state == "active" and (old is None or old.state == "pending"):
        detail_type = (
            "security.certificate-authority.rotated"
            if new.previous_ca_id
            else "security.certificate-authority.created"
        )
        occurred_at = new.created_at if old is None else new.activated_at or ""
        decided_by = new.created_by if old is None else new.activated_by or ""
    elif old is None and new.state == "pending":
        detail_type, occurred_at = "security.certificate-authority.requested", new.created_at
    elif new.state == "prepared" and (old is None or old.state == "pending"):
        # A rotation's next CA (put as prepared), or an import's (pending -> prepared): in the
        # bundle, signing nothing until activatesAt or an explicit activation.
        detail_type = "security.certificate-authority.prepared"
        occurred_at = new.created_at if old is None else new.imported_at or ""
        decided_by = new.created_by if old is None else new.imported_by or ""
    elif old is not None and old.state == "prepared" and new.state == "active":
        detail_type, occurred_at, decided_by = (
            "security.certificate-authority.activated",
            new.activated_at or "",
            new.activated_by or "",
        )
    elif old is not None and old.state == "retired" and new.state == "expired":
        detail_type, occurred_at, decided_by = (
            "security.certificate-authority.expired",
            new.expired_at or "",
            "retention",
        )
    else:
        return None
    return Event(
        detail_type,
        {
            "eventId": event_id(detail_type, new.ca_id),
            "occurredAt": occurred_at,
            **_common(new),
            "caId": new.ca_id,
            "previousCaId": new.previous_ca_id,
            "kmsKeyId": new.key_id,
            # A pending CA is always an upstream one: its request awaits the organisation's CA.
            "upstream": bool(new.chain_pem) or new.state == "pending",
            "state": new.state,
            "bundleUntil": clock.rfc3339(new.bundle_until) if new.bundle_until is not None else None,
            **(
                {"activatesAt": clock.rfc3339(new.activates_at) if new.activates_at is not None else None}
                if detail_type in _PHASED
                else {}
            ),
            # The acting API key; `join` for a first CA a join made, `retention` for an expiry.
            "decidedBy": decided_by,
        },
    )


def _discovery_event(old: DiscoveryEntryRecord | None, new: DiscoveryEntryRecord) -> Event | None:
    if old is not None:
        return None  # entries are never changed in place
    detail_type = "security.discovery-entry.registered"
    return Event(
        detail_type,
        {
            "eventId": event_id(detail_type, new.tenant_id, new.site_id, new.entry_id),
            "occurredAt": new.created_at,
            "tenantId": new.tenant_id,
            "siteId": new.site_id,
            "poolId": None,
            "entryId": new.entry_id,
            "state": "registered",
            "serialNumber": new.serial_number,
            "systemUuid": new.system_uuid,
            "macAddresses": list(new.mac_addresses),
            "machineFingerprint": new.machine_fingerprint,
            "hostname": new.hostname,
            "decidedBy": new.created_by,
        },
    )


def _tpm_key_event(old: AllowedKeyRecord | None, new: AllowedKeyRecord) -> Event | None:
    if old is not None:
        return None  # keys are never changed in place
    detail_type = "security.tpm-key.allowed"
    return Event(
        detail_type,
        {
            # A key can be added again once removed: each addition is its own (createdAt).
            "eventId": event_id(detail_type, new.tenant_id, new.site_id, new.ek_sha256, new.created_at),
            "occurredAt": new.created_at,
            "tenantId": new.tenant_id,
            "siteId": new.site_id,
            "poolId": None,
            "ekPublicKeySha256": new.ek_sha256,
            "addedFrom": new.added_from,
            "state": "allowed",
            "decidedBy": new.created_by,
        },
    )


def _removal_event(old: RemovalRecord | None, new: RemovalRecord) -> Event | None:
    if old is not None:
        return None
    subject = "entryId" if new.kind == "discovery-entry" else "ekPublicKeySha256"
    detail_type = f"security.{new.kind}.removed"
    return Event(
        detail_type,
        {
            # The addition it ends (addedAt) tells apart two removals of one re-added TPM key.
            "eventId": event_id(detail_type, new.tenant_id, new.site_id, new.subject_id, new.added_at),
            "occurredAt": new.removed_at,
            "tenantId": new.tenant_id,
            "siteId": new.site_id,
            "poolId": None,
            subject: new.subject_id,
            "state": "removed",
            "addedAt": new.added_at,
            "decidedBy": new.removed_by,
        },
    )


# Each image type and the event it makes (old None: the item is new).
_BUILDERS: dict[type[Any], Any] = {
    RequestImage: _request_event,
    MachineImage: _machine_event,
    ClusterNodeRecord: _cluster_event,
    JoinTokenRecord: _token_event,
    ApiKeyRecord: _api_key_event,
    PoolRecord: _pool_event,
    ClusterKeyRecord: _cluster_key_event,
    CertificateAuthority: _certificate_authority_event,
    DiscoveryEntryRecord: _discovery_event,
    AllowedKeyRecord: _tpm_key_event,
    RemovalRecord: _removal_event,
}


def from_stream_record(record: Mapping[str, Any]) -> Event | None:
    """The event a stream record carries, if it is a security transition. Raises when the record
    cannot be read (see `publish_stream_batch`)."""
    change = stream.change_of(record)
    if change is None:
        return None
    old, new = change.old, change.new
    build = _BUILDERS[type(new)]
    event: Event | None = build(old if type(old) is type(new) else None, new)
    if event is None:
        return None
    return Event(event.detail_type, event.detail, change.sequence)


class PublishFailed(Exception):
    def __init__(self, failed: list[Event]) -> None:
        super().__init__(f"{len(failed)} events could not be published")
        self.failed = failed


class Publisher(Protocol):
    def publish(self, events: list[Event]) -> None: ...


class EventBridgePublisher:
    """PutEvents in batches of 10; entries EventBridge refused are retried a few times, and what
    still fails is raised (PublishFailed) so the stream redelivers exactly those records."""

    def __init__(self, bus_name: str | None = None, attempts: int = 3, backoff: float = 0.2) -> None:
        self.bus_name = bus_name
        self.attempts = attempts
        self.backoff = backoff

    def _entry(self, event: Event) -> dict[str, Any]:
        return {
            "Source": SOURCE,
            "DetailType": event.detail_type,
            "Detail": json.dumps(event.detail, separators=(",", ":"), sort_keys=True),
            "EventBusName": self.bus_name or settings().event_bus_name,
        }

    def publish(self, events: list[Event]) -> None:
        failed: list[Event] = []
        for start in range(0, len(events), BATCH):
            pending = events[start : start + BATCH]
            for attempt in range(self.attempts):
                try:
                    response = aws.client("events").put_events(Entries=[self._entry(e) for e in pending])
                    refused = [
                        (e, r)
                        for e, r in zip(pending, response["Entries"], strict=True)
                        if r.get("ErrorCode")
                    ]
                    for event, entry in refused:
                        # What EventBridge said of each entry: the first thing on-call reads.
                        observe.log(
                            "WARNING",
                            "PutEvents failed",
                            attempt=attempt + 1,
                            eventId=event.event_id,
                            detailType=event.detail_type,
                            errorCode=entry.get("ErrorCode"),
                            errorMessage=entry.get("ErrorMessage"),
                        )
                    pending = [e for e, _ in refused]
                except Exception as error:
                    # Any failure of the call (throttling, outage): retry, then report the batch.
                    observe.log(
                        "WARNING",
                        "PutEvents failed",
                        attempt=attempt + 1,
                        events=len(pending),
                        error=type(error).__name__,
                        errorCode=getattr(error, "response", {}).get("Error", {}).get("Code"),
                    )
                if not pending:
                    break
                time.sleep(self.backoff * (2**attempt))
            failed += pending
        if failed:
            raise PublishFailed(failed)


def _set_aside(record: Mapping[str, Any], error: Exception) -> None:
    """A record that can never be decoded: say which (keys only: the image may hold anything),
    count it for the alarm, and let the shard move on."""
    keys: dict[str, Any] = stream.keys_of(record)
    observe.log("ERROR", "stream record set aside", error=type(error).__name__, **keys)
    observe.count("RecordsSetAside", outcome="undecodable")


def publish_stream_batch(records: Iterable[Mapping[str, Any]], publisher: Publisher) -> list[str]:
    """Publish a stream batch's events; the sequence numbers to report as failed (the first failed
    record and every record after it, so order is kept when the stream redelivers).

    Two kinds of trouble, told apart because they want opposite answers. A record that cannot be
    decoded fails the same way every time (decoding reads nothing but the record: no I/O, nothing
    transient), so retrying it would hold its shard until the stream drops it 24 h later, with every
    record behind it: it is set aside (`_set_aside`) and the batch goes on. A publish that failed is
    transient (EventBridge throttled or down): its record and every one after it are reported, so
    the stream redelivers them, in order, until they are published."""
    ordered = list(records)
    events: list[Event] = []
    for record in ordered:
        try:
            event = from_stream_record(record)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            # A decoding error is a bug or corrupt data, never transient. Anything else (out of
            # memory, say) fails the invocation, and the stream retries the whole batch.
            _set_aside(record, error)
            continue
        if event is not None:
            events.append(event)
    failed: list[Event] = []
    try:
        publisher.publish(events)
    except PublishFailed as failure:
        failed = failure.failed
    _count_published(ordered, events, failed)
    if not failed:
        return []
    sequences = [stream.sequence_of(r) for r in ordered]
    first = min(sequences.index(e.sequence) for e in failed)
    return sequences[first:]


def _count_published(records: list[Mapping[str, Any]], events: list[Event], failed: list[Event]) -> None:
    """EventsPublished and EventsFailed, PublisherLag (the oldest published record's age: what an
    operator wants to know is how far behind the slowest event is), and AdminActions by action.
    Counted per delivery: an event published again after a redelivery counts again."""
    not_published = {id(e) for e in failed}
    published = [e for e in events if id(e) not in not_published]
    if published:
        observe.count("EventsPublished", len(published), outcome="published")
        created = {stream.sequence_of(r): stream.created_epoch_of(r) for r in records}
        ages = [time.time() - at for at in (created.get(e.sequence) for e in published) if at is not None]
        if ages:
            # ApproximateCreationDateTime is whole seconds: a lag under a second reads 0 to 1000 ms.
            observe.count("PublisherLag", max(0.0, max(ages)) * 1000, outcome="published")
        actions = Counter(
            e.detail_type.removeprefix("security.") for e in published if e.detail_type.startswith(ADMIN)
        )
        for action, n in sorted(actions.items()):
            observe.count("AdminActions", n, outcome=action)
    if failed:
        observe.count("EventsFailed", len(failed), outcome="failed")
