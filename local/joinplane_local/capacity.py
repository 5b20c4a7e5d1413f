"""What AWS bills for one request, by AWS's documented rules: DynamoDB item sizes and request
units (with the indexes a write changes), and EventBridge entry sizes.

DynamoDB would say it itself (`ReturnConsumedCapacity`), but the emulator does not: moto answers
fixed numbers whatever the item's size (0.5 for any GetItem, 1 for any PutItem, 2 for each action
of a transaction), so `make cost` sizes every item read and written by the rules of
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
and https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html:

- an item's size is the sum of its attribute names (UTF-8 bytes) and values: a string its UTF-8
  bytes, a binary its bytes, a number 1 byte per two significant digits plus 1 (plus 1 if
  negative), a boolean or null 1 byte, a list or map 3 bytes plus 1 byte and the size of each
  element (a map element's size includes its name), a set the sum of its elements;
- a read is one unit per 4 KB (rounded up, per item for GetItem and BatchGetItem, over the sum of
  all items read for a Query), half of that when eventually consistent, twice in a transaction; a
  read of an absent item still costs the minimum;
- a write is one unit per 1 KB of the larger of the item before and after (a failed condition
  still pays for the item as it stands), twice in a transaction;
- each global secondary index the write changes costs one write of the projected entry (putting,
  updating or removing it), two when the write changes the entry's key (the old one is deleted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

READ_UNIT_BYTES = 4 * 1024
WRITE_UNIT_BYTES = 1024

Item = Mapping[str, Any]  # an item in DynamoDB's JSON (low-level) form: {"name": {"S": "..."}}


def _number_size(text: str) -> int:
    value = Decimal(text)
    digits = len(value.normalize().as_tuple().digits) if value else 1
    return (digits + 1) // 2 + 1 + (1 if value < 0 else 0)


def _bytes(value: Any) -> int:
    return len(value.encode()) if isinstance(value, str) else len(value)


def value_size(value: Mapping[str, Any]) -> int:
    """The size of one AttributeValue ({"S": ...}, {"M": {...}} ...), its name not included."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return _number_size(str(inner))
    if kind == "B":
        return _bytes(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in inner)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in inner)
    if kind == "BS":
        return sum(_bytes(b) for b in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(element) for element in inner)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + value_size(element) for name, element in inner.items())
    raise ValueError(f"not a DynamoDB attribute value: {kind!r}")


def item_size(item: Item | None) -> int:
    """Bytes, as DynamoDB counts them; an absent item is 0."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def read_units(sizes: Iterable[int], *, consistent: bool, transactional: bool = False) -> float:
    """Read request units of reading items of these sizes one by one (GetItem, BatchGetItem,
    TransactGetItems): each rounded up to 4 KB, at least one unit (an absent item too)."""
    factor = 2.0 if transactional else 1.0 if consistent else 0.5
    return sum(max(1, math.ceil(size / READ_UNIT_BYTES)) * factor for size in sizes)


def query_units(sizes: Iterable[int], *, consistent: bool) -> float:
    """Read request units of a Query or Scan: the sum of the items it read, rounded up to 4 KB."""
    return max(1, math.ceil(sum(sizes) / READ_UNIT_BYTES)) * (1.0 if consistent else 0.5)


def write_units(before: int, after: int, *, transactional: bool = False) -> float:
    """Write request units of one Put, Update, Delete (or a transaction's ConditionCheck, where
    before == after): the larger item, rounded up to 1 KB, at least one unit."""
    return max(1, math.ceil(max(before, after) / WRITE_UNIT_BYTES)) * (2.0 if transactional else 1.0)


@dataclass(frozen=True)
class Index:
    """A global secondary index: its key attributes and what it projects."""

    name: str
    keys: tuple[str, ...]
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    included: tuple[str, ...] = ()

    def entry(self, item: Item | None, table_keys: tuple[str, ...]) -> Item | None:
        """The item as this index holds it, or None when the item is not in the index (sparse)."""
        if not item or any(k not in item for k in self.keys):
            return None
        if self.projection == "ALL":
            return item
        kept = {*table_keys, *self.keys, *(self.included if self.projection == "INCLUDE" else ())}
        return {name: value for name, value in item.items() if name in kept}


@dataclass(frozen=True)
class Schema:
    table_keys: tuple[str, ...]
    indexes: tuple[Index, ...]

    def key_of(self, item: Item) -> dict[str, Any]:
        return {k: item[k] for k in self.table_keys}

    @classmethod
    def of(cls, description: Mapping[str, Any]) -> Schema:
        """From DescribeTable's `Table`."""
        return cls(
            table_keys=tuple(k["AttributeName"] for k in description["KeySchema"]),
            indexes=tuple(
                Index(
                    name=i["IndexName"],
                    keys=tuple(k["AttributeName"] for k in i["KeySchema"]),
                    projection=i["Projection"]["ProjectionType"],
                    included=tuple(i["Projection"].get("NonKeyAttributes", ())),
                )
                for i in description.get("GlobalSecondaryIndexes", ())
            ),
        )


def index_writes(schema: Schema, before: Item | None, after: Item | None) -> dict[str, float]:
    """Write request units each index is charged for a change of one item from `before` to
    `after` (indexes it does not change are left out)."""
    charged: dict[str, float] = {}
    for index in schema.indexes:
        old, new = index.entry(before, schema.table_keys), index.entry(after, schema.table_keys)
        if old == new:
            continue
        units = 0.0
        if old is not None and new is not None and any(old[k] != new[k] for k in index.keys):
            units = write_units(item_size(old), 0) + write_units(0, item_size(new))
        elif old is not None and new is not None:
            units = write_units(item_size(old), item_size(new))
        elif new is not None:
            units = write_units(0, item_size(new))
        elif old is not None:
            units = write_units(item_size(old), 0)
        charged[index.name] = units
    return charged


def event_entry_size(entry: Mapping[str, Any]) -> int:
    """An EventBridge PutEvents entry's size as EventBridge meters it
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html): 14 bytes
    for a Time, plus the UTF-8 bytes of Source, DetailType, Detail and each of Resources."""
    size = 14 if entry.get("Time") is not None else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(str(entry.get(name, "")).encode())
    size += sum(len(str(r).encode()) for r in entry.get("Resources", ()))
    return size


def event_chunks(size: int, chunk_bytes: int) -> int:
    return max(1, math.ceil(size / chunk_bytes))
