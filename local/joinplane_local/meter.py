"""Every billable thing the functions of a local run do, recorded as AWS would bill it.

Hooked where the runtime already lets a caller look, never patched in:
- AWS calls: every client the functions make (`joinplane.aws.on_client`, as the emulated IAM is),
  through botocore's events: DynamoDB with its request units sized by `capacity` (the items read
  and written are looked up around the call on a client of the meter's own), KMS by operation,
  EventBridge PutEvents by entry and 64 KB chunk;
- Lambda: each invocation with its function's memory setting and measured duration
  (`Functions.invocation_hooks`);
- API Gateway: each request to a template route (`Gateway.request_hooks`), with the access log
  line the stage writes for it;
- CloudWatch Logs: the bytes each function prints (its log lines and EMF metrics): sys.stdout,
  while the meter runs, counts what is written during an invocation and drops it.

Only what happens inside a function's invocation is AWS's bill: the runtime's own set-up and
stream polling (free for Lambda triggers) are not recorded. Scheduled runs (retention) are
recorded apart: they serve the whole fleet, not one flow.
"""

from __future__ import annotations

import io
import math
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TextIO

from joinplane import aws

from . import capacity, prices
from .functions import FunctionSpec
from .http_server import Request, Response

METERED_SERVICES = ("dynamodb", "kms", "eventbridge")


@dataclass
class Charge:
    """One billed quantity: `units` of `unit` (WRU, RRU, requests, GB-s, events, bytes) for
    `calls` calls, priced at `usd` in all."""

    service: str
    line: str
    calls: int
    units: float
    unit: str
    usd: float
    # DynamoDB: units per item kind (the partition key's prefix) and index, to see where they go.
    detail: dict[str, float] = field(default_factory=dict)


@dataclass
class _Invocation:
    function: str
    scheduled: bool
    charges: list[Charge] = field(default_factory=list)
    log_bytes: int = 0
    # Seconds the meter itself spent inside the invocation (sizing items): not the function's.
    overhead: float = 0.0
    # Seconds the function waited on its AWS calls (the emulator's, here: AWS's own latency
    # differs), so a duration can be read as own code plus waiting.
    waiting: float = 0.0


_current: ContextVar[_Invocation | None] = ContextVar("joinplane_meter_invocation", default=None)


def _kind(key: Mapping[str, Any]) -> str:
    """An item's kind for the breakdown: its partition key up to the first '#' (JREQ, MACHINE...)."""
    for value in key.values():
        text = str(next(iter(value.values())))
        return text.split("#", 1)[0] if "#" in text else text[:12]
    return "?"


def _is_scheduled(event: Any) -> bool:
    return isinstance(event, dict) and event.get("detail-type") == "Scheduled Event"


def _referenced(expression: str | None, prefix: str) -> set[str]:
    return set(re.findall(re.escape(prefix) + r"[A-Za-z0-9_]+", expression or ""))


class _CountingStdout(io.TextIOBase):
    """sys.stdout while metering: inside an invocation the bytes are counted for it and dropped
    (they are the function's log lines), outside it goes where it went before."""

    def __init__(self, meter: Meter, previous: TextIO) -> None:
        self._meter, self._previous = meter, previous

    def write(self, text: str) -> int:
        invocation = _current.get()
        if invocation is None:
            return self._previous.write(text)
        invocation.log_bytes += len(text.encode())
        return len(text)

    def flush(self) -> None:
        self._previous.flush()


