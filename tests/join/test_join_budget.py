"""What a join costs in DynamoDB calls, counted on the real client (docs/join.md states them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from joinplane import aws, container, keyauth
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import join


def count_into(counted: Counter[str]) -> None:
    """Count every call of the container's DynamoDB client (a new container has a new client)."""

    def count(event_name: str, **_: Any) -> None:
        counted[event_name.rsplit(".", 1)[-1]] += 1

    aws.client("dynamodb").meta.events.register("before-call.dynamodb.*", count, unique_id="budget")


@pytest.fixture
def calls() -> Iterator[Counter[str]]:
    counted: Counter[str] = Counter()
    count_into(counted)
    yield counted
    aws.client("dynamodb").meta.events.unregister("before-call.dynamodb.*", unique_id="budget")


def test_a_warm_admit_is_one_token_read_and_one_transaction(make_token, machine_factory, calls) -> None:
    # Given a warm container (the pool and its CA were loaded by an earlier join)
    token = make_token(maxUses=5)
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    calls.clear()
    # When another machine is admitted
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    # Then it cost exactly one GetItem (the token) and one TransactWriteItems
    assert calls == Counter({"GetItem": 1, "TransactWriteItems": 1})


def test_a_cold_admit_adds_the_reads_of_the_pool_and_its_ca(make_token, machine_factory, calls) -> None:
    # Given a pool whose CA an earlier join made
    token = make_token(maxUses=2)
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    csr = machine_factory().csr
    container.reset()  # a new container: no pool, no CA cached
    count_into(calls)
    calls.clear()
    assert join({"joinToken": token["token"], "csr": csr}).status == 200
    # The token, the pool, the pool's CA pointer; the active CA and its bundle in one BatchGetItem
    assert calls == Counter({"GetItem": 3, "BatchGetItem": 1, "TransactWriteItems": 1})


def test_a_pools_first_certificate_makes_its_ca_in_one_more_transaction(
    make_token, machine_factory, calls
) -> None:
    token = make_token()
    csr = machine_factory().csr
    container.reset()  # a new container, and a pool without a CA
    count_into(calls)
    calls.clear()
    assert join({"joinToken": token["token"], "csr": csr}).status == 200
    # The token, the pool, the (absent) CA pointer; the CA and its pointer, then the admit
    assert calls == Counter({"GetItem": 3, "TransactWriteItems": 2})


def test_a_deferral_costs_the_same_as_an_admit(make_token, machine_factory, calls) -> None:
    token = make_token(maxUses=5, requireApproval=True)
    join({"joinToken": token["token"], "csr": machine_factory().csr})
    calls.clear()
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 202
    assert calls == Counter({"GetItem": 1, "TransactWriteItems": 1})


def test_retry_and_consume_costs(make_token, machine_factory, admin_key, calls) -> None:
    token = make_token(maxUses=5, requireApproval=True)
    machine = machine_factory()
    request_id = join({"joinToken": token["token"], "csr": machine.csr}).body["joinRequest"]["requestId"]
    calls.clear()
    # A pending retry: token, the optimistic transaction (cancelled on the identity), the request
    assert join({"joinToken": token["token"], "csr": machine.csr}).status == 202
    assert calls == Counter({"GetItem": 2, "TransactWriteItems": 1})
    # The same retry with a key proof (as the agent sends it): + the UpdateItem that moves its mark
    calls.clear()
    assert join({"joinToken": token["token"], "csr": machine.csr}, signed_by=machine.key).status == 202
    assert calls == Counter({"GetItem": 2, "TransactWriteItems": 1, "UpdateItem": 1})
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    calls.clear()
    # Consuming the approval: the same, plus the consuming transaction (which also uses up the proof);
    # it is also the pool's first certificate: + its CA pointer read and the CA's own transaction
    assert join({"joinToken": token["token"], "csr": machine.csr}, signed_by=machine.key).status == 200
    assert calls == Counter({"GetItem": 3, "TransactWriteItems": 3})
