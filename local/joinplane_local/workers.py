"""The template's event sources other than HTTP, run in background threads.

- `DynamoDB` events: a poller per event source mapping reads the table's stream the way Lambda's
  does and invokes the function with Lambda's DynamoDB stream event: in order per shard, in
  batches of `BatchSize`, at least once. A partial batch response (`ReportBatchItemFailures`)
  checkpoints before the first failed record and retries from there; an error retries the whole
  batch. Both after a short backoff, for `MaximumRetryAttempts` (default: until it succeeds).
- `EventBridgeRule` events: a real rule on the emulated bus with the event's pattern, targeting an
  SQS queue that stands in for Lambda's asynchronous invocation queue, so the pattern matching is
  EventBridge's (moto's) own. A failed invocation is retried when the message becomes visible
  again, up to the function's async retry limit (`EventInvokeConfig.MaximumRetryAttempts`, 2).
- `Schedule`/`ScheduleV2` events: due on the `joinplane.clock`, so moving the local clock forward
  makes them run, as time passing would.
- `AWS::Events::Rule` resources whose target is an `AWS::Events::ApiDestination` (the operators'
  webhook, present when its `Condition` holds): a real rule on the emulated bus targeting an SQS
  queue, drained by `ApiDestinationConsumer`, which applies the target's input transformer, makes
  the request, retries per the target's `RetryPolicy` (event age counted from when the queue
  received it) and sends what fails to its dead-letter queue with EventBridge's message attributes
  (see `webhook.py`).

Not emulated: BisectBatchOnFunctionError, MaximumRecordAgeInSeconds, on-failure destinations,
ParallelizationFactor (one batch in flight per shard, as with the default of 1), and the retry
policies and dead-letter queues of `EventBridgeRule` function events.
"""

from __future__ import annotations

import base64
import json
import math
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO
from urllib.parse import parse_qsl

from joinplane import clock

from .functions import FunctionError, Functions, report_failure
from .gateway import Gateway, Request, Response
from .template import Template, referenced_logical_id
from .webhook import ApiDestinationTarget, Outcome, api_destination_targets, body_for, deliver

ClientFactory = Callable[[str], Any]

STREAM_POLL_SECONDS = 0.1
SHARD_REFRESH_SECONDS = 1.0
SCHEDULE_CHECK_SECONDS = 0.5
QUEUE_WAIT_SECONDS = 1
# Stands in for the delay between Lambda's async retries (about 1 and 2 minutes on AWS).
QUEUE_VISIBILITY_SECONDS = 2
DEFAULT_ASYNC_RETRIES = 2
MAX_BACKOFF_SECONDS = 5.0
FIRST_BACKOFF_SECONDS = 0.2


def _backoff(attempts: int) -> float:
    return float(min(FIRST_BACKOFF_SECONDS * 2 ** max(0, attempts - 1), MAX_BACKOFF_SECONDS))


class _Loop:
    """A background thread that runs `cycle()` until stopped and reports its errors once each."""

    name = "worker"
    interval = 0.1

    def __init__(self, log: TextIO) -> None:
        self.log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: str | None = None
        self.completed = 0  # deliveries finished (any outcome): drain() sees work happen

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"joinplane-{self.name}", daemon=True)
        self._thread.start()

    def signal_stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.cycle()
                self._last_error = None
            except Exception as error:
                text = f"{type(error).__name__}: {error}"
                if text != self._last_error:
                    print(f"[joinplane-local] {self.name}: {text} (retrying)", file=self.log, flush=True)
                    self._last_error = text
                self.on_error()
                self._stop.wait(1.0)
                continue
            self._stop.wait(self.interval)

    def cycle(self) -> None:
        raise NotImplementedError

    def on_error(self) -> None:
        pass

    def is_quiet_since(self, instant: float) -> bool:
        raise NotImplementedError


# --- DynamoDB streams --------------------------------------------------------------------


