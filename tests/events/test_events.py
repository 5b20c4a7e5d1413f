"""Stream records → events: which transitions publish, with deterministic ids and valid details."""

from __future__ import annotations

from collections import Counter
from typing import Any

import jsonschema
import pytest

from joinplane import aws, events
from tests.support.events import MACHINE, REQUEST, SCHEMAS, record, transitions


@pytest.mark.parametrize(("detail_type", "old", "new"), transitions())
def test_each_transition_publishes_one_valid_event(detail_type: str, old: dict | None, new: dict) -> None:
    event = events.from_stream_record(record(old, new))
    assert event is not None and event.detail_type == detail_type
    jsonschema.validate(event.detail, SCHEMAS[detail_type])
    # The same record replayed yields the same id
    again = events.from_stream_record(record(old, new))
    assert again is not None and again.event_id == event.event_id


def test_non_transitions_publish_nothing() -> None:
    assert events.from_stream_record(record(REQUEST, {**REQUEST, "machine": {"hostname": "x"}})) is None
    assert events.from_stream_record(record(REQUEST, None)) is None  # TTL deletion
    assert events.from_stream_record(record(None, {"pk": "POOL#x", "sk": "y"})) is None
    assert events.from_stream_record(record(MACHINE, {**MACHINE, "certificateSerial": "ab"})) is None
    # A renewal that keeps the key: a new certificate, the replaced one kept, the time it renewed
    renewed = {
        **MACHINE,
        "certificateSerial": "ab",
        "earlierCertificates": [{"serial": MACHINE["certificateSerial"], "caId": "ca_x", "expiresAt": "x"}],
        "lastRenewedAt": "2026-11-30T11:00:00Z",
    }
    assert events.from_stream_record(record(MACHINE, renewed)) is None


def test_a_machine_that_joined_with_a_fingerprint_names_no_key() -> None:
    # Given a machine whose identity is its fingerprint's (no CSR, no certificate)
    fingerprinted = {**MACHINE, "identity": "fp-" + "c3" * 32, "certificateSerial": None}
    # When it joins, and re-joins
    joined = events.from_stream_record(record(None, fingerprinted))
    rejoined = events.from_stream_record(
        record(fingerprinted, {**fingerprinted, "tokenGeneration": 2, "rejoinedAt": "2026-11-30T11:00:00Z"})
    )
    # Then neither event names a key or a certificate: a fingerprint's digest is no key's
    for event in (joined, rejoined):
        assert event is not None and event.detail_type == "security.machine.joined"
        jsonschema.validate(event.detail, SCHEMAS[event.detail_type])
        assert [event.detail[k] for k in ("publicKeySha256", "certificateSerial")] == [None, None]


def test_distinct_transitions_have_distinct_ids() -> None:
    ids = [e.event_id for e in (events.from_stream_record(record(o, n)) for _, o, n in transitions()) if e]
    assert len(set(ids)) == len(ids)


def stream_batch(count: int) -> list[dict[str, Any]]:
    return [
        record(None, {**REQUEST, "pk": f"JREQ#jreq_{i:026d}", "requestId": f"jreq_{i:026d}"}, str(100 + i))
        for i in range(count)
    ]


class RecordingPublisher:
    """A publisher that records what was published and can be told to fail."""

    def __init__(self) -> None:
        self.published: list[events.Event] = []
        self.failing = False

    def publish(self, batch: list[events.Event]) -> None:
        if self.failing:
            raise events.PublishFailed(list(batch))
        self.published += batch


def test_a_failed_publish_reports_the_first_failed_record_onward() -> None:
    fake = RecordingPublisher()
    assert events.publish_stream_batch(stream_batch(3), fake) == []
    assert len(fake.published) == 3
    fake.failing = True
    assert events.publish_stream_batch(stream_batch(3), fake) == ["100", "101", "102"]


