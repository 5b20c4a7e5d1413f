"""The template's other event sources: the table's stream, an EventBridge rule and a schedule."""

from __future__ import annotations

import json
import time
from typing import Any

from joinplane import clock
from tests.support import wait_until
from tests.support.runtime import Local

TABLE = "joinplane-local-fixture-table"
BUS = "joinplane-local-fixture-bus"


def _put(local: Local, key: str, **extra: Any) -> None:
    item = {"pk": {"S": key}, **{name: {"BOOL": True} for name in extra}}
    local.client("dynamodb").put_item(TableName=TABLE, Item=item)


def _keys(records: list[dict[str, Any]]) -> list[str]:
    return [r["dynamodb"]["Keys"]["pk"]["S"] for r in records]


def test_stream_records_arrive_in_order_in_lambdas_event_shape(fresh: Local) -> None:
    # Given
    consumer = fresh.module("StreamConsumer")
    stream_arn = fresh.client("dynamodb").describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]

    # When
    _put(fresh, "shape-1")
    fresh.client("dynamodb").update_item(
        TableName=TABLE,
        Key={"pk": {"S": "shape-1"}},
        UpdateExpression="SET payload = :b",
        ExpressionAttributeValues={":b": {"B": b"\x00\x01"}},
    )
    fresh.client("dynamodb").delete_item(TableName=TABLE, Key={"pk": {"S": "shape-1"}})
    assert fresh.runtime.drain(10)

    # Then
    insert, modify, remove = consumer.PROCESSED
    assert [r["eventName"] for r in (insert, modify, remove)] == ["INSERT", "MODIFY", "REMOVE"]
    assert list(insert) == [
        "eventID",
        "eventName",
        "eventVersion",
        "eventSource",
        "awsRegion",
        "dynamodb",
        "eventSourceARN",
    ]
    assert insert["eventVersion"] == "1.1"
    assert insert["eventSource"] == "aws:dynamodb"
    assert insert["awsRegion"] == "us-east-1"
    assert insert["eventSourceARN"] == stream_arn
    change = insert["dynamodb"]
    assert change["Keys"] == {"pk": {"S": "shape-1"}}
    assert change["NewImage"] == {"pk": {"S": "shape-1"}}
    assert "OldImage" not in change
    assert change["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    assert isinstance(change["ApproximateCreationDateTime"], int)
    assert isinstance(change["SizeBytes"], int)
    assert modify["dynamodb"]["NewImage"]["payload"] == {"B": "AAE="}  # binary arrives base64, as in Lambda
    assert modify["dynamodb"]["OldImage"] == {"pk": {"S": "shape-1"}}
    assert "NewImage" not in remove["dynamodb"]
    sequence = [int(r["dynamodb"]["SequenceNumber"]) for r in (insert, modify, remove)]
    assert sequence == sorted(sequence)


def test_a_partial_batch_failure_is_redelivered_from_the_failed_record_in_order(fresh: Local) -> None:
    # Given
    consumer = fresh.module("StreamConsumer")
    keys = [f"partial-{i}" for i in range(7)]

    # When: the fourth record fails once, reported as a batch item failure
    for index, key in enumerate(keys):
        if index == 3:
            _put(fresh, key, failOnce=True)
        else:
            _put(fresh, key)
    assert fresh.runtime.drain(10)

    # Then: nothing lost, nothing out of order, and only the failed record onwards came again
    assert _keys(consumer.PROCESSED) == keys
    delivered = [key for batch in consumer.BATCHES for key in _keys(batch)]
    assert delivered.count("partial-3") == 2
    assert all(delivered.count(key) == 1 for key in keys[:3])
    assert all(len(batch) <= 3 for batch in consumer.BATCHES)  # BatchSize
    assert _keys(consumer.BATCHES[-1])[-1] == "partial-6"


def test_a_batch_whose_invocation_raises_is_retried_whole(fresh: Local) -> None:
    # Given
    consumer = fresh.module("StreamConsumer")

    # When
    _put(fresh, "raise-0", raiseOnce=True)
    assert fresh.runtime.drain(10)

    # Then
    assert _keys(consumer.PROCESSED) == ["raise-0"]
    assert [_keys(batch) for batch in consumer.BATCHES] == [["raise-0"], ["raise-0"]]
    assert "RuntimeError: raising once" in fresh.log.text()


def test_a_write_that_changes_nothing_makes_no_stream_record(fresh: Local) -> None:
    # Given
    consumer = fresh.module("StreamConsumer")
    _put(fresh, "same")
    assert fresh.runtime.drain(10)

    # When
    _put(fresh, "same")
    _put(fresh, "after")
    assert fresh.runtime.drain(10)

    # Then
    assert _keys(consumer.PROCESSED) == ["same", "after"]


def _put_event(local: Local, detail: dict[str, Any], detail_type: str = "thing.happened") -> None:
    entry = {
        "Source": "fixture.test",
        "DetailType": detail_type,
        "Detail": json.dumps(detail),
        "EventBusName": BUS,
    }
    assert local.client("events").put_events(Entries=[entry])["FailedEntryCount"] == 0


def test_matching_events_on_the_bus_reach_the_rule_consumer(fresh: Local) -> None:
    # Given
    consumer = fresh.module("RuleConsumer")

    # When
    _put_event(fresh, {"n": 1})
    _put_event(fresh, {"n": 2}, detail_type="something.else")  # the pattern does not match
    assert fresh.runtime.drain(10)

    # Then
    (event,) = consumer.RECEIVED
    assert event["detail"] == {"n": 1}
    assert event["source"] == "fixture.test"
    assert event["detail-type"] == "thing.happened"
    assert event["account"] == "123456789012"
    assert event["region"] == "us-east-1"
    assert event["version"] == "0"
    assert event["id"] and event["time"].endswith("Z")
    assert "ingestion-time" not in event


def test_a_failed_event_delivery_is_retried(fresh: Local) -> None:
    # Given
    consumer = fresh.module("RuleConsumer")

    # When
    _put_event(fresh, {"failOnce": True})

    # Then: it comes back once the message is visible again (the async retry)
    (event,) = wait_until(lambda: consumer.RECEIVED, timeout=10)
    assert len(consumer.ATTEMPTS) == 2
    assert set(consumer.ATTEMPTS) == {event["id"]}
    assert fresh.runtime.drain(10)


def test_a_schedule_runs_on_request_with_a_scheduled_event(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/_local/schedules/Ticker/run")

    # Then
    assert (reply.status, reply.json()) == (200, {"runs": 1})
    (event,) = fresh.module("Ticker").RUNS
    assert event["source"] == "aws.events"
    assert event["detail-type"] == "Scheduled Event"
    assert event["detail"] == {}
    assert event["time"] == clock.rfc3339(clock.epoch()) or event["time"] < clock.rfc3339(clock.epoch())
    assert event["resources"][0].startswith("arn:aws:events:us-east-1:123456789012:rule/")
    assert fresh.call("POST", "/_local/schedules/Echo/run").status == 404


def test_a_schedule_runs_when_the_clock_reaches_it(fresh: Local) -> None:
    # Given
    runs = fresh.module("Ticker").RUNS
    schedule = fresh.runtime.workers.scheduler.find("Ticker")
    assert schedule is not None
    wait = schedule.next_due - clock.epoch()

    # When: not yet due
    clock.advance(max(0.0, wait - 30))
    time.sleep(0.7)  # longer than a scheduler check; nothing may run

    # Then
    assert runs == []

    # When: due
    fresh.call("POST", "/_local/clock", body={"advanceSeconds": 31})

    # Then: it runs once, and its next run is one period later
    wait_until(lambda: runs, timeout=5)
    assert len(runs) == 1
    assert schedule.next_due > clock.epoch()