def _lambda_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """An attribute value as Lambda's JSON has it (boto3 hands binary over as bytes)."""
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(inner).decode() if isinstance(inner, bytes) else inner}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() if isinstance(b, bytes) else b for b in inner]}
    if kind == "M":
        return {"M": {k: _lambda_attribute(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_lambda_attribute(v) for v in inner]}
    return {kind: inner}


def _lambda_image(image: dict[str, Any]) -> dict[str, Any]:
    return {name: _lambda_attribute(value) for name, value in image.items()}


def lambda_stream_record(record: dict[str, Any], stream_arn: str, region: str) -> dict[str, Any]:
    """A GetRecords record as Lambda delivers it, in Lambda's field order."""
    source = record["dynamodb"]
    created = source.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        created = created.timestamp()
    dynamodb: dict[str, Any] = {}
    if created is not None:
        dynamodb["ApproximateCreationDateTime"] = int(created)
    dynamodb["Keys"] = _lambda_image(source.get("Keys", {}))
    for image in ("NewImage", "OldImage"):
        if image in source:
            dynamodb[image] = _lambda_image(source[image])
    dynamodb["SequenceNumber"] = source["SequenceNumber"]
    dynamodb["SizeBytes"] = source.get("SizeBytes", 0)
    dynamodb["StreamViewType"] = source.get("StreamViewType")
    out: dict[str, Any] = {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": dynamodb,
        "eventSourceARN": stream_arn,
    }
    if "userIdentity" in record:
        out["userIdentity"] = record["userIdentity"]
    return out


@dataclass
class _Shard:
    shard_id: str
    parent: str | None
    start_at: str
    iterator: str | None = None
    started: bool = False
    finished: bool = False  # closed and fully read
    pending: list[dict[str, Any]] = field(default_factory=list)
    buffered_at: float | None = None
    retry_at: float = 0.0
    attempts: int = 0
    last_read: str | None = None


class StreamPoller(_Loop):
    """One `Type: DynamoDB` event source mapping."""

    interval = STREAM_POLL_SECONDS

    def __init__(
        self,
        functions: Functions,
        function: str,
        event_name: str,
        properties: dict[str, Any],
        template: Template,
        clients: ClientFactory,
        log: TextIO,
    ) -> None:
        super().__init__(log)
        self.function = function
        self.name = f"{function}.{event_name}"
        self.functions = functions
        self.region = template.names.region
        stream = properties.get("Stream")
        table = referenced_logical_id(stream, "StreamArn")
        if table is not None:
            self.table_name = template.names.ref(table)
        else:
            found = re.match(
                r"arn:[^:]+:dynamodb:[^:]*:[^:]*:table/([^/]+)/stream/", str(template.resolve(stream))
            )
            if found is None:
                raise ValueError(f"{self.name}: Stream must be !GetAtt <Table>.StreamArn or a stream ARN")
            self.table_name = found.group(1)
        props = template.resolve(properties)
        self.batch_size = int(props.get("BatchSize", 100))
        self.starting_position = str(props.get("StartingPosition", "LATEST"))
        self.window = float(props.get("MaximumBatchingWindowInSeconds", 0))
        self.partial = "ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or [])
        self.max_retries = int(props.get("MaximumRetryAttempts", -1))
        self.enabled = bool(props.get("Enabled", True))
        self.filters = [
            _pattern(f.get("Pattern")) for f in (props.get("FilterCriteria") or {}).get("Filters", [])
        ]
        self.dynamodb = clients("dynamodb")
        self.streams = clients("dynamodbstreams")
        self.stream_arn: str | None = None
        self._known_arn: str | None = None
        self._initial = self.starting_position
        self._fresh = True
        self._refreshed_at = -math.inf
        self.shards: dict[str, _Shard] = {}
        self.quiet_at: float | None = None

    def is_quiet_since(self, instant: float) -> bool:
        return self.quiet_at is not None and self.quiet_at >= instant

    def on_error(self) -> None:
        self.quiet_at = None
        # Rediscover the stream (the table may have been recreated) and take fresh iterators
        # after the last record read (one may have expired); undelivered records stay pending.
        self.stream_arn = None
        for shard in self.shards.values():
            if not shard.finished:
                shard.started = False
                shard.iterator = None

    def describe(self) -> str:
        return f"DynamoDB stream of {self.table_name} → {self.function} (BatchSize {self.batch_size})"

    def prepare(self) -> None:
        """Find the stream and take the starting positions now, so that writes made right after
        the runtime starts are delivered even with StartingPosition LATEST."""
        self._discover()
        self._refresh_shards()

    def _discover(self) -> None:
        table = self.dynamodb.describe_table(TableName=self.table_name)["Table"]
        arn = table.get("LatestStreamArn")
        if not arn:
            raise RuntimeError(f"table {self.table_name} has no stream")
        if arn != self._known_arn:
            # The first stream starts at StartingPosition; a later one (the table was recreated)
            # is all new, so it is read from its start.
            self._initial = self.starting_position if self._known_arn is None else "TRIM_HORIZON"
            self.shards = {}
            self._fresh = True
        self._known_arn = self.stream_arn = arn
        self._refreshed_at = -math.inf

    def _refresh_shards(self) -> None:
        assert self.stream_arn is not None
        if time.monotonic() - self._refreshed_at < SHARD_REFRESH_SECONDS:
            return
        description = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        self._refreshed_at = time.monotonic()
        for raw in description.get("Shards", []):
            if raw["ShardId"] in self.shards:
                continue
            shard = _Shard(raw["ShardId"], raw.get("ParentShardId"), start_at="TRIM_HORIZON")
            if self._fresh and self._initial == "LATEST":
                # LATEST means the tip of the open shards; closed ones hold only the past.
                shard.finished = "EndingSequenceNumber" in raw.get("SequenceNumberRange", {})
                shard.start_at = "LATEST"
            self.shards[shard.shard_id] = shard
        self._fresh = False
        for shard in self.shards.values():
            if shard.started or shard.finished:
                continue
            parent = self.shards.get(shard.parent) if shard.parent else None
            if parent is not None and not parent.finished:
                continue  # a child is read after its parent, which keeps each key's order
            kwargs: dict[str, Any] = {"ShardIteratorType": shard.start_at}
            if shard.last_read is not None:
                kwargs = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": shard.last_read}
            shard.iterator = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard.shard_id, **kwargs
            )["ShardIterator"]
            shard.started = True

    def cycle(self) -> None:
        if not self.enabled:
            self.quiet_at = time.monotonic()
            return
        started = time.monotonic()
        busy = False
        if self.stream_arn is None:
            self._discover()
        self._refresh_shards()
        for shard in list(self.shards.values()):
            if shard.iterator is not None and len(shard.pending) < self.batch_size:
                busy |= self._read(shard)
            if shard.pending:
                busy = True
                if self._due(shard):
                    self._deliver(shard)
        if not busy:
            self.quiet_at = started
        else:
            self.quiet_at = None

    def _read(self, shard: _Shard) -> bool:
        assert self.stream_arn is not None
        answer = self.streams.get_records(ShardIterator=shard.iterator, Limit=min(1000, self.batch_size))
        shard.iterator = answer.get("NextShardIterator")
        if shard.iterator is None:
            shard.finished = True
        records = answer.get("Records", [])
        for raw in records:
            shard.last_read = raw["dynamodb"]["SequenceNumber"]
            record = lambda_stream_record(raw, self.stream_arn, self.region)
            change = record["dynamodb"]
            # DynamoDB writes no stream record for a write that changed nothing; moto does.
            if (
                record["eventName"] == "MODIFY"
                and "OldImage" in change
                and change.get("NewImage") == change["OldImage"]
            ):
                continue
            if self.filters and not any(f(record) for f in self.filters):
                continue  # Lambda drops records no filter matches
            if not shard.pending:
                shard.buffered_at = time.monotonic()
            shard.pending.append(record)
        return bool(records)

    def _due(self, shard: _Shard) -> bool:
        now = time.monotonic()
        if now < shard.retry_at:
            return False
        if len(shard.pending) >= self.batch_size or self.window <= 0 or shard.attempts > 0:
            return True
        return shard.buffered_at is not None and now - shard.buffered_at >= self.window

    def _deliver(self, shard: _Shard) -> None:
        batch = shard.pending[: self.batch_size]
        failed_from: int | None = None
        try:
            result = self.functions.invoke(self.function, {"Records": batch})
        except FunctionError as error:
            report_failure(self.function, error, self.log)
            failed_from = 0
        else:
            if self.partial:
                failed_from = self._first_failure(batch, result)
        self.completed += 1
        if failed_from is None:
            del shard.pending[: len(batch)]
            shard.attempts = 0
            shard.buffered_at = time.monotonic() if shard.pending else None
            return
        # Checkpoint before the first failure: everything from it on is delivered again, in order.
        del shard.pending[:failed_from]
        # Retries are counted per checkpoint: progress past a record starts the count afresh.
        shard.attempts = 1 if failed_from > 0 else shard.attempts + 1
        if 0 <= self.max_retries < shard.attempts:
            dropped = len(batch) - failed_from
            print(
                f"[joinplane-local] {self.name}: discarding {dropped} record(s) after "
                f"{self.max_retries} retries (MaximumRetryAttempts)",
                file=self.log,
                flush=True,
            )
            del shard.pending[:dropped]
            shard.attempts = 0
            return
        shard.retry_at = time.monotonic() + _backoff(shard.attempts)

    def _first_failure(self, batch: list[dict[str, Any]], result: Any) -> int | None:
        """Index of the first failed record by Lambda's partial batch rules, None if none failed."""
        failures = result.get("batchItemFailures") if isinstance(result, dict) else None
        if not failures:
            return None
        sequence = [r["dynamodb"]["SequenceNumber"] for r in batch]
        indexes = []
        for failure in failures if isinstance(failures, list) else [None]:
            identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
            if not identifier or identifier not in sequence:
                # Lambda treats a malformed or unknown identifier as a failure of the whole batch.
                print(
                    f"[joinplane-local] {self.name}: invalid batchItemFailures entry {failure!r}; "
                    "retrying the whole batch",
                    file=self.log,
                    flush=True,
                )
                return 0
            indexes.append(sequence.index(identifier))
        return min(indexes)


