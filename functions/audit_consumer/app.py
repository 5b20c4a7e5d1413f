"""EventBridge rule (source `joinplane`) → the audit trail, once per eventId."""

from typing import Any

from joinplane import audit_trail


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    stored = audit_trail.record(event)
    return {"eventId": event["detail"]["eventId"], "stored": stored}
