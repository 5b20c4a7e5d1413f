"""The one module that calls DynamoDB. The repositories beside it (`joinplane.dal.*`) build keys,
expressions and transactions from typed records; this module turns Python values into DynamoDB's
wire format and DynamoDB's failures into outcomes a repository can name.

One table, generic keys: `pk`/`sk` for items, `gsi1pk`/`gsi1sk` (and `gsi2pk`/`gsi2sk`) for
listings by parent, `ttl` (epoch seconds) for DynamoDB TTL deletion.

Every state transition in Joinplane is a single conditional write or a single transaction:
- a conditional write that loses raises `ConditionFailed` carrying the item as it is now
  (ReturnValuesOnConditionCheckFailure), so the caller can say what it lost to without a second
  read;
- each action of a transaction carries a `name` (and, for several actions of one kind, a
  `subject`); a cancelled transaction raises `TransactionCanceled` whose `failures` name the
  conditions that failed. DynamoDB reports reasons by position: this is the only place that knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, NamedTuple

from joinplane import aws, deadline
from joinplane.errors import Unavailable
from joinplane.settings import settings

Item = dict[str, Any]


class ConditionFailed(Exception):
    """A conditional write lost: `current` is the item as stored now (None if absent)."""

    def __init__(self, current: Item | None) -> None:
        super().__init__("condition failed")
        self.current = current


class Failure(NamedTuple):
    """One condition of a cancelled transaction that did not hold."""

    name: str
    subject: Any
    current: Item | None  # the item as it is now (None: absent)


class TransactionCanceled(Exception):
    """A transaction was cancelled. `failures` are the named conditions that failed; a transaction
    cancelled for another reason (throughput, a conflict that outlasted its retries) has none."""

    def __init__(self, codes: list[str], failures: tuple[Failure, ...] = ()) -> None:
        super().__init__(f"transaction canceled: {codes}")
        # DynamoDB's codes, by position: read only through `contended` and `causes`, since a
        # position means nothing outside `transact`.
        self._codes = codes
        self.failures = failures

    def lost(self, name: str) -> bool:
        return any(f.name == name for f in self.failures)

    def current_of(self, name: str) -> Item | None:
        """The item as it is now behind the failed condition `name` (None: absent or not failed)."""
        return next((f.current for f in self.failures if f.name == name), None)

    def subjects(self, name: str) -> list[Any]:
        return [f.subject for f in self.failures if f.name == name]

    def failed(self, name: str) -> list[Failure]:
        """Every failed condition named `name`, with its subject and the item as it is now."""
        return [f for f in self.failures if f.name == name]

    @property
    def contended(self) -> bool:
        """Cancelled only by failed conditions or a transaction in flight: what the writer decided
        on moved, so reading again and deciding again may succeed (not so for throttling)."""
        return set(self._codes) <= {"None", "ConditionalCheckFailed", "TransactionConflict"}

    @property
    def causes(self) -> str:
        """DynamoDB's cancellation codes, for a message or a log line."""
        return ", ".join(self._codes)


def to_attribute(value: Any) -> dict[str, Any]:
    """A Python value as a DynamoDB attribute value (the wire's typed JSON)."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float | Decimal):
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bytes):
        return {"B": value}
    if isinstance(value, Mapping):
        return {"M": {str(k): to_attribute(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [to_attribute(v) for v in value]}
    raise TypeError(f"cannot store {type(value).__name__}")


def from_attribute(attribute: Mapping[str, Any]) -> Any:
    ((kind, value),) = attribute.items()
    if kind == "S" or kind == "B" or kind == "BOOL":
        return value
    if kind == "N":
        number = Decimal(value)
        return int(number) if number == number.to_integral_value() else float(number)
    if kind == "NULL":
        return None
    if kind == "M":
        return {k: from_attribute(v) for k, v in value.items()}
    if kind == "L":
        return [from_attribute(v) for v in value]
    if kind in ("SS", "BS"):
        return sorted(value)
    if kind == "NS":
        return sorted(from_attribute({"N": v}) for v in value)
    raise TypeError(f"unknown attribute type {kind}")


def serialize(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item for the wire; None-valued attributes are left out rather than stored as NULL."""
    return {k: to_attribute(v) for k, v in item.items() if v is not None}


def deserialize(raw: Mapping[str, Any]) -> Item:
    return {k: from_attribute(v) for k, v in raw.items()}


def _values(values: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: to_attribute(v) for k, v in (values or {}).items()}


