"""The template's `DynamoDB` event sources: a poller per event source mapping reads the table's
stream the way Lambda's does and invokes the function with Lambda's DynamoDB stream event: in order
per shard, in batches of `BatchSize`, at least once. A partial batch response
(`ReportBatchItemFailures`) checkpoints before the first failed record and retries from there; an
error retries the whole batch. Both after a short backoff, for `MaximumRetryAttempts` (default:
until it succeeds). Filter criteria are matched with EventBridge's (moto's) pattern matcher.

Not emulated: BisectBatchOnFunctionError, MaximumRecordAgeInSeconds, on-failure destinations,
ParallelizationFactor (one batch in flight per shard, as with the default of 1).
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from .functions import FunctionError, Functions, report_failure
from .template import Template, referenced_logical_id
from .worker_loop import ClientFactory, Loop, backoff

STREAM_POLL_SECONDS = 0.1
SHARD_REFRESH_SECONDS = 1.0


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


class StreamPoller(Loop):
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
        shard.retry_at = time.monotonic() + backoff(shard.attempts)

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