def _pattern(raw: Any) -> Callable[[dict[str, Any]], bool]:
    """An event filter pattern as a predicate, with moto's EventBridge pattern matcher."""
    from moto.events.models import EventPattern, EventPatternParser

    text = raw if isinstance(raw, str) else json.dumps(raw)
    pattern = EventPattern(text, EventPatternParser(text).parse())

    def matches(record: dict[str, Any]) -> bool:
        event: Any = record
        return bool(pattern.matches_event(event))

    return matches


# --- EventBridge rules -------------------------------------------------------------------


def envelope(event: dict[str, Any], account: str) -> dict[str, Any]:
    """EventBridge's event envelope, in its order; moto leaves `account` out."""
    return {
        "version": event.get("version", "0"),
        "id": event.get("id"),
        "detail-type": event.get("detail-type"),
        "source": event.get("source"),
        "account": event.get("account", account),
        "time": event.get("time"),
        "region": event.get("region"),
        "resources": event.get("resources", []),
        "detail": event.get("detail", {}),
    }


def _resource_name(*parts: str, limit: int) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", "-".join(p for p in parts if p))
    return name[:limit]


class RuleConsumer(_Loop):
    """One `Type: EventBridgeRule` event: rule → SQS queue → the function."""

    interval = 0.0  # the long poll is the wait

    def __init__(
        self,
        functions: Functions,
        function: str,
        event_name: str,
        properties: dict[str, Any],
        template: Template,
        clients: ClientFactory,
        log: TextIO,
        suffix: str = "",
    ) -> None:
        super().__init__(log)
        self.function = function
        self.name = f"{function}.{event_name}"
        self.functions = functions
        self.account = template.names.account
        props = template.resolve(properties)
        self.bus = str(props.get("EventBusName", "default"))
        self.pattern = props.get("Pattern") or {}
        self.enabled = str(props.get("State", "ENABLED")).upper() == "ENABLED"
        self.input = props.get("Input")
        self.input_path = props.get("InputPath")
        self.input_transformer = props.get("InputTransformer")
        base = f"{template.names.stack}-{function}-{event_name}"
        self.rule_name = _resource_name(base, suffix, limit=64)
        self.queue_name = _resource_name(base, suffix, limit=80)
        invoke_config = functions.spec(function).properties.get("EventInvokeConfig") or {}
        self.max_attempts = 1 + int(
            template.resolve(invoke_config.get("MaximumRetryAttempts", DEFAULT_ASYNC_RETRIES))
        )
        self.events = clients("events")
        self.sqs = clients("sqs")
        self.queue_url: str | None = None
        self.in_flight = 0

    def describe(self) -> str:
        return f"EventBridge bus {self.bus} {json.dumps(self.pattern)} → {self.function}"

    def setup(self) -> None:
        self.queue_url = self.sqs.create_queue(
            QueueName=self.queue_name, Attributes={"VisibilityTimeout": str(QUEUE_VISIBILITY_SECONDS)}
        )["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.events.put_rule(
            Name=self.rule_name,
            EventBusName=self.bus,
            EventPattern=json.dumps(self.pattern),
            State="ENABLED" if self.enabled else "DISABLED",
        )
        target: dict[str, Any] = {"Id": "joinplane-local", "Arn": queue_arn}
        if self.input_transformer:
            target["InputTransformer"] = self.input_transformer
        self.events.put_targets(Rule=self.rule_name, EventBusName=self.bus, Targets=[target])

    def teardown(self) -> None:
        try:
            self.events.remove_targets(Rule=self.rule_name, EventBusName=self.bus, Ids=["joinplane-local"])
            self.events.delete_rule(Name=self.rule_name, EventBusName=self.bus)
            if self.queue_url:
                self.sqs.delete_queue(QueueUrl=self.queue_url)
        except Exception as error:  # the emulator may already be gone; nothing is left to leak then
            print(f"[joinplane-local] {self.name}: cleanup: {error}", file=self.log, flush=True)

    def is_quiet_since(self, instant: float) -> bool:
        if self.queue_url is None:
            return True  # not set up (yet): nothing can be waiting on it
        if self.in_flight:
            return False
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return not self.in_flight and all(v == "0" for v in attributes.values())

    def cycle(self) -> None:
        if self.queue_url is None:
            self.setup()
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=QUEUE_WAIT_SECONDS,
            AttributeNames=["ApproximateReceiveCount"],
        )
        for message in answer.get("Messages", []):
            if self._stop.is_set():
                return  # unacknowledged: it is delivered again, as after a crash
            self.in_flight += 1
            try:
                self._handle(message)
            finally:
                self.completed += 1
                self.in_flight -= 1

    def on_error(self) -> None:
        self.queue_url = None  # set the rule and queue up again (the emulator may have been reset)

    def _event(self, body: str) -> Any:
        event = json.loads(body)
        if self.input is not None:
            return json.loads(self.input) if isinstance(self.input, str) else self.input
        if self.input_transformer or not isinstance(event, dict):
            return event
        shaped = envelope(event, self.account)
        if self.input_path:
            value: Any = shaped
            for part in str(self.input_path).removeprefix("$").strip(".").split("."):
                if part:
                    value = value.get(part) if isinstance(value, dict) else None
            return value
        return shaped

    def _handle(self, message: dict[str, Any]) -> None:
        assert self.queue_url is not None
        attempt = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            self.functions.invoke(self.function, self._event(message["Body"]))
        except FunctionError as error:
            report_failure(self.function, error, self.log)
            if attempt < self.max_attempts:
                return  # it comes back after the visibility timeout: the async retry
            print(
                f"[joinplane-local] {self.name}: event dropped after {attempt} attempts "
                "(Lambda's asynchronous retry limit)",
                file=self.log,
                flush=True,
            )
        except ValueError as error:
            print(f"[joinplane-local] {self.name}: undeliverable message: {error}", file=self.log, flush=True)
        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])