def test_eventbridge_publisher_batches_by_ten_and_retries_refused_entries(table: str) -> None:
    # Given a bus, and EventBridge refusing the 3rd entry of the first call once
    calls: Counter[str] = Counter()
    refused_once = {"done": False}

    def count(**_: Any) -> None:
        calls["PutEvents"] += 1

    def refuse_one(parsed: dict[str, Any], **_: Any) -> None:
        if not refused_once["done"] and len(parsed.get("Entries", [])) >= 3:
            parsed["Entries"][2] = {"ErrorCode": "InternalFailure", "ErrorMessage": "injected"}
            parsed["FailedEntryCount"] = 1
            refused_once["done"] = True

    client = aws.client("events")
    client.meta.events.register("before-call.events.PutEvents", count)
    client.meta.events.register("after-call.events.PutEvents", refuse_one)
    try:
        batch = [e for e in (events.from_stream_record(r) for r in stream_batch(23)) if e]
        events.EventBridgePublisher(backoff=0).publish(batch)
    finally:
        client.meta.events.unregister("before-call.events.PutEvents", count)
        client.meta.events.unregister("after-call.events.PutEvents", refuse_one)
    # Then 23 events took 3 batches plus one retry of the refused entry
    assert calls["PutEvents"] == 4


def test_eventbridge_publisher_raises_what_still_fails(table: str) -> None:
    def down(**_: Any) -> None:
        raise ConnectionError("injected")

    client = aws.client("events")
    client.meta.events.register("before-call.events.PutEvents", down)
    try:
        batch = [e for e in (events.from_stream_record(r) for r in stream_batch(12)) if e]
        with pytest.raises(events.PublishFailed) as failure:
            events.EventBridgePublisher(backoff=0).publish(batch)
    finally:
        client.meta.events.unregister("before-call.events.PutEvents", down)
    assert len(failure.value.failed) == 12
    assert events.publish_stream_batch(stream_batch(2), _Down()) == ["100", "101"]


class _Down:
    def publish(self, batch: list[events.Event]) -> None:
        raise events.PublishFailed(batch)


def test_every_schema_is_a_valid_json_schema() -> None:
    # One schema per detail-type the publisher makes, no more
    assert set(SCHEMAS) == {detail_type for detail_type, _, _ in transitions()}
    for schema in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_a_machine_joined_with_a_tpm_says_whether_and_how_it_was_verified() -> None:
    # Given a machine admitted with an activated TPM trusted by its manufacturer, and one whose EK
    # was only named
    activated = {
        "ekPublicKeySha256": "ab" * 32,
        "activated": True,
        "verifiedBy": "manufacturer",
        "akName": "000b",
    }
    claimed = {"ekPublicKeySha256": "cd" * 32}
    details = []
    for tpm in (activated, claimed):
        event = events.from_stream_record(record(None, {**MACHINE, "facts": {"tpm": tpm}}))
        assert event is not None
        jsonschema.validate(event.detail, SCHEMAS["security.machine.joined"])
        details.append(event.detail["tpm"])
    # Then its joined event says so
    assert details == [
        {"ekPublicKeySha256": "ab" * 32, "activated": True, "verifiedBy": "manufacturer"},
        {"ekPublicKeySha256": "cd" * 32, "activated": False, "verifiedBy": None},
    ]
    # And a machine without a TPM has no `tpm` in its event
    plain = events.from_stream_record(record(None, MACHINE))
    assert plain is not None and "tpm" not in plain.detail


def test_a_machine_joined_by_the_aws_iam_method_names_its_caller() -> None:
    # Given a machine an EC2 instance profile's session admitted, and one an IAM user admitted
    arn = "arn:aws:sts::123456789012:assumed-role/gpu-node-a/i-0123456789abcdef0"
    profile = {"account": "123456789012", "arn": arn, "userId": "AROAEXAMPLE:i-0123456789abcdef0"}
    profile["instanceId"] = "i-0123456789abcdef0"
    user = {"account": "123456789012", "arn": "arn:aws:iam::123456789012:user/ops", "userId": "AIDAEXAMPLE"}
    details = []
    for caller in (profile, user):
        event = events.from_stream_record(record(None, {**MACHINE, "facts": {"aws": caller}}))
        assert event is not None
        jsonschema.validate(event.detail, SCHEMAS["security.machine.joined"])
        details.append(event.detail["aws"])
    # Then its joined event carries the account and ARN, and the instance when there is one
    assert details == [
        {"account": "123456789012", "arn": arn, "instanceId": "i-0123456789abcdef0"},
        {"account": "123456789012", "arn": "arn:aws:iam::123456789012:user/ops"},
    ]
    # And a machine that joined otherwise has no `aws`
    plain = events.from_stream_record(record(None, MACHINE))
    assert plain is not None and "aws" not in plain.detail