class _Cancelled(Exception):
    """DynamoDB's positional cancellation, before `transact` names it."""

    def __init__(self, reasons: list[str], current: list[Item | None]) -> None:
        super().__init__(f"transaction canceled: {reasons}")
        self.reasons = reasons
        self.current = current


def _table() -> str:
    return settings().table_name


def _client() -> Any:
    return aws.client("dynamodb")


def _call(operation: str, **kwargs: Any) -> Any:
    client = _client()
    try:
        return getattr(client, operation)(**kwargs)
    except client.exceptions.ConditionalCheckFailedException as failure:
        raw = failure.response.get("Item")
        raise ConditionFailed(deserialize(raw) if raw else None) from None
    except client.exceptions.TransactionCanceledException as failure:
        reasons = failure.response.get("CancellationReasons", [])
        raise _Cancelled(
            [r.get("Code", "None") for r in reasons],
            [deserialize(r["Item"]) if r.get("Item") else None for r in reasons],
        ) from None
    except (
        client.exceptions.ProvisionedThroughputExceededException,
        client.exceptions.RequestLimitExceeded,
        client.exceptions.InternalServerError,
    ) as failure:
        raise Unavailable("the store is unavailable, retry later") from failure


def key(pk: str, sk: str) -> Item:
    return {"pk": pk, "sk": sk}


def get(pk: str, sk: str, *, consistent: bool = True) -> Item | None:
    response = _call("get_item", TableName=_table(), Key=serialize(key(pk, sk)), ConsistentRead=consistent)
    return deserialize(response["Item"]) if "Item" in response else None


