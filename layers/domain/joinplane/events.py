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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from joinplane import aws, store
from joinplane.settings import settings

SOURCE = "joinplane"
logger = logging.getLogger("joinplane")
BATCH = 10  # PutEvents takes at most 10 entries


@dataclass(frozen=True)
class Event:
    detail_type: str
    detail: dict[str, Any]
    sequence: str = ""  # the stream record it came from, for partial batch failures

    @property
    def event_id(self) -> str:
        return str(self.detail["eventId"])


def event_id(*parts: str) -> str:
    return "evt_" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _common(item: Mapping[str, Any]) -> dict[str, Any]:
    return {"tenantId": item.get("tenantId"), "siteId": item.get("siteId"), "poolId": item.get("poolId")}


def _request_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Event | None:
    state = new.get("state")
    if old is not None and old.get("state") == state:
        return None  # not a transition (e.g. a retry touched nothing of note)
    name = "created" if state == "pending" else str(state)
    detail_type = f"security.join-request.{name}"
    detail: dict[str, Any] = {
        "eventId": event_id(detail_type, str(new["requestId"]), str(state)),
        "occurredAt": {
            "pending": new.get("createdAt"),
            "consumed": new.get("consumedAt"),
        }.get(str(state))
        or new.get("decidedAt")
        or new.get("expiredAt")
        or new.get("createdAt"),
        **_common(new),
        "requestId": new["requestId"],
        "state": state,
        "decidedBy": new.get("decidedBy"),
    }
    if state == "pending":
        detail["expiresAt"] = new.get("expiresAt")
        detail["reasons"] = new.get("reasons", [])
    if state == "approved":
        detail["expiresAt"] = new.get("expiresAt")
    if state in ("approved", "rejected") and new.get("reason"):
        detail["reason"] = new["reason"]
    if state == "consumed":
        detail["machineId"] = new.get("machineId")
    if state == "expired":
        detail["decidedBy"] = "retention"
        detail["occurredAt"] = new.get("expiredAt")
    return Event(detail_type, detail)


def _machine_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Event | None:
    base = {**_common(new), "machineId": new["machineId"], "state": new.get("state")}
    if new.get("state") == "revoked" and (old is None or old.get("state") != "revoked"):
        detail_type = "security.machine.revoked"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, str(new["machineId"])),
                "occurredAt": new.get("revokedAt"),
                **base,
                "decidedBy": new.get("revokedBy"),
                "reason": new.get("revokeReason") or None,
            },
        )
    generation = new.get("tokenGeneration")
    if new.get("state") == "active" and (old is None or old.get("tokenGeneration") != generation):
        detail_type = "security.machine.joined"
        return Event(
            detail_type,
            {
                "eventId": event_id(detail_type, str(new["machineId"]), str(generation)),
                "occurredAt": new.get("rejoinedAt") if old is not None else new.get("joinedAt"),
                **base,
                "requestId": new.get("requestId"),
                "tokenId": new.get("tokenId"),
                "rejoin": old is not None,
                "decidedBy": "attestors" if not new.get("requestId") else "operator",
            },
        )
    return None


def _cluster_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Event | None:
    if old is not None:
        return None
    detail_type = "security.cluster.node-joined"
    return Event(
        detail_type,
        {
            "eventId": event_id(
                detail_type,
                str(new.get("tenantId")),
                str(new.get("poolId")),
                str(new.get("nodeId")),
                str(new.get("digest")),
            ),
            "occurredAt": new.get("joinedAt"),
            **_common(new),
            "nodeId": new.get("nodeId"),
            "state": "member",
            "nodeIp": new.get("nodeIp"),
            "nodeVersion": new.get("nodeVersion"),
            "digest": new.get("digest"),
            "guestCount": new.get("guestCount"),
            "decidedBy": "cluster-key",
        },
    )


_BY_PREFIX: dict[str, Callable[[Mapping[str, Any] | None, Mapping[str, Any]], Event | None]] = {
    "JREQ#": _request_event,
    "MACHINE#": _machine_event,
    "CLUSTERNODE#": _cluster_event,
}


def from_stream_record(record: Mapping[str, Any]) -> Event | None:
    """The event a stream record carries, if it is a security transition."""
    change = record.get("dynamodb", {})
    new_raw = change.get("NewImage")
    if not new_raw:
        return None  # a deletion (TTL or cleanup) is not a security decision
    new = store.deserialize(new_raw)
    old = store.deserialize(change["OldImage"]) if change.get("OldImage") else None
    for prefix, derive in _BY_PREFIX.items():
        if str(new.get("pk", "")).startswith(prefix):
            event = derive(old, new)
            if event is None:
                return None
            return Event(event.detail_type, event.detail, str(change.get("SequenceNumber", "")))
    return None


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


class FakePublisher:
    """For unit tests: records what was published; can be told to fail."""

    def __init__(self) -> None:
        self.published: list[Event] = []
        self.failing = False

    def publish(self, events: list[Event]) -> None:
        if self.failing:
            raise PublishFailed(list(events))
        self.published += events


def publish_stream_batch(records: Iterable[Mapping[str, Any]], publisher: Publisher) -> list[str]:
    """Publish a stream batch's events; the sequence numbers to report as failed (the first failed
    record and every record after it, so order is kept when the stream redelivers)."""
    ordered = list(records)
    events = [e for e in (from_stream_record(r) for r in ordered) if e is not None]
    try:
        publisher.publish(events)
        return []
    except PublishFailed as failure:
        first = min(
            ordered.index(
                next(r for r in ordered if str(r.get("dynamodb", {}).get("SequenceNumber", "")) == e.sequence)
            )
            for e in failure.failed
        )
        return [str(r["dynamodb"]["SequenceNumber"]) for r in ordered[first:]]
