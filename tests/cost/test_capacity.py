"""The billing arithmetic `make cost` prices with, held to AWS's own documented examples
(DynamoDB's developer guide, "Item sizes and formats" and "Read and write operations";
EventBridge's "Calculating PutEvents event entry size")."""

from __future__ import annotations

import pytest

from joinplane_local import capacity, prices
from joinplane_local.capacity import (
    Index,
    Schema,
    index_writes,
    item_size,
    query_units,
    read_units,
    write_units,
)

KB = 1024


def test_an_items_size_is_its_names_and_values() -> None:
    # Given DynamoDB's example: "shirt-color" = "R" and "shirt-size" = "M"
    item = {"shirt-color": {"S": "R"}, "shirt-size": {"S": "M"}}
    # Then it is 23 bytes
    assert item_size(item) == 23


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"N": "7"}, 2),  # 1 significant digit: 1 byte + 1
        ({"N": "1234"}, 3),  # 4 digits: 2 bytes + 1
        ({"N": "12345"}, 4),
        ({"N": "1000000"}, 2),  # trailing zeroes are trimmed
        ({"N": "-12"}, 3),  # negative: 1 more
        ({"N": "0.0012"}, 2),  # leading zeroes are trimmed
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"B": b"\x00\x01\x02"}, 3),
        ({"S": "é"}, 2),  # UTF-8 bytes, not characters
        ({"L": []}, 3),  # an empty list or map is 3 bytes
        ({"L": [{"S": "ab"}, {"N": "1"}]}, 3 + (1 + 2) + (1 + 2)),  # + 1 byte and the size per element
        ({"M": {"k": {"S": "v"}}}, 3 + 1 + 1 + 1),  # a map element counts its name too
        ({"SS": ["a", "bc"]}, 3),
    ],
)
def test_each_kind_of_value_is_sized_by_dynamodbs_rules(value: dict[str, object], size: int) -> None:
    assert capacity.value_size(value) == size


def test_reads_round_each_item_up_to_4_kb() -> None:
    # A 3.5 KB item reads as 4 KB; a 10 KB item as 12 KB; an 8 KB item is 2 units, 1 eventually
    # consistent, 4 in a transaction
    assert read_units([3584], consistent=True) == 1
    assert read_units([3584], consistent=False) == 0.5
    assert read_units([10 * KB], consistent=True) == 3
    assert read_units([8 * KB], consistent=True) == 2
    assert read_units([8 * KB], consistent=False) == 1
    assert read_units([8 * KB], consistent=True, transactional=True) == 4
    # BatchGetItem of a 1.5 KB and a 6.5 KB item: 12 KB (4 + 8), not 8
    assert read_units([1536, 6656], consistent=True) == 3
    # An absent item still costs the minimum
    assert read_units([0], consistent=False) == 0.5


def test_a_query_rounds_the_sum_of_what_it_read() -> None:
    # Items totalling 40.8 KB read as 44 KB: 11 units, 5.5 eventually consistent
    assert query_units([4 * KB] * 10 + [819], consistent=True) == 11
    assert query_units([4 * KB] * 10 + [819], consistent=False) == 5.5
    assert query_units([], consistent=False) == 0.5


def test_writes_round_the_larger_item_up_to_1_kb_and_transactions_double() -> None:
    # A 1.6 KB item is written as 2 KB
    assert write_units(0, 1639) == 2
    assert write_units(1639, 500) == 2  # an update that shrinks it still pays for the larger
    assert write_units(0, 0) == 1  # a delete of nothing, a refused condition on nothing
    assert write_units(0, 1639, transactional=True) == 4


SCHEMA = Schema(
    table_keys=("pk", "sk"),
    indexes=(
        Index("all", ("gpk", "gsk"), "ALL"),
        Index("keys", ("kpk", "ksk"), "KEYS_ONLY"),
    ),
)


def _item(**attributes: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": "P"}, "sk": {"S": "S"}, **{k: {"S": v} for k, v in attributes.items()}}


def test_an_index_write_follows_what_the_index_holds() -> None:
    big = "x" * 1500
    # Given an item entering both indexes: the ALL index writes the whole item (2 KB), the
    # KEYS_ONLY one its keys (1 unit)
    after = _item(gpk="a", gsk="1", kpk="b", ksk="2", data=big)
    assert index_writes(SCHEMA, None, after) == {"all": 2, "keys": 1}
    # When only a projected attribute changes, the KEYS_ONLY index is not written
    changed = {**after, "data": {"S": big + "y"}}
    assert index_writes(SCHEMA, after, changed) == {"all": 2}
    # When the index key changes, the old entry is deleted and the new one written
    moved = {**after, "gsk": {"S": "9"}}
    assert index_writes(SCHEMA, after, moved) == {"all": 4}
    # When the item leaves a sparse index (its key attribute removed), one write removes it
    left = {k: v for k, v in after.items() if k not in ("gpk", "kpk")}
    assert index_writes(SCHEMA, after, left) == {"all": 2, "keys": 1}
    # An item in no index costs no index write
    assert index_writes(SCHEMA, _item(data="x"), _item(data="y")) == {}


def test_an_eventbridge_entry_is_metered_by_64_kb_chunk() -> None:
    entry = {
        "Time": "2026-12-02T00:00:00Z",
        "Source": "joinplane",
        "DetailType": "machine.joined",
        "Detail": "{}",
    }
    assert capacity.event_entry_size(entry) == 14 + 9 + 14 + 2
    assert capacity.event_chunks(capacity.event_entry_size(entry), prices.EVENTBRIDGE_CHUNK_BYTES) == 1
    assert capacity.event_chunks(64 * KB + 1, prices.EVENTBRIDGE_CHUNK_BYTES) == 2


def test_the_list_prices_per_million() -> None:
    # The floors the cost goals are set against: API Gateway and EventBridge $1, a KMS ECC Sign $15,
    # a WRU $0.625, per million
    assert pytest.approx(1.0) == prices.APIGATEWAY_HTTP_REQUEST * prices.MILLION
    assert pytest.approx(1.0) == prices.EVENTBRIDGE_EVENT * prices.MILLION
    assert pytest.approx(15.0) == prices.KMS_ASYMMETRIC_REQUEST * prices.MILLION
    assert pytest.approx(0.625) == prices.DYNAMODB_WRU * prices.MILLION
    # A 1024 MB function running 100 ms: 0.1 GB-s
    assert 0.1 * prices.LAMBDA_GB_SECOND["x86_64"] * prices.MILLION == pytest.approx(1.66667)