def put(
    item: Item,
    *,
    condition: str | None = None,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> None:
    kwargs: dict[str, Any] = {"TableName": _table(), "Item": serialize(item)}
    _add_condition(kwargs, condition, names, values)
    _call("put_item", **kwargs)


def update(
    pk: str,
    sk: str,
    *,
    update: str,
    condition: str | None = None,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> Item:
    """One conditional UpdateItem; returns the item as written."""
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "Key": serialize(key(pk, sk)),
        "UpdateExpression": update,
        "ReturnValues": "ALL_NEW",
    }
    _add_condition(kwargs, condition, names, values)
    return deserialize(_call("update_item", **kwargs)["Attributes"])


def delete(
    pk: str,
    sk: str,
    *,
    condition: str | None = None,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> Item | None:
    """One conditional DeleteItem; returns the item as it was (None: there was none)."""
    kwargs: dict[str, Any] = {"TableName": _table(), "Key": serialize(key(pk, sk)), "ReturnValues": "ALL_OLD"}
    _add_condition(kwargs, condition, names, values)
    old = _call("delete_item", **kwargs).get("Attributes")
    return deserialize(old) if old else None


def _add_condition(
    kwargs: dict[str, Any],
    condition: str | None,
    names: Mapping[str, str] | None,
    values: Mapping[str, Any] | None,
) -> None:
    if condition:
        kwargs["ConditionExpression"] = condition
        kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    if names:
        kwargs["ExpressionAttributeNames"] = dict(names)
    if values:
        kwargs["ExpressionAttributeValues"] = _values(values)


class Page(NamedTuple):
    items: list[Item]
    last_key: Item | None


def query(
    *,
    pk: str,
    sk_prefix: str | None = None,
    index: str | None = None,
    limit: int | None = None,
    start_after: Item | None = None,
    ascending: bool = True,
    consistent: bool = False,
    sk_after: str | None = None,
    sk_below: str | None = None,
    filter: str | None = None,
    filter_names: Mapping[str, str] | None = None,
    filter_values: Mapping[str, Any] | None = None,
) -> Page:
    """One Query call on the table (`index=None`) or on a GSI (`gsi1`, `gsi2`, `gsi3`): items whose sort key
    begins with `sk_prefix`, or comes after `sk_after` in the direction read, or is below
    `sk_below`; `filter` is applied by DynamoDB after the read (it saves transfer, not reads)."""
    pk_name, sk_name = (f"{index}pk", f"{index}sk") if index else ("pk", "sk")
    names = {"#pk": pk_name}
    values: dict[str, Any] = {":pk": pk}
    condition = "#pk = :pk"
    if sum(x is not None for x in (sk_prefix, sk_after, sk_below)) > 1:
        raise ValueError("give at most one of sk_prefix, sk_after and sk_below")
    if sk_after is not None:
        names["#sk"] = sk_name
        values[":after"] = sk_after
        condition += " AND #sk > :after" if ascending else " AND #sk < :after"
    elif sk_below is not None:
        names["#sk"] = sk_name
        values[":below"] = sk_below
        condition += " AND #sk < :below"
    elif sk_prefix:
        names["#sk"] = sk_name
        values[":prefix"] = sk_prefix
        condition += " AND begins_with(#sk, :prefix)"
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "KeyConditionExpression": condition,
        "ScanIndexForward": ascending,
    }
    if filter:
        kwargs["FilterExpression"] = filter
        names.update(filter_names or {})
        values.update(filter_values or {})
    kwargs["ExpressionAttributeNames"] = names
    kwargs["ExpressionAttributeValues"] = _values(values)
    if index:
        kwargs["IndexName"] = index
    else:
        kwargs["ConsistentRead"] = consistent
    if limit:
        kwargs["Limit"] = limit
    if start_after:
        kwargs["ExclusiveStartKey"] = serialize(start_after)
    response = _call("query", **kwargs)
    last = response.get("LastEvaluatedKey")
    return Page(
        items=[deserialize(raw) for raw in response.get("Items", [])],
        last_key=deserialize(last) if last else None,
    )


def batch_get(keys: Iterable[tuple[str, str]], *, consistent: bool = True) -> dict[tuple[str, str], Item]:
    """Several items in one BatchGetItem call (at most 100 keys; unprocessed keys are retried).
    Returns the items found, by (pk, sk)."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    if len(wanted) > 100:
        raise ValueError("batch_get takes at most 100 keys")
    found: dict[tuple[str, str], Item] = {}
    request: dict[str, Any] = {
        _table(): {"Keys": [serialize(key(pk, sk)) for pk, sk in wanted], "ConsistentRead": consistent}
    }
    # Unprocessed keys mean throttling: back off (DynamoDB's advice), within the deadline.
    busy = Unavailable("the store is busy, retry later")
    for _ in deadline.attempts(5, exhausted=busy, backoff=(0.05, 0.5)):
        response = _call("batch_get_item", RequestItems=request)
        for raw in response.get("Responses", {}).get(_table(), []):
            item = deserialize(raw)
            found[(item["pk"], item["sk"])] = item
        request = response.get("UnprocessedKeys") or {}
        if not request:
            break
    return found


# A read-only empty mapping: the shared default of a Write's names and values.
_NOTHING: Mapping[str, Any] = MappingProxyType({})


class Write(NamedTuple):
    """One action of a transaction. `name` is what a failed condition is reported as (see
    `TransactionCanceled`); `subject` tells apart several actions of one name (a claim's value)."""

    kind: str  # "Put" | "Update" | "ConditionCheck" | "Delete"
    pk: str | None = None
    sk: str | None = None
    item: Item | None = None
    update: str | None = None
    condition: str | None = None
    names: Mapping[str, str] = _NOTHING
    values: Mapping[str, Any] = _NOTHING
    name: str = ""
    subject: Any = None

    def to_wire(self) -> dict[str, Any]:
        action: dict[str, Any] = {"TableName": _table()}
        if self.kind == "Put":
            assert self.item is not None
            action["Item"] = serialize(self.item)
        else:
            assert self.pk is not None and self.sk is not None
            action["Key"] = serialize(key(self.pk, self.sk))
        if self.update:
            action["UpdateExpression"] = self.update
        if self.condition:
            action["ConditionExpression"] = self.condition
            action["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        if self.names:
            action["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            action["ExpressionAttributeValues"] = _values(self.values)
        return {self.kind: action}


def transact(writes: Iterable[Write], *, conflict_retries: int = 3) -> None:
    """One TransactWriteItems: all of them or none. DynamoDB cancels a transaction that meets
    another in flight on the same item (`TransactionConflict`) without evaluating it; that one is
    retried after a short jittered pause, since nothing was decided."""
    import random

    writes = list(writes)
    actions = [w.to_wire() for w in writes]
    for attempt in range(conflict_retries + 1):
        try:
            _call("transact_write_items", TransactItems=actions)
            return
        except _Cancelled as cancelled:
            decided = [r for r in cancelled.reasons if r not in ("None", "TransactionConflict")]
            if decided or "TransactionConflict" not in cancelled.reasons or attempt == conflict_retries:
                outcomes = zip(writes, cancelled.reasons, cancelled.current, strict=False)
                failures = tuple(
                    Failure(write.name, write.subject, current)
                    for write, reason, current in outcomes
                    if reason == "ConditionalCheckFailed"
                )
                raise TransactionCanceled(cancelled.reasons, failures) from None
            deadline.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
