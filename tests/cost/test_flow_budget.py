"""What each flow costs in calls, across every function it sets off (the HTTP function, the
authorizer, the stream's publisher, the audit consumer), pinned as `make cost` measures them: a
change that adds a call, writes another item or touches another index entry fails here, and
docs/cost.md says what each one costs. Units and durations are `make cost`'s to report, not
pinned: a certificate's signature varies by a byte or two, a duration with the machine's load.

One local runtime for the module, the flows prepared together and run once each (~30 s, most of
it the stream mapping's one-second batching window, waited out after each flow)."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator

import pytest

from joinplane_local.cost import FLOWS, Flows, Lines, measure_once
from joinplane_local.meter import Meter
from joinplane_local.runtime import start_runtime

ONCE = [key for key, _, _ in FLOWS if key != "hourOfWaiting"]  # an hour is 20 pending retries


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[str, Lines]]:
    meter = Meter()
    meter.install()
    try:
        with start_runtime(port=0, log=io.StringIO()) as runtime:
            meter.attach(runtime)
            yield measure_once(Flows(runtime), meter, ONCE)
    finally:
        meter.uninstall()


def calls(lines: Lines) -> Counter[str]:
    counted: Counter[str] = Counter()
    for charge in lines.charges:
        if charge.service != "CloudWatch Logs":
            counted[f"{charge.service} {charge.line}"] += charge.calls
    return counted


def touched(lines: Lines) -> set[str]:
    """The DynamoDB items (by key prefix) and index entries each call read or wrote."""
    return {name for charge in lines.charges if charge.service == "DynamoDB" for name in charge.detail}


JOIN = "Lambda MachineJoinFunction (512 MB)"
JOIN_REQUEST = "API Gateway HTTP API POST /machines/join"
READ = "DynamoDB GetItem (MachineJoinFunction)"
COMMIT = "DynamoDB TransactWriteItems (MachineJoinFunction)"
SIGN = "KMS Sign (MachineJoinFunction)"


def published(events: int, audited: int | None = None) -> dict[str, int]:
    """The chain after the table: the publisher's invocations and events, the audit items."""
    audited = events if audited is None else audited
    return {
        "Lambda EventPublisherFunction (256 MB)": events,
        "EventBridge PutEvents (EventPublisherFunction)": events,
        "Lambda AuditConsumerFunction (256 MB)": audited,
        "DynamoDB PutItem (AuditConsumerFunction)": audited,
    }


AUDIT = {"AUDIT PutItem", "AUDIT gsi1"}


def test_an_admit(measured: dict[str, Lines]) -> None:
    # When a machine is admitted at once: the token and the key's (absent) record read, one
    # transaction, one signature, one event
    lines = measured["admit"]
    assert calls(lines) == Counter({JOIN_REQUEST: 1, JOIN: 1, READ: 2, COMMIT: 1, SIGN: 1, **published(1)})
    assert touched(lines) == AUDIT | {
        "JOINTOKEN read",
        "JOINID read",
        "JOINTOKEN Update",
        "JOINTOKEN gsi1",
        "MACHINE Put",
        "MACHINE gsi1",
        "HWCLAIM Put",
        "JOINID Put",
        "TENANT ConditionCheck",
    }


def test_a_deferral_its_approval_and_its_consumption(measured: dict[str, Lines]) -> None:
    # When a machine is deferred, approved by an operator, and asks again
    lines = measured["deferApproveConsume"]
    assert calls(lines) == Counter(
        {
            JOIN_REQUEST: 2,
            JOIN: 2,
            READ: 5,
            COMMIT: 2,
            SIGN: 1,
            "API Gateway HTTP API POST /api/compute/joinRequests/approve": 1,
            "Lambda JoinRequestsFunction (512 MB)": 1,
            "DynamoDB GetItem (JoinRequestsFunction)": 2,
            "DynamoDB UpdateItem (JoinRequestsFunction)": 1,
            **published(3, audited=4),
        }
    )
    assert touched(lines) == AUDIT | {
        "JOINTOKEN read",
        "JOINTOKEN Update",
        "JOINTOKEN gsi1",
        "JOINID read",
        "JREQ read",
        "JREQ Put",
        "JREQ Update",
        "JREQ UpdateItem",
        "JREQ gsi1",
        "JREQ gsi2",
        "JREQ gsi3",
        "MACHINE Put",
        "MACHINE gsi1",
        "HWCLAIM Put",
        "JOINID Put",
        "JOINID Update",
        "TENANT read",
        "TENANT ConditionCheck",
    }


def test_a_pending_retry(measured: dict[str, Lines]) -> None:
    # When a deferred machine asks again before any decision: three reads and the proof's mark
    # (the only write: it keeps the signed retry from consuming the approval later), nothing
    # reaches the event bus
    lines = measured["pendingRetry"]
    assert calls(lines) == Counter(
        {JOIN_REQUEST: 1, JOIN: 1, READ: 3, "DynamoDB UpdateItem (MachineJoinFunction)": 1}
    )
    assert touched(lines) == {"JOINTOKEN read", "JOINID read", "JREQ read", "JOINID UpdateItem"}


def test_a_renewal(measured: dict[str, Lines]) -> None:
    # When a machine renews with the same key: its stream record is filtered out before it
    # reaches the publisher (it publishes nothing)
    lines = measured["renew"]
    assert calls(lines) == Counter(
        {"API Gateway HTTP API POST /machines/renew": 1, JOIN: 1, READ: 1, COMMIT: 1, SIGN: 1}
    )
    assert touched(lines) == {
        "MACHINE read",
        "MACHINE Update",
        "MACHINE gsi1",
        "JOINID Update",
        "TENANT ConditionCheck",
    }


def test_a_rejoin(measured: dict[str, Lines]) -> None:
    # When an admitted machine joins again with its key: the token, its record and its machine
    # read, then one transaction and one signature
    lines = measured["rejoin"]
    assert calls(lines) == Counter({JOIN_REQUEST: 1, JOIN: 1, READ: 3, COMMIT: 1, SIGN: 1, **published(1)})
    assert touched(lines) == AUDIT | {
        "JOINTOKEN read",
        "JOINID read",
        "MACHINE read",
        "MACHINE Update",
        "MACHINE gsi1",
        "JOINID Update",
        "TENANT ConditionCheck",
    }


def test_a_cluster_accept_join(measured: dict[str, Lines]) -> None:
    # When a cluster's first node joins with 5 guests: the members twice and the guest items once,
    # each one Query
    lines = measured["clusterJoin"]
    assert calls(lines) == Counter(
        {
            "API Gateway HTTP API POST /cluster/accept-join": 1,
            "Lambda ClusterJoinFunction (512 MB)": 1,
            "DynamoDB GetItem (ClusterJoinFunction)": 2,
            "DynamoDB Query (ClusterJoinFunction)": 3,
            "DynamoDB TransactWriteItems (ClusterJoinFunction)": 1,
            **published(1),
        }
    )
    assert touched(lines) == AUDIT | {
        "CLUSTERKEY read",
        "TENANT read",
        "table Query",
        "CLUSTER Put",
        "CLUSTERNODE Put",
        "TENANT ConditionCheck",
    }
    # Each Query reads under 4 KB (a new cluster's guest items: none), 1 RRU each
    assert sum(c.units for c in lines.charges if c.line.startswith("Query")) == 3.0
