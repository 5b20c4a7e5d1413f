"""Table stream → EventBridge. Reports partial batch failures: the first record whose event could
not be published and every record after it, so the stream redelivers them in order (consumers
deduplicate on eventId). A record that can never be decoded is set aside (logged by its keys,
counted as RecordsSetAside) rather than holding its shard (joinplane.events)."""

from typing import Any

from joinplane import events

publisher = events.EventBridgePublisher()


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    failed = events.publish_stream_batch(event.get("Records", []), publisher)
    return {"batchItemFailures": [{"itemIdentifier": sequence} for sequence in failed]}