# --- EventBridge API destinations (the webhook) ---------------------------------------------

# A message stays invisible while it is retried here; it leaves the queue when delivered or
# dead-lettered (SQS's maximum: 12 hours).
HELD_VISIBILITY_SECONDS = 43200


@dataclass
class _Held:
    receipt: str
    event: dict[str, Any]
    received: float
    attempts: int = 0
    next_at: float = 0.0


class ApiDestinationConsumer(_Loop):
    """One rule target that is an API destination: rule → SQS queue → HTTP request, with the
    target's input transformer, RetryPolicy and dead-letter queue (see `webhook.py`).

    The retries are EventBridge's exponential backoff, scaled down from minutes to
    `_backoff`'s fractions of a second so a local run shows them happen."""

    interval = 0.0  # the long poll, or the wait for the next retry, is the wait

    def __init__(
        self,
        target: ApiDestinationTarget,
        template: Template,
        clients: ClientFactory,
        log: TextIO,
        suffix: str = "",
    ) -> None:
        super().__init__(log)
        self.target = target
        self.name = f"{target.rule}.{target.target_id}"
        names = template.names
        self.account = names.account
        base = f"{names.stack}-{target.rule}"
        self.rule_name = _resource_name(base, suffix, limit=64)
        self.queue_name = _resource_name(base, target.target_id, suffix, limit=80)
        bus_path = "" if target.bus == "default" else f"{target.bus}/"
        self.rule_arn = f"arn:aws:events:{names.region}:{names.account}:rule/{bus_path}{self.rule_name}"
        self.target_arn = f"arn:aws:events:{names.region}:{names.account}:api-destination/{target.rule}"
        self.events = clients("events")
        self.sqs = clients("sqs")
        self.queue_url: str | None = None
        self.dead_letter_url: str | None = None
        self.held: list[_Held] = []
        self.delivered = 0
        self.dead_letters: list[dict[str, Any]] = []  # what went to the DLQ, as sent
        self.in_flight = 0
        self._last_request = -math.inf

    def describe(self) -> str:
        return self.target.describe()

    def setup(self) -> None:
        self.queue_url = self.sqs.create_queue(
            QueueName=self.queue_name, Attributes={"VisibilityTimeout": str(HELD_VISIBILITY_SECONDS)}
        )["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        if self.target.dead_letter_queue:
            # The template's own queue name: it outlives the run's rule, as the deployed one does.
            self.dead_letter_url = self.sqs.create_queue(QueueName=self.target.dead_letter_queue)["QueueUrl"]
        self.events.put_rule(
            Name=self.rule_name,
            EventBusName=self.target.bus,
            EventPattern=json.dumps(self.target.pattern),
            State="ENABLED" if self.target.enabled else "DISABLED",
        )
        # The queue gets the event as it is: the transformer is applied here, by EventBridge's rules.
        self.events.put_targets(
            Rule=self.rule_name,
            EventBusName=self.target.bus,
            Targets=[{"Id": "joinplane-local", "Arn": queue_arn}],
        )

    def teardown(self) -> None:
        try:
            self.events.remove_targets(
                Rule=self.rule_name, EventBusName=self.target.bus, Ids=["joinplane-local"]
            )
            self.events.delete_rule(Name=self.rule_name, EventBusName=self.target.bus)
            if self.queue_url:
                self.sqs.delete_queue(QueueUrl=self.queue_url)
        except Exception as error:  # the emulator may already be gone; nothing is left to leak then
            print(f"[joinplane-local] {self.name}: cleanup: {error}", file=self.log, flush=True)

    def is_quiet_since(self, instant: float) -> bool:
        if self.queue_url is None:
            return True
        if self.held or self.in_flight:
            return False
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return not self.held and not self.in_flight and all(v == "0" for v in attributes.values())

    def on_error(self) -> None:
        self.queue_url = None  # set up again; what was held comes back when its queue does
        self.held = []

    def cycle(self) -> None:
        if self.queue_url is None:
            self.setup()
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0 if self.held else QUEUE_WAIT_SECONDS,
        )
        for message in answer.get("Messages", []):
            try:
                event = envelope(json.loads(message["Body"]), self.account)
            except (ValueError, AttributeError) as error:
                print(
                    f"[joinplane-local] {self.name}: undeliverable message: {error}",
                    file=self.log,
                    flush=True,
                )
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                continue
            self.held.append(_Held(message["ReceiptHandle"], event, received=time.monotonic()))
        for held in list(self.held):
            if self._stop.is_set():
                return  # still held: the queue gives it back after the visibility timeout
            if held.next_at <= time.monotonic():
                self._attempt(held)
        if self.held:
            wait = min(h.next_at for h in self.held) - time.monotonic()
            self._stop.wait(min(max(wait, 0.0), 0.5))

    def _attempt(self, held: _Held) -> None:
        self.in_flight += 1
        try:
            try:
                body = body_for(self.target, held.event, rule_name=self.rule_name, rule_arn=self.rule_arn)
            except ValueError as error:  # a JSON path the emulation cannot read: no attempt can succeed
                outcome = Outcome(False, False, "InputTransformerError", str(error))
            else:
                if self.target.rate_limit:
                    self._stop.wait(
                        max(0.0, self._last_request + 1 / self.target.rate_limit - time.monotonic())
                    )
                self._last_request = time.monotonic()
                outcome = deliver(self.target, body)
            held.attempts += 1
            if outcome.delivered:
                self.delivered += 1
                self._done(held)
                return
            retries = held.attempts - 1
            exhausted: str | None = None
            if outcome.retryable:
                delay = max(_backoff(held.attempts), outcome.retry_after or 0.0)
                age = time.monotonic() - held.received
                if outcome.retry_after is not None and outcome.retry_after < 0:
                    exhausted = "RetryAfter"
                elif retries >= self.target.retry.maximum_retry_attempts:
                    exhausted = "MaximumRetryAttempts"
                elif age + delay > self.target.retry.maximum_event_age_seconds:
                    exhausted = "MaximumEventAgeInSeconds"
                else:
                    held.next_at = time.monotonic() + delay
                    print(
                        f"[joinplane-local] {self.name}: event {held.event.get('id')}: {outcome.message}; "
                        f"retry {retries + 1} of {self.target.retry.maximum_retry_attempts} in {delay:.1f} s",
                        file=self.log,
                        flush=True,
                    )
                    return
            self._dead_letter(held, outcome, exhausted, retries)
        finally:
            self.in_flight -= 1

    def _dead_letter(self, held: _Held, outcome: Outcome, exhausted: str | None, retries: int) -> None:
        attributes = {
            "RULE_ARN": self.rule_arn,
            "TARGET_ARN": self.target_arn,
            "ERROR_CODE": outcome.code,
            "ERROR_MESSAGE": outcome.message,
            "RETRY_ATTEMPTS": str(retries),
        }
        if exhausted:
            attributes["EXHAUSTED_RETRY_CONDITION"] = exhausted
        where = "dropped (the target has no dead-letter queue)"
        if self.dead_letter_url:
            self.sqs.send_message(
                QueueUrl=self.dead_letter_url,
                MessageBody=json.dumps(held.event),
                MessageAttributes={
                    k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
                },
            )
            self.dead_letters.append({"event": held.event, "attributes": attributes})
            where = f"sent to the dead-letter queue {self.target.dead_letter_queue}"
        print(
            f"[joinplane-local] {self.name}: event {held.event.get('id')}: {outcome.message} after "
            f"{held.attempts} attempt(s); {where}",
            file=self.log,
            flush=True,
        )
        self._done(held)

    def _done(self, held: _Held) -> None:
        assert self.queue_url is not None
        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=held.receipt)
        self.held.remove(held)
        self.completed += 1


