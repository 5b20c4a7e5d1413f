"""`joinplane audit`: the security events, each shown by the thing it is about."""

from __future__ import annotations

from typing import Any

from joinplane_cli import render
from joinplane_cli.admin import Operator
from joinplane_cli.exits import Exit
from joinplane_cli.render import Column

_NOT_SUBJECTS = frozenset({"eventId", "tenantId", "siteId", "poolId", "tokenId"})


def flatten(event: dict[str, Any]) -> dict[str, Any]:
    """The event's own fields and its `detail` (where the subject ids, state and reason live) as
    one mapping; the envelope wins where both have a field."""
    detail = event.get("detail")
    return {
        **(detail if isinstance(detail, dict) else {}),
        **{k: v for k, v in event.items() if k != "detail"},
    }


def event_subject(event: dict[str, Any]) -> str:
    """The thing an event is about: its request for join-request events, its machine for machine
    events, else the first other id it carries."""
    fields = flatten(event)
    kind = str(fields.get("detailType", ""))
    if ".join-request." in kind and fields.get("requestId"):
        return str(fields["requestId"])
    if ".machine." in kind and fields.get("machineId"):
        return str(fields["machineId"])
    if ".join-token." in kind and fields.get("tokenId"):
        return str(fields["tokenId"])
    for name, value in sorted(fields.items()):
        if name.endswith("Id") and name not in _NOT_SUBJECTS and isinstance(value, str) and value:
            return value
    return ""


def audit_list(
    op: Operator,
    pool: str | None,
    detail_type: str | None,
    limit: int | None,
    cursor: str | None,
    every: bool,
) -> Exit:
    body: dict[str, Any] = {}
    if pool:
        body["poolId"] = pool
    if detail_type:
        # `join-request.approved` is what the table shows; the API wants the full detail-type.
        body["detailType"] = detail_type if detail_type.startswith("security.") else f"security.{detail_type}"
    items, next_cursor, now = op.pages(
        "auditEvents/list", body, "events", "audit event", limit=limit, cursor=cursor, every=every
    )
    columns: list[Column] = [
        ("when", lambda e: render.since(e.get("occurredAt"), now)),
        ("event", lambda e: str(e.get("detailType", "")).removeprefix("security.")),
        ("subject", event_subject),
        ("state", lambda e: flatten(e).get("state")),
        ("pool", lambda e: e.get("poolId")),
        ("by", lambda e: flatten(e).get("decidedBy")),
        ("reason", lambda e: flatten(e).get("reason")),
    ]
    return op.listing(items, next_cursor, "events", columns, "No audit events.")
