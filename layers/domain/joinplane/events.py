"""Security events: derived from the table's stream, published to EventBridge.

The DynamoDB write of a transition is the source of truth. The publisher reads the stream (old and
new image of every write) and turns transitions into events (`joinplane.event_derivation`, which
says which writes are transitions and what each event's detail holds); it never runs in a request
path, so a request cannot succeed without its event eventually following, and EventBridge being
down delays events instead of losing them. Delivery is at least once: a replayed stream record
yields the same `eventId`, and consumers deduplicate on it.

What the publisher cannot ever decode (a corrupt image, a shape no record reads) is set aside,
logged by its keys and counted (RecordsSetAside), instead of holding its shard for the stream's
24 h; what it could not publish is retried, as the stream redelivers it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from joinplane import admin_event_derivation, aws, event_derivation, observe
from joinplane.dal import stream
from joinplane.event_derivation import Event
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


# Each image type and the event it makes (old None: the item is new).
_BUILDERS: dict[type[Any], Any] = event_derivation.BUILDERS | admin_event_derivation.BUILDERS


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
