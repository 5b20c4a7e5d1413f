"""The stream publisher on call: what it cannot ever decode is set aside (logged by its keys,
counted) and the shard moves on; what it could not publish is retried by the stream; and it counts
what it published, what failed, how late, and the operators' actions among them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from joinplane import events
from tests.support.events import API_KEY, REQUEST, TOKEN, record
from tests.support.logs import counted, log_lines

MARKER = "image-contents-never-logged"


class Recording:
    def __init__(self, failing: bool = False) -> None:
        self.published: list[events.Event] = []
        self.failing = failing

    def publish(self, batch: list[events.Event]) -> None:
        if self.failing:
            raise events.PublishFailed(list(batch))
        self.published += batch


def good(sequence: str, written_ago: float = 0.0) -> dict[str, Any]:
    rid = f"jreq_{int(sequence):026d}"
    change = record(None, {**REQUEST, "pk": f"JREQ#{rid}", "requestId": rid}, sequence)
    change["dynamodb"]["ApproximateCreationDateTime"] = int(time.time() - written_ago)
    return change


def garbage(sequence: str) -> dict[str, Any]:
    """A join token's INSERT that no record can read: its required attributes are missing."""
    change = record(None, {"pk": "JOINTOKEN#jtok_x", "sk": "JOINTOKEN", "description": MARKER}, sequence)
    change["eventID"] = "3f1c0d2e"
    return change


def test_a_record_that_cannot_be_decoded_is_set_aside_and_the_batch_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a batch with an undecodable record between two good ones
    batch = [good("101"), garbage("102"), good("103")]
    publisher = Recording()
    # When the publisher handles it
    failed = events.publish_stream_batch(batch, publisher)
    out = capsys.readouterr().out
    # Then the good ones are published and nothing is reported failed (the shard moves on)
    assert failed == []
    assert [e.sequence for e in publisher.published] == ["101", "103"]
    # And the set-aside record is logged by its keys, never by its contents
    [line] = [line for line in log_lines(out) if line["message"] == "stream record set aside"]
    assert line["level"] == "ERROR"
    assert (line["pk"], line["sk"], line["sequenceNumber"], line["eventID"]) == (
        "JOINTOKEN#jtok_x",
        "JOINTOKEN",
        "102",
        "3f1c0d2e",
    )
    assert line["error"] == "KeyError"
    assert MARKER not in out
    # And counted for the alarm
    assert ("RecordsSetAside", "undecodable", 1) in counted(out)
    assert ("EventsPublished", "published", 2) in counted(out)


def test_a_record_that_is_not_even_a_stream_record_is_set_aside(capsys: pytest.CaptureFixture[str]) -> None:
    broken = {"dynamodb": {"SequenceNumber": "7", "NewImage": {"pk": {"Q": MARKER}}}}
    assert events.publish_stream_batch([broken, good("8")], Recording()) == []
    out = capsys.readouterr().out
    [line] = [line for line in log_lines(out) if line["message"] == "stream record set aside"]
    assert line["sequenceNumber"] == "7" and MARKER not in out


def test_a_failed_publish_is_retried_not_set_aside(capsys: pytest.CaptureFixture[str]) -> None:
    # Given EventBridge failing
    batch = [good("201"), garbage("202"), good("203")]
    # When the batch is handled
    failed = events.publish_stream_batch(batch, Recording(failing=True))
    out = capsys.readouterr().out
    # Then the first failed record and every one after it are reported, for the stream to redeliver
    assert failed == ["201", "202", "203"]
    assert ("EventsFailed", "failed", 2) in counted(out)
    assert not any(metric == "EventsPublished" for metric, _, _ in counted(out))


def test_the_publisher_lag_is_the_oldest_published_record_s_age(capsys: pytest.CaptureFixture[str]) -> None:
    # Given records written 30 s and 5 s ago (the stream fell behind)
    events.publish_stream_batch([good("301", written_ago=30), good("302", written_ago=5)], Recording())
    lags = [value for metric, outcome, value in counted(capsys.readouterr().out) if metric == "PublisherLag"]
    # Then one lag is counted, in milliseconds, the oldest record's
    assert len(lags) == 1 and 29_000 <= lags[0] <= 32_000


def test_admin_actions_are_counted_by_action_when_published(capsys: pytest.CaptureFixture[str]) -> None:
    batch = [
        record(None, TOKEN, "401"),
        record(None, API_KEY, "402"),
        record(None, {**API_KEY, "pk": "APIKEY#key_2", "keyId": "key_2"}, "403"),
        good("404"),
    ]
    events.publish_stream_batch(batch, Recording())
    admin = sorted((o, v) for m, o, v in counted(capsys.readouterr().out) if m == "AdminActions")
    # A join request is no admin action
    assert admin == [("api-key.created", 2), ("join-token.created", 1)]
