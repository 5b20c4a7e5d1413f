"""The audit consumer stores each event once; auditEvents/list shows them newest first."""

from __future__ import annotations

from typing import Any

from joinplane import audit_trail, events
from tests.support import call
from tests.support.events import record, transitions


def as_eventbridge(event: events.Event) -> dict[str, Any]:
    return {"source": "joinplane", "detail-type": event.detail_type, "detail": event.detail}


def all_events() -> list[dict[str, Any]]:
    return [
        as_eventbridge(e) for e in (events.from_stream_record(record(o, n)) for _, o, n in transitions()) if e
    ]


def test_redelivered_events_are_stored_once(admin_key: str) -> None:
    delivered = all_events()
    assert [audit_trail.record(e) for e in delivered] == [True] * len(delivered)
    assert [audit_trail.record(e) for e in delivered] == [False] * len(delivered)
    listed = call("/api/compute/auditEvents/list", {"tenantId": "acme", "limit": 200}, admin_key).body[
        "events"
    ]
    assert len(listed) == len(delivered) == len({e["eventId"] for e in listed})


def test_newest_first_with_filters_and_cursor(admin_key: str) -> None:
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "gpu", "siteId": "s1", "name": "g", "workspaceId": "w"},
        admin_key,
    )
    for event in all_events():
        audit_trail.record(event)
    first = call(
        "/api/compute/auditEvents/list", {"tenantId": "acme", "poolId": "gpu", "limit": 3}, admin_key
    ).body
    occurred = [e["occurredAt"] for e in first["events"]]
    assert occurred == sorted(occurred, reverse=True) and "nextCursor" in first
    rest = call(
        "/api/compute/auditEvents/list",
        {"tenantId": "acme", "poolId": "gpu", "limit": 200, "cursor": first["nextCursor"]},
        admin_key,
    ).body
    seen = [e["eventId"] for e in first["events"] + rest["events"]]
    # (API keys, discovery entries and TPM keys belong to the tenant or a site: not the pool's)
    assert len(seen) == len(set(seen)) == len([e for e in all_events() if e["detail"]["poolId"] == "gpu"])
    only = call(
        "/api/compute/auditEvents/list",
        {"tenantId": "acme", "detailType": "security.machine.joined"},
        admin_key,
    ).body["events"]
    assert {e["detailType"] for e in only} == {"security.machine.joined"} and len(only) == 2


def test_audit_is_tenant_and_pool_scoped(admin_key: str) -> None:
    for event in all_events():
        audit_trail.record(event)
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "gpu", "siteId": "s1", "name": "g", "workspaceId": "w"},
        admin_key,
    )
    pool_key = call(
        "/api/compute/apiKeys/create",
        {"tenantId": "acme", "grants": ["audit:events:read@compute-pool/gpu"]},
        admin_key,
    ).body["key"]
    assert (
        call("/api/compute/auditEvents/list", {"tenantId": "acme", "poolId": "gpu"}, pool_key).status == 200
    )
    tenant_wide = call("/api/compute/auditEvents/list", {"tenantId": "acme"}, pool_key)
    assert tenant_wide.code == "NOT_FOUND"
    other = call("/api/compute/auditEvents/list", {"tenantId": "globex"}, pool_key)
    assert other.code == "PERMISSION_DENIED"


def test_an_event_is_kept_for_the_audit_retention_setting(admin_key: str, monkeypatch: Any) -> None:
    # Given a stack deployed with AuditRetentionDays=7 (the consumer's AUDIT_RETENTION_DAYS)
    from joinplane import clock, container
    from joinplane.dal import dynamo
    from joinplane.settings import settings

    monkeypatch.setenv("AUDIT_RETENTION_DAYS", "7")
    container.reset(keep_clients=True)
    assert settings().audit_retention_days == 7
    # When an event is recorded
    event = all_events()[0]
    assert audit_trail.record(event)
    # Then DynamoDB's TTL deletes it 7 days on, not before
    stored = [i for i in dynamo.query(pk="AUDIT#acme").items if i["eventId"] == event["detail"]["eventId"]]
    assert len(stored) == 1
    assert abs(stored[0]["ttl"] - (clock.epoch() + 7 * 86_400)) < 60


def test_the_default_audit_retention_is_400_days() -> None:
    from joinplane.settings import Settings

    assert Settings(table_name="t").audit_retention_days == 400