class Meter:
    """Records into the flow that is open (`flow`); everything else it drops."""

    def __init__(self, architecture: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._open: list[Charge] | None = None
        self.scheduled: list[Charge] = []
        self._schemas: dict[str, capacity.Schema] = {}
        self._reader: Any = None
        self._stdout: TextIO | None = None
        self._access_log_format: str | None = None
        self.architecture = dict(architecture or {})
        # Its client hook cannot be taken back (joinplane.aws.on_client): once uninstalled, a meter
        # leaves the calls of later runtimes to the meter installed after it.
        self._installed = False

    # --- installing ---

    def install(self) -> None:
        """Meter every client made from now on (call before the runtime starts) and stdout."""
        aws.on_client(self._hook)
        self._installed = True
        self._stdout = sys.stdout
        sys.stdout = _CountingStdout(self, sys.stdout)

    def uninstall(self) -> None:
        self._installed = False
        if self._stdout is not None:
            sys.stdout = self._stdout
            self._stdout = None

    def attach(self, runtime: Any) -> None:
        """The runtime's functions and gateway report to this meter (one runtime after another: each
        `make cost` signing mode has its own, on an emulator of its own)."""
        self._reader, self._schemas = None, {}
        runtime.functions.invocation_hooks.append(self._invocation)
        runtime.gateway.request_hooks.append(self._request)
        settings = runtime.template.document["Resources"]
        for resource in settings.values():
            if resource.get("Type") == "AWS::Serverless::HttpApi":
                access = resource.get("Properties", {}).get("AccessLogSettings") or {}
                self._access_log_format = access.get("Format")
        globals_ = runtime.template.document.get("Globals", {}).get("Function", {})
        default_arch = (globals_.get("Architectures") or ["x86_64"])[0]
        for logical_id, spec in runtime.functions.specs.items():
            self.architecture[logical_id] = (spec.properties.get("Architectures") or [default_arch])[0]

    # --- flows ---

    @contextmanager
    def flow(self) -> Iterator[list[Charge]]:
        """Everything billed until the block ends lands in the list it yields."""
        charges: list[Charge] = []
        with self._lock:
            self._open = charges
        try:
            yield charges
        finally:
            with self._lock:
                self._open = None

    def _add(self, charges: list[Charge], scheduled: bool = False) -> None:
        with self._lock:
            if scheduled:
                self.scheduled.extend(charges)
            elif self._open is not None:
                self._open.extend(charges)

    # --- Lambda and CloudWatch Logs ---

    @contextmanager
    def _invocation(self, spec: FunctionSpec, event: Any) -> Iterator[None]:
        invocation = _Invocation(spec.logical_id, _is_scheduled(event))
        token = _current.set(invocation)
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed_ms = math.ceil((time.perf_counter() - started - invocation.overhead) * 1000)
            _current.reset(token)
            gb_seconds = spec.memory_mb / 1024 * elapsed_ms / 1000
            rate = prices.LAMBDA_GB_SECOND[self.architecture.get(spec.logical_id, "x86_64")]
            waiting_ms = round(invocation.waiting * 1000)
            invocation.charges.append(
                Charge(
                    "Lambda",
                    f"{spec.logical_id} ({spec.memory_mb} MB)",
                    1,
                    gb_seconds,
                    "GB-s",
                    prices.LAMBDA_REQUEST + gb_seconds * rate,
                    {"ms in own code": elapsed_ms - waiting_ms, "ms waiting on AWS calls": waiting_ms},
                )
            )
            if invocation.log_bytes:
                invocation.charges.append(
                    self._log_charge(f"{spec.logical_id} log lines", invocation.log_bytes)
                )
            self._add(invocation.charges, invocation.scheduled)

    @staticmethod
    def _log_charge(line: str, size: int) -> Charge:
        return Charge("CloudWatch Logs", line, 1, size, "bytes", size / prices.GB * prices.LOGS_INGESTED_GB)

    # --- API Gateway ---

    def _request(self, request: Request, response: Response) -> None:
        if response.route_key is None:
            return  # a runtime-only route (/_local), or none: nothing API Gateway would serve
        increments = max(1, math.ceil(len(request.body) / prices.APIGATEWAY_INCREMENT_BYTES))
        charges = [
            Charge(
                "API Gateway",
                f"HTTP API {response.route_key}",
                1,
                increments,
                "requests",
                increments * prices.APIGATEWAY_HTTP_REQUEST,
            )
        ]
        if self._access_log_format:
            charges.append(self._log_charge("API access log", len(self._access_line(response).encode())))
        self._add(charges)

    def _access_line(self, response: Response) -> str:
        """The stage's access log line for this response: its format with API Gateway's values
        (request id, time, status, lengths and latencies as wide as they are deployed)."""
        values = {
            "requestId": "Jd9cQh0loAMEbkQ=",
            "identity.sourceIp": "203.0.113.10",
            "requestTime": "02/Dec/2026:02:22:17 +0000",
            "routeKey": response.route_key or "-",
            "status": str(response.status),
            "responseLength": str(len(response.body)),
            "responseLatency": "87",
            "integrationLatency": "85",
            "integrationErrorMessage": "-",
            "authorizer.error": "-",
        }
        assert self._access_log_format is not None
        return re.sub(
            r"\$context\.([A-Za-z.]+)", lambda m: values.get(m.group(1), "-"), self._access_log_format
        )

    # --- AWS calls ---

    def _hook(self, service: str, client: Any) -> None:
        hyphenized = client.meta.service_model.service_id.hyphenize()
        if hyphenized not in METERED_SERVICES:
            return
        client.meta.events.register(f"before-parameter-build.{hyphenized}", self._before)
        client.meta.events.register(f"after-call.{hyphenized}", self._after)

    def _before(self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        invocation = _current.get()
        if invocation is None or not self._installed:
            return
        started = time.perf_counter()
        context["joinplane_meter"] = (dict(params), self._snapshot(model.name, params))
        sent = time.perf_counter()
        invocation.overhead += sent - started
        context["joinplane_meter_sent"] = sent

    def _after(self, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if not self._installed:
            return
        invocation = _current.get()
        held = context.pop("joinplane_meter", None)
        if invocation is None or held is None:
            return
        started = time.perf_counter()
        invocation.waiting += started - context.pop("joinplane_meter_sent", started)
        try:
            self._charge(invocation, parsed, model, held)
        finally:
            invocation.overhead += time.perf_counter() - started

    def _charge(
        self, invocation: _Invocation, parsed: Mapping[str, Any], model: Any, held: tuple[Any, Any]
    ) -> None:
        params, before = held
        service = model.service_model.service_id.hyphenize()
        failed = "Error" in parsed
        if service == "dynamodb":
            charge = self._dynamodb(model.name, params, before, failed)
        elif service == "kms":
            asymmetric = model.name in prices.KMS_ASYMMETRIC_OPERATIONS
            price = prices.KMS_ASYMMETRIC_REQUEST if asymmetric else prices.KMS_REQUEST
            charge = Charge("KMS", model.name, 1, 1, "requests", price)
        else:
            charge = self._events(model.name, params)
        charge.line = f"{charge.line} ({invocation.function})"
        invocation.charges.append(charge)

    def _events(self, operation: str, params: Mapping[str, Any]) -> Charge:
        entries = params.get("Entries", []) if operation == "PutEvents" else []
        chunks = sum(
            capacity.event_chunks(capacity.event_entry_size(e), prices.EVENTBRIDGE_CHUNK_BYTES)
            for e in entries
        )
        return Charge("EventBridge", f"{operation}", 1, chunks, "events", chunks * prices.EVENTBRIDGE_EVENT)

    # --- DynamoDB ---

    def _dynamo_reader(self) -> Any:
        """A client of the meter's own (not the functions': nothing it does is metered or checked)."""
        if self._reader is None:
            import botocore.session

            self._reader = botocore.session.get_session().create_client(
                "dynamodb",
                endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
                region_name=os.environ.get("AWS_REGION", "us-east-1"),
            )
        return self._reader

    def _schema(self, table: str) -> capacity.Schema:
        if table not in self._schemas:
            description = self._dynamo_reader().describe_table(TableName=table)["Table"]
            self._schemas[table] = capacity.Schema.of(description)
        return self._schemas[table]

    def _read(self, table: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        item = self._dynamo_reader().get_item(TableName=table, Key=dict(key), ConsistentRead=True).get("Item")
        return dict(item) if item else None

    def _writes(
        self, operation: str, params: Mapping[str, Any]
    ) -> list[tuple[str, str, dict[str, Any], Any]]:
        """(action, table, key, item put or None) of each item a write names."""
        found: list[tuple[str, str, dict[str, Any], Any]] = []
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            table = params["TableName"]
            item = params.get("Item")
            key = self._schema(table).key_of(item) if item is not None else dict(params["Key"])
            found.append((operation, table, key, item))
        elif operation == "TransactWriteItems":
            for action in params["TransactItems"]:
                ((kind, body),) = action.items()
                table = body["TableName"]
                item = body.get("Item")
                key = self._schema(table).key_of(item) if item is not None else dict(body["Key"])
                found.append((kind, table, key, item))
        elif operation == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        item = request["PutRequest"]["Item"]
                        found.append(("Put", table, self._schema(table).key_of(item), item))
                    else:
                        found.append(("Delete", table, dict(request["DeleteRequest"]["Key"]), None))
        return found

    def _snapshot(self, operation: str, params: Mapping[str, Any]) -> list[dict[str, Any] | None]:
        if operation not in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"):
            return []
        return [self._read(table, key) for _, table, key, _ in self._writes(operation, params)]

    def _dynamodb(
        self, operation: str, params: Mapping[str, Any], before: list[dict[str, Any] | None], failed: bool
    ) -> Charge:
        detail: dict[str, float] = {}
        wru = rru = 0.0

        def add(name: str, units: float) -> None:
            detail[name] = detail.get(name, 0.0) + units

        writes = self._writes(operation, params)
        transactional = operation == "TransactWriteItems"
        for (action, table, key, put), old in zip(writes, before, strict=True):
            schema = self._schema(table)
            if failed:
                # Nothing changed (a failed condition, a cancelled transaction): the item as it
                # stands is paid for, and what a cancelled Put would have written.
                units = capacity.write_units(
                    capacity.item_size(old), capacity.item_size(put), transactional=transactional
                )
                wru += units
                add(f"{_kind(key)} {action} (refused)", units)
                continue
            new = self._read(table, key)
            units = capacity.write_units(
                capacity.item_size(old), capacity.item_size(new), transactional=transactional
            )
            wru += units
            add(f"{_kind(key)} {action}", units)
            for index, index_units in capacity.index_writes(schema, old, new).items():
                wru += index_units
                add(f"{_kind(key)} {index}", index_units)
        if operation in ("GetItem", "BatchGetItem", "TransactGetItems"):
            for table, key, consistent, transact in self._reads(operation, params):
                units = capacity.read_units(
                    [capacity.item_size(self._read(table, key))],
                    consistent=consistent,
                    transactional=transact,
                )
                rru += units
                add(f"{_kind(key)} read", units)
        elif operation in ("Query", "Scan"):
            items = self._query_items(operation, params)
            units = capacity.query_units(
                [capacity.item_size(i) for i in items], consistent=bool(params.get("ConsistentRead"))
            )
            rru += units
            add(f"{params.get('IndexName', 'table')} {operation}", units)
        usd = wru * prices.DYNAMODB_WRU + rru * prices.DYNAMODB_RRU
        units, unit = (wru, "WRU") if wru or not rru else (rru, "RRU")
        if wru and rru:
            unit = "WRU+RRU"
            units = wru + rru
        label = f"{operation}{' (cancelled)' if failed and transactional else ' (refused)' if failed else ''}"
        return Charge("DynamoDB", label, 1, units, unit, usd, detail)

    @staticmethod
    def _reads(operation: str, params: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], bool, bool]]:
        if operation == "GetItem":
            return [(params["TableName"], dict(params["Key"]), bool(params.get("ConsistentRead")), False)]
        if operation == "BatchGetItem":
            return [
                (table, dict(key), bool(request.get("ConsistentRead")), False)
                for table, request in params["RequestItems"].items()
                for key in request["Keys"]
            ]
        return [(g["Get"]["TableName"], dict(g["Get"]["Key"]), True, True) for g in params["TransactItems"]]

    def _query_items(self, operation: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The items the call read (before any filter, with every attribute the table or index
        holds for them): the same page asked again without filter or projection."""
        asked: dict[str, Any] = {
            k: params[k]
            for k in ("TableName", "IndexName", "KeyConditionExpression", "Limit", "ExclusiveStartKey",
                      "ScanIndexForward", "ConsistentRead")
            if k in params
        }  # fmt: skip
        used = params.get("KeyConditionExpression")
        names = {
            k: v
            for k, v in (params.get("ExpressionAttributeNames") or {}).items()
            if k in _referenced(used, "#")
        }
        values = {
            k: v
            for k, v in (params.get("ExpressionAttributeValues") or {}).items()
            if k in _referenced(used, ":")
        }
        if names:
            asked["ExpressionAttributeNames"] = names
        if values:
            asked["ExpressionAttributeValues"] = values
        reader = self._dynamo_reader()
        answer = reader.query(**asked) if operation == "Query" else reader.scan(**asked)
        return list(answer.get("Items", []))
