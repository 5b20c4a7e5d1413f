"""The race harness checks itself: released together against the moto server, threads really do
interleave a read with a later write, so a race test that passes with `release_together` means the
product's guarantee held, not that the threads happened to run one after another.

Each case is a guarantee the product keeps with one conditional write (a pool created once, a
token's K uses, a proof's timestamp mark, a join request's approvals counted once each). Written
as a read, a check and an unconditional write (the bug the product's race tests guard against),
the same race breaks it; written as the product writes it, the race keeps it. These are the "naive
variant" demonstrations of the race tests, kept here once; the code they run is this file's, not
the product's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from joinplane import aws
from joinplane.settings import settings
from tests.support import release_together

pytestmark = pytest.mark.harness

THREADS = 16
KEY = {"pk": {"S": "HARNESS#contested"}, "sk": {"S": "ITEM"}}


def dynamodb() -> Any:
    return aws.client("dynamodb")


def conditional(write: Callable[[], Any]) -> bool:
    """True when the conditional write went through, False when its condition stopped it."""
    try:
        write()
    except dynamodb().exceptions.ConditionalCheckFailedException:
        return False
    return True


def read() -> dict[str, Any] | None:
    item: dict[str, Any] | None = (
        dynamodb().get_item(TableName=settings().table_name, Key=KEY, ConsistentRead=True).get("Item")
    )
    return item


# --- create if absent (pools, join tokens, CA secrets) ------------------------------------------------


def create_read_then_write(index: int) -> bool:
    if read() is not None:
        return False
    dynamodb().put_item(TableName=settings().table_name, Item={**KEY, "owner": {"N": str(index)}})
    return True


def create_conditionally(index: int) -> bool:
    return conditional(
        lambda: dynamodb().put_item(
            TableName=settings().table_name,
            Item={**KEY, "owner": {"N": str(index)}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    )


# --- take one of K uses (a token's maxUses) ------------------------------------------------------


USES = 3


def take_read_then_write(index: int) -> bool:
    item = read()
    assert item is not None
    left = int(item["uses"]["N"])
    if left <= 0:
        return False
    dynamodb().put_item(TableName=settings().table_name, Item={**KEY, "uses": {"N": str(left - 1)}})
    return True


def take_conditionally(index: int) -> bool:
    return conditional(
        lambda: dynamodb().update_item(
            TableName=settings().table_name,
            Key=KEY,
            UpdateExpression="SET uses = uses - :one",
            ConditionExpression="uses > :zero",
            ExpressionAttributeValues={":one": {"N": "1"}, ":zero": {"N": "0"}},
        )
    )


# --- move a mark forward once (a join proof's timestamp) ---------------------------------------------


PROOF_AT = "1764000000000"


def mark_read_then_write(index: int) -> bool:
    item = read()
    if item is not None and "proofAt" in item and int(item["proofAt"]["N"]) >= int(PROOF_AT):
        return False
    dynamodb().put_item(TableName=settings().table_name, Item={**KEY, "proofAt": {"N": PROOF_AT}})
    return True


def mark_conditionally(index: int) -> bool:
    return conditional(
        lambda: dynamodb().update_item(
            TableName=settings().table_name,
            Key=KEY,
            UpdateExpression="SET proofAt = :t",
            ConditionExpression="attribute_not_exists(proofAt) OR proofAt < :t",
            ExpressionAttributeValues={":t": {"N": PROOF_AT}},
        )
    )


# --- consume once (a TPM join's activation challenge) -------------------------------------------

DIGEST = "ab" * 32


def consume_read_then_write(index: int) -> bool:
    item = read()
    if item is None or item["secretSha256"]["S"] != DIGEST:
        return False
    dynamodb().delete_item(TableName=settings().table_name, Key=KEY)
    return True


def consume_conditionally(index: int) -> bool:
    return conditional(
        lambda: dynamodb().delete_item(
            TableName=settings().table_name,
            Key=KEY,
            ConditionExpression="secretSha256 = :digest",
            ExpressionAttributeValues={":digest": {"S": DIGEST}},
        )
    )


# --- count distinct approvers to a threshold (a join request's approvals) -------------------------

PENDING = {"state": {"S": "pending"}}
FIRST_APPROVAL = {"approvals": {"M": {"key_first": {"S": "t0"}}}}


def approvals_of(item: dict[str, Any]) -> dict[str, Any]:
    return dict(item.get("approvals", {"M": {}})["M"])


def approve_read_then_write(index: int, required: int = 2) -> bool:
    """True when this approval was the one that reached `required` (it approved the request)."""
    item = read()
    assert item is not None
    if item["state"]["S"] != "pending":
        return False
    approvals = {**approvals_of(item), f"key_{index}": {"S": f"t{index}"}}
    completes = len(approvals) >= required
    state = "approved" if completes else "pending"
    dynamodb().put_item(
        TableName=settings().table_name, Item={**KEY, "state": {"S": state}, "approvals": {"M": approvals}}
    )
    return completes


def approve_conditionally(index: int, required: int = 2) -> bool:
    """As joinplane.dal.requests.approve writes it: conditioned on the state and on the number of
    approvals read, the approver added to the map rather than the map replaced."""
    item = read()
    assert item is not None
    if item["state"]["S"] != "pending":
        return False
    read_count = len(approvals_of(item))
    completes = read_count + 1 >= required
    return conditional(
        lambda: dynamodb().update_item(
            TableName=settings().table_name,
            Key=KEY,
            UpdateExpression="SET approvals.#me = :at, #state = :next",
            ConditionExpression=(
                "#state = :pending AND size(approvals) = :n AND attribute_not_exists(approvals.#me)"
            ),
            ExpressionAttributeNames={"#me": f"key_{index}", "#state": "state"},
            ExpressionAttributeValues={
                ":at": {"S": f"t{index}"},
                ":next": {"S": "approved" if completes else "pending"},
                ":pending": {"S": "pending"},
                ":n": {"N": str(read_count)},
            },
        )
    )


@dataclass(frozen=True)
class Guarantee:
    start: dict[str, Any] | None  # the item before the race (None: no item)
    read_then_write: Callable[[int], bool]
    conditional_write: Callable[[int], bool]
    winners: int  # how many callers may be told they won


GUARANTEES = {
    "create-once": Guarantee(None, create_read_then_write, create_conditionally, 1),
    "k-uses": Guarantee({"uses": {"N": str(USES)}}, take_read_then_write, take_conditionally, USES),
    "mark-once": Guarantee({}, mark_read_then_write, mark_conditionally, 1),
    "consume-once": Guarantee(
        {"secretSha256": {"S": DIGEST}}, consume_read_then_write, consume_conditionally, 1
    ),
    # One approval of two already recorded: of the approvals racing for the second, one completes.
    "complete-once": Guarantee(
        {**PENDING, **FIRST_APPROVAL}, approve_read_then_write, approve_conditionally, 1
    ),
}


def race(guarantee: Guarantee, work: Callable[[int], bool]) -> int:
    if guarantee.start is not None:
        dynamodb().put_item(TableName=settings().table_name, Item={**KEY, **guarantee.start})
    return sum(release_together(work, THREADS))


@pytest.mark.parametrize("name", GUARANTEES)
def test_released_together_a_read_then_write_breaks_the_guarantee(table: str, name: str) -> None:
    # Given a guarantee and the tempting version of its write: read, check, then write unconditionally
    guarantee = GUARANTEES[name]
    # When the harness releases 16 callers of it at once against the moto server
    winners = race(guarantee, guarantee.read_then_write)
    # Then more callers were told they won than the guarantee allows: reads and writes interleaved
    assert winners > guarantee.winners


@pytest.mark.parametrize("name", GUARANTEES)
def test_released_together_one_conditional_write_keeps_the_guarantee(table: str, name: str) -> None:
    # Given the same guarantee written as the product writes it: one conditional write
    guarantee = GUARANTEES[name]
    # When the harness releases 16 callers of it at once
    winners = race(guarantee, guarantee.conditional_write)
    # Then exactly as many won as the guarantee allows: the harness does not invent races either
    assert winners == guarantee.winners


# --- keep every approval (a join request needing more approvals than race) -------------------------


def approve_until_recorded(index: int) -> bool:
    """The product's loop around the conditional approval: a lost write reads again and retries (each
    loss is another approver's success, so THREADS attempts always suffice)."""
    return any(approve_conditionally(index, required=THREADS + 1) for _ in range(THREADS))


def test_released_together_read_then_write_approvals_lose_one_another(table: str) -> None:
    # Given a pending request with one approval, needing more than the racing approvers can give
    dynamodb().put_item(TableName=settings().table_name, Item={**KEY, **PENDING, **FIRST_APPROVAL})
    # When 16 distinct keys approve it at once, each writing back the approvals it read plus its own
    release_together(lambda i: approve_read_then_write(i, required=THREADS + 2), THREADS)
    # Then approvals were lost: each write replaced the map another had just written
    stored = read()
    assert stored is not None and len(approvals_of(stored)) < THREADS + 1


def test_released_together_conditional_approvals_are_all_kept(table: str) -> None:
    # Given the same request
    dynamodb().put_item(TableName=settings().table_name, Item={**KEY, **PENDING, **FIRST_APPROVAL})
    # When 16 distinct keys approve it at once as the product writes it, retrying a lost write
    recorded = release_together(approve_until_recorded, THREADS)
    # Then every approval is recorded, once
    stored = read()
    assert all(recorded) and stored is not None and len(approvals_of(stored)) == THREADS + 1
