"""Security events over HTTP, the whole chain running locally: table stream → publisher → EventBridge (moto)
→ rule → audit consumer → auditEvents/list."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from joinplane import aws
from tests.support import openssl_csr, sign_proof, wait_until
from tests.support.runtime import Http

CHAIN = [
    "security.join-request.created",
    "security.join-request.approved",
    "security.join-request.consumed",
    "security.machine.joined",
]


def audit_of(http: Http, pool: str, request_id: str, machine_id: str | None = None) -> list[dict[str, Any]]:
    status, body = http.post(
        "/api/compute/auditEvents/list", {"tenantId": "dev", "poolId": pool, "limit": 200}, http.admin
    )
    assert status == 200, body
    mine = [
        e
        for e in body["events"]
        if e["detail"].get("requestId") == request_id
        or (machine_id and e["detail"].get("machineId") == machine_id)
    ]
    return list(reversed(mine))  # oldest first


@pytest.fixture
def pool(http: Http, request: pytest.FixtureRequest) -> str:
    name = f"ev-{request.node.name[-20:].strip('_')}"[:40]
    status, _ = http.post(
        "/api/compute/pools/create",
        {"tenantId": "dev", "poolId": name, "siteId": "dev-site", "name": name, "workspaceId": "w"},
        http.admin,
    )
    assert status == 200
    return name


def deferred_join(http: Http, pool: str, tmp_path: Path) -> tuple[str, str, str]:
    _, token = http.post(
        "/api/compute/joinTokens/create",
        {"tenantId": "dev", "poolId": pool, "requireApproval": True},
        http.admin,
    )
    csr = openssl_csr(tmp_path, "/CN=e2e")
    status, body = http.post("/machines/join", {"joinToken": token["token"], "csr": csr})
    assert status == 202, body
    return token["token"], csr, body["joinRequest"]["requestId"]


def test_an_approval_over_http_reaches_the_audit_trail(http: Http, pool: str, tmp_path: Path) -> None:
    token, csr, request_id = deferred_join(http, pool, tmp_path)
    status, _ = http.post(
        "/api/compute/joinRequests/approve",
        {"tenantId": "dev", "poolId": pool, "requestId": request_id},
        http.admin,
    )
    assert status == 200
    # The approval shows up in the audit trail (the issue asks for within a second; the deadline here
    # is wider because CI machines are shared, and `make bench` reports the measured latency)
    wait_until(
        lambda: any(
            e["detailType"] == "security.join-request.approved" for e in audit_of(http, pool, request_id)
        ),
        5,
    )
    # The retry that consumes the approval proves it holds the key (as the agent does)
    body = json.dumps({"joinToken": token, "csr": csr}).encode()
    proof = sign_proof(tmp_path / "key.pem", purpose="join", credential=token, body=body)
    status, admitted = http.post("/machines/join", None, raw=body, headers={"joinplane-proof": proof})
    assert status == 200, admitted
    wait_until(lambda: len(audit_of(http, pool, request_id, admitted["machineId"])) == 4, 5)
    events = audit_of(http, pool, request_id, admitted["machineId"])
    assert [e["detailType"] for e in events] == CHAIN
    approved = events[1]["detail"]
    assert approved["expiresAt"] and approved["decidedBy"].startswith("key_") and approved["poolId"] == pool


def test_events_survive_an_eventbridge_outage_and_arrive_once(http: Http, pool: str, tmp_path: Path) -> None:
    # Given PutEvents failing on every call
    def outage(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://events.injected-outage")

    events_client = aws.client("events")
    events_client.meta.events.register("before-call.events.PutEvents", outage)
    try:
        # When a request is created and approved during the outage
        _, _, request_id = deferred_join(http, pool, tmp_path)
        http.post(
            "/api/compute/joinRequests/approve",
            {"tenantId": "dev", "poolId": pool, "requestId": request_id},
            http.admin,
        )
        time.sleep(1.5)
        # Then nothing has arrived yet
        assert audit_of(http, pool, request_id) == []
    finally:
        events_client.meta.events.unregister("before-call.events.PutEvents", outage)
    # And once EventBridge recovers, every event arrives, each exactly once
    wait_until(lambda: len(audit_of(http, pool, request_id)) >= 2, 20)
    time.sleep(1)  # any duplicate delivery would land by now
    events = audit_of(http, pool, request_id)
    assert [e["detailType"] for e in events] == CHAIN[:2]
    assert len({e["eventId"] for e in events}) == len(events)


def test_an_unused_approval_expires_by_the_clock_before_and_after_retention(
    http: Http, pool: str, tmp_path: Path
) -> None:
    token, csr, request_id = deferred_join(http, pool, tmp_path)
    http.post(
        "/api/compute/joinRequests/approve",
        {"tenantId": "dev", "poolId": pool, "requestId": request_id, "ttlSeconds": 60},
        http.admin,
    )
    http.advance(61)

    def reads_expired() -> None:
        listed = http.post(
            "/api/compute/joinRequests/list",
            {"tenantId": "dev", "poolId": pool, "state": "expired"},
            http.admin,
        )[1]
        assert [r["requestId"] for r in listed["requests"]] == [request_id]
        assert listed["requests"][0]["state"] == "expired"
        approved = http.post(
            "/api/compute/joinRequests/list",
            {"tenantId": "dev", "poolId": pool, "state": "approved"},
            http.admin,
        )[1]
        assert approved["requests"] == []
        again = http.post(
            "/api/compute/joinRequests/approve",
            {"tenantId": "dev", "poolId": pool, "requestId": request_id},
            http.admin,
        )
        assert again[0] == 409 and again[1]["error"]["code"] == "INVALID_STATE"
        retry = http.post("/machines/join", {"joinToken": token, "csr": csr})
        assert retry[0] == 403 and retry[1]["code"] == 7

    # Before the retention job has run
    reads_expired()
    # After it has (it marks the request, which publishes the expiry)
    assert http.run_schedule("RetentionFunction")["expired"] >= 1
    reads_expired()
    wait_until(
        lambda: any(
            e["detailType"] == "security.join-request.expired" for e in audit_of(http, pool, request_id)
        ),
        5,
    )
