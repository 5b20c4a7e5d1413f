"""EventBridge rule (source `joinplane`) → the audit trail, once per eventId."""

from typing import Any

from joinplane import audit


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    stored = audit.record(event)
    return {"eventId": event["detail"]["eventId"], "stored": stored}