# --- schedules ---------------------------------------------------------------------------

_RATE = re.compile(r"rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)\Z")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def schedule_period(expression: str) -> float | None:
    """Seconds between runs of a schedule expression; None when it cannot be emulated."""
    found = _RATE.match(expression.strip())
    if found:
        return int(found.group(1)) * _UNIT_SECONDS[found.group(2).rstrip("s")]
    if expression.strip().startswith("cron("):
        # Cron fields are not interpreted: every minute is often enough to exercise any job
        # locally, and a job must tolerate running more often than its schedule anyway.
        return 60.0
    return None


@dataclass
class Schedule:
    function: str
    event_name: str
    expression: str
    period: float | None
    enabled: bool
    input: Any
    rule_arn: str
    next_due: float = math.inf


class Scheduler(_Loop):
    """Every Schedule/ScheduleV2 event of the template, due on the joinplane clock."""

    name = "schedules"
    interval = SCHEDULE_CHECK_SECONDS

    def __init__(self, functions: Functions, template: Template, log: TextIO) -> None:
        super().__init__(log)
        self.functions = functions
        self.region = template.names.region
        self.account = template.names.account
        self.schedules: list[Schedule] = []
        names = template.names
        for function, spec in functions.specs.items():
            for event_name, event in spec.events.items():
                kind = event.get("Type")
                if kind not in ("Schedule", "ScheduleV2"):
                    continue
                props = template.resolve(event.get("Properties") or {})
                expression = str(props.get("Schedule") or props.get("ScheduleExpression") or "")
                enabled = (
                    bool(props.get("Enabled", True))
                    and str(props.get("State", "ENABLED")).upper() == "ENABLED"
                )
                rule = props.get("Name") or f"{names.stack}-{function}-{event_name}"
                service, kind_path = (
                    ("scheduler", "schedule/default") if kind == "ScheduleV2" else ("events", "rule")
                )
                period = schedule_period(expression)
                if period is None:
                    print(
                        f"[joinplane-local] {function}.{event_name}: schedule {expression!r} is not emulated "
                        "(run it with POST /_local/schedules/{function}/run)",
                        file=log,
                    )
                self.schedules.append(
                    Schedule(
                        function=function,
                        event_name=event_name,
                        expression=expression,
                        period=period,
                        enabled=enabled,
                        input=props.get("Input"),
                        rule_arn=f"arn:aws:{service}:{names.region}:{names.account}:{kind_path}/{rule}",
                    )
                )

    def start(self) -> None:
        now = clock.epoch()
        # Like a new rule, the first run comes one period after the schedule is created.
        for schedule in self.schedules:
            if schedule.enabled and schedule.period is not None:
                schedule.next_due = now + schedule.period
        super().start()

    def is_quiet_since(self, instant: float) -> bool:
        return True

    def describe(self, schedule: Schedule) -> str:
        return f"{schedule.expression} → {schedule.function}"

    def event(self, schedule: Schedule) -> Any:
        if schedule.input is not None:
            return json.loads(schedule.input) if isinstance(schedule.input, str) else schedule.input
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": self.account,
            "time": clock.rfc3339(clock.epoch()),
            "region": self.region,
            "resources": [schedule.rule_arn],
            "detail": {},
        }

    def find(self, function: str, event_name: str | None = None) -> Schedule | None:
        for schedule in self.schedules:
            if schedule.function == function and event_name in (None, schedule.event_name):
                return schedule
        return None

    def run(self, schedule: Schedule) -> Any:
        self.completed += 1
        return self.functions.invoke(schedule.function, self.event(schedule))

    def cycle(self) -> None:
        now = clock.epoch()
        for schedule in self.schedules:
            if schedule.enabled and schedule.period is not None and schedule.next_due > now + schedule.period:
                # The clock went back (`/_local/clock` reset): due one period from now, not from
                # where the clock had been.
                schedule.next_due = now + schedule.period
            if schedule.period is None or not schedule.enabled or now < schedule.next_due:
                continue
            # Runs missed while the clock jumped forward collapse into one, so moving the clock
            # a day ahead does not fire a five-minute job 288 times.
            missed = math.floor((now - schedule.next_due) / schedule.period) + 1
            schedule.next_due += missed * schedule.period
            try:
                self.run(schedule)
            except FunctionError as error:
                report_failure(schedule.function, error, self.log)


