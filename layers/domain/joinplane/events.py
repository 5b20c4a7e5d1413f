"""Security events: derived from the table's stream, published to EventBridge.

The DynamoDB write of a transition is the source of truth. The publisher reads the stream (old and
new image of every write) and turns transitions into events; it never runs in a request path, so a
request cannot succeed without its event eventually following, and EventBridge being down delays
events instead of losing them. Delivery is at least once: `eventId` is a digest of what the
transition *is* (subject, detail-type, the state or generation reached), so a replayed stream record
yields the same id and consumers deduplicate on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from joinplane import aws
from joinplane.dal import stream
from joinplane.dal.clusters import ClusterNode
from joinplane.dal.stream import Image, MachineImage, RequestImage
from joinplane.settings import settings

SOURCE = "joinplane"
logger = logging.getLogger("joinplane")
BATCH = 10  # PutEvents takes at most 10 entries


class Event(NamedTuple):
    detail_type: str
    detail: dict[str, Any]
    sequence: str = ""  # the stream record it came from, for partial batch failures

    @property
    def event_id(self) -> str:
        return str(self.detail["eventId"])


def event_id(*parts: str) -> str:
    return "evt_" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _common(image: Image) -> dict[str, Any]:
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
                "decidedBy": "attestors" if not new.request_id else "operator",
            },
        )
    return None


def _cluster_event(old: ClusterNode | None, new: ClusterNode) -> Event | None:
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


def from_stream_record(record: Mapping[str, Any]) -> Event | None:
    """The event a stream record carries, if it is a security transition."""
    change = stream.change_of(record)
    if change is None:
        return None
    old, new = change.old, change.new
    if isinstance(new, RequestImage):
        event = _request_event(old if isinstance(old, RequestImage) else None, new)
    elif isinstance(new, MachineImage):
        event = _machine_event(old if isinstance(old, MachineImage) else None, new)
    else:
        event = _cluster_event(old if isinstance(old, ClusterNode) else None, new)
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
                    pending = [
                        e for e, r in zip(pending, response["Entries"], strict=True) if r.get("ErrorCode")
                    ]
                except Exception:
                    # Any failure of the call (throttling, outage): retry, then report the batch.
                    logger.warning("PutEvents failed (attempt %d)", attempt + 1, exc_info=True)
                if not pending:
                    break
                time.sleep(self.backoff * (2**attempt))
            failed += pending
        if failed:
            raise PublishFailed(failed)


def publish_stream_batch(records: Iterable[Mapping[str, Any]], publisher: Publisher) -> list[str]:
    """Publish a stream batch's events; the sequence numbers to report as failed (the first failed
    record and every record after it, so order is kept when the stream redelivers)."""
    ordered = list(records)
    events = [e for e in (from_stream_record(r) for r in ordered) if e is not None]
    try:
        publisher.publish(events)
        return []
    except PublishFailed as failure:
        sequences = [stream.sequence_of(r) for r in ordered]
        first = min(sequences.index(e.sequence) for e in failure.failed)
        return sequences[first:]