# --- all of them -------------------------------------------------------------------------


class Workers:
    """The template's stream, rule and schedule event sources for one run."""

    def __init__(
        self,
        template: Template,
        functions: Functions,
        clients: ClientFactory,
        *,
        log: TextIO | None = None,
        suffix: str = "",
        stream_poll_seconds: float = STREAM_POLL_SECONDS,
    ) -> None:
        self.log = log or sys.stderr
        self.functions = functions
        self.streams: list[StreamPoller] = []
        self.rules: list[RuleConsumer] = []
        self.destinations = [
            ApiDestinationConsumer(target, template, clients, self.log, suffix)
            for target in api_destination_targets(template)
        ]
        self.scheduler = Scheduler(functions, template, self.log)
        self.unsupported: list[str] = []
        self.running = False
        for function, spec in functions.specs.items():
            for event_name, event in spec.events.items():
                kind = event.get("Type")
                props = event.get("Properties") or {}
                if kind == "DynamoDB":
                    poller = StreamPoller(functions, function, event_name, props, template, clients, self.log)
                    poller.interval = stream_poll_seconds
                    self.streams.append(poller)
                elif kind in ("EventBridgeRule", "CloudWatchEvent"):
                    self.rules.append(
                        RuleConsumer(
                            functions, function, event_name, props, template, clients, self.log, suffix
                        )
                    )
                elif kind not in ("HttpApi", "Schedule", "ScheduleV2"):
                    self.unsupported.append(f"{function}.{event_name} ({kind})")

    def _rule_targets(self) -> list[RuleConsumer | ApiDestinationConsumer]:
        return [*self.rules, *self.destinations]

    def describe(self) -> list[str]:
        lines = [s.describe() for s in self.streams] + [r.describe() for r in self.rules]
        lines += [d.describe() for d in self.destinations]
        lines += [self.scheduler.describe(s) for s in self.scheduler.schedules]
        return lines

    def register_routes(self, gateway: Gateway) -> None:
        gateway.local_route("POST", r"/_local/schedules/(?P<function>[A-Za-z0-9]+)/run", self._run_route)

    def start(self) -> None:
        for name in self.unsupported:
            print(f"[joinplane-local] event source not emulated: {name}", file=self.log, flush=True)
        for rule in self._rule_targets():
            try:
                rule.setup()
            except Exception as error:
                # e.g. DynamoDB Local behind --endpoint-url has no EventBridge: the loop retries.
                print(
                    f"[joinplane-local] {rule.name}: {type(error).__name__}: {error}",
                    file=self.log,
                    flush=True,
                )
        for stream in self.streams:
            try:
                stream.prepare()
            except Exception as error:
                print(
                    f"[joinplane-local] {stream.name}: {type(error).__name__}: {error}",
                    file=self.log,
                    flush=True,
                )
        loops: list[_Loop] = [*self.streams, *self.rules, *self.destinations, self.scheduler]
        for loop in loops:
            loop.start()
        self.running = True

    def stop(self) -> None:
        if not self.running:
            return
        loops: list[_Loop] = [*self.streams, *self.rules, *self.destinations, self.scheduler]
        for loop in loops:
            loop.signal_stop()
        for loop in loops:
            loop.join()
        for rule in self._rule_targets():
            rule.teardown()
        self.running = False

    def run_schedule(self, function: str, event_name: str | None = None) -> Any:
        """Run a function's schedule now; raises KeyError if it has none."""
        schedule = self.scheduler.find(function, event_name)
        if schedule is None:
            raise KeyError(function)
        return self.scheduler.run(schedule)

    def _run_route(self, request: Request, found: re.Match[str]) -> Response:
        function = found.group("function")
        event_name = dict(parse_qsl(request.raw_query)).get("event")
        try:
            result = self.run_schedule(function, event_name)
        except KeyError:
            return Response.json(404, {"message": f"no Schedule event on function {function}"})
        except FunctionError as error:
            report_failure(function, error, self.log)
            return Response.json(500, {"errorType": error.error_type, "errorMessage": error.message})
        return Response.json(200, result)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until everything written to the streams and put on the rules' queues before this
        call has been delivered, including what those deliveries cause. False on timeout."""
        if not self.running:
            return True
        deadline = time.monotonic() + timeout
        loops: list[_Loop] = [*self.streams, *self.rules, *self.destinations]
        while time.monotonic() < deadline:
            before = sum(loop.completed for loop in loops)
            started = time.monotonic()
            while not all(loop.is_quiet_since(started) for loop in loops):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)
            # Quiet everywhere and nothing delivered meanwhile: no delivery can have fed another.
            if sum(loop.completed for loop in loops) == before:
                return True
        return False
