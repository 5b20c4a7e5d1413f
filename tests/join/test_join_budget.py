"""What a join costs in DynamoDB calls, counted on the real client (docs/join.md states them)."""

from __future__ import annotations

import importlib.abc
import json
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from joinplane import aws, container, keyauth
from joinplane.join_requests import ApproveJoinRequest, approve
from tests.support import call, join, sign_proof
from tests.support.tpm_blobs import SoftTpm, with_answer


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


def test_a_warm_admit_is_two_reads_and_one_transaction(make_token, machine_factory, calls) -> None:
    # Given a warm container (the pool and its CA were loaded by an earlier join)
    token = make_token(maxUses=5)
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    calls.clear()
    # When another machine is admitted
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    # Then it cost exactly two GetItems (the token, the key's absent record) and one TransactWriteItems
    assert calls == Counter({"GetItem": 2, "TransactWriteItems": 1})


def test_a_cold_admit_adds_the_reads_of_the_pool_and_its_ca(make_token, machine_factory, calls) -> None:
    # Given a pool whose CA an earlier join made
    token = make_token(maxUses=2)
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 200
    csr = machine_factory().csr
    container.reset()  # a new container: no pool, no CA cached
    count_into(calls)
    calls.clear()
    assert join({"joinToken": token["token"], "csr": csr}).status == 200
    # The token, the key's record, the pool, the pool's CA pointer; the active CA and its bundle in
    # one BatchGetItem
    assert calls == Counter({"GetItem": 4, "BatchGetItem": 1, "TransactWriteItems": 1})


def test_a_pools_first_certificate_makes_its_ca_in_one_more_transaction(
    make_token, machine_factory, calls
) -> None:
    token = make_token()
    csr = machine_factory().csr
    container.reset()  # a new container, and a pool without a CA
    count_into(calls)
    calls.clear()
    assert join({"joinToken": token["token"], "csr": csr}).status == 200
    # The token, the key's record, the pool, the (absent) CA pointer; the CA and its pointer, then the admit
    assert calls == Counter({"GetItem": 4, "TransactWriteItems": 2})


def test_a_deferral_costs_the_same_as_an_admit(make_token, machine_factory, calls) -> None:
    token = make_token(maxUses=5, requireApproval=True)
    join({"joinToken": token["token"], "csr": machine_factory().csr})
    calls.clear()
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 202
    assert calls == Counter({"GetItem": 2, "TransactWriteItems": 1})


def test_retry_and_consume_costs(make_token, machine_factory, admin_key, calls) -> None:
    token = make_token(maxUses=5, requireApproval=True)
    machine = machine_factory()
    request_id = join({"joinToken": token["token"], "csr": machine.csr}).body["joinRequest"]["requestId"]
    calls.clear()
    # A pending retry reads the token, the key's record and its request, and writes nothing
    assert join({"joinToken": token["token"], "csr": machine.csr}).status == 202
    assert calls == Counter({"GetItem": 3})
    # The same retry with a key proof (as the agent sends it): + the UpdateItem that moves its mark
    calls.clear()
    assert join({"joinToken": token["token"], "csr": machine.csr}, signed_by=machine.key).status == 202
    assert calls == Counter({"GetItem": 3, "UpdateItem": 1})
    admin = keyauth.verify(admin_key)
    assert admin is not None
    approve(admin, ApproveJoinRequest(tenantId="acme", poolId="gpu", requestId=request_id))
    calls.clear()
    # Consuming the approval: the same reads and the consuming transaction (which also uses up the
    # proof); it is also the pool's first certificate: + its CA pointer read and the CA's own transaction
    assert join({"joinToken": token["token"], "csr": machine.csr}, signed_by=machine.key).status == 200
    assert calls == Counter({"GetItem": 4, "TransactWriteItems": 2})


def test_a_renewal_is_one_machine_read_and_one_transaction(make_token, machine_factory, calls) -> None:
    # Given an admitted machine in a warm container
    token = make_token(maxUses=2)
    machine = machine_factory()
    admitted = join({"joinToken": token["token"], "csr": machine.csr}).body
    renewal = {"machineToken": admitted["machineToken"], "csr": machine.new_csr()}
    calls.clear()
    # When it renews with the same key
    assert join(renewal, path="/machines/renew", signed_by=machine.key).status == 200
    # Then it cost the machine's GetItem and one TransactWriteItems: the time it renewed is stored
    # by the machine's update that the transaction makes anyway (a renewal is billed per write)
    assert calls == Counter({"GetItem": 1, "TransactWriteItems": 1})


def test_a_renewal_onto_a_new_key_costs_the_same(make_token, machine_factory, calls) -> None:
    token = make_token(maxUses=2)
    machine, new = machine_factory(), machine_factory()
    machine_token = join({"joinToken": token["token"], "csr": machine.csr}).body["machineToken"]
    raw = json.dumps({"machineToken": machine_token, "csr": new.csr}).encode()
    proof = sign_proof(
        machine.key,
        purpose="renew",
        credential=machine_token,
        body=raw,
        public_key=machine.key,
        new_key=new.key,
    )
    calls.clear()
    assert join(None, raw=raw, proof=proof, path="/machines/renew").status == 200
    # The new key's record, the old one retired and its certificates revoked: all in the one transaction
    assert calls == Counter({"GetItem": 1, "TransactWriteItems": 1})


def test_a_rejoin_costs_three_reads_and_one_transaction(make_token, machine_factory, calls) -> None:
    token = make_token(maxUses=2)
    machine = machine_factory()
    assert join({"joinToken": token["token"], "csr": machine.csr}).status == 200
    calls.clear()
    assert join({"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key).status == 200
    # The token, the key's record, its machine; the re-join, signed once
    assert calls == Counter({"GetItem": 3, "TransactWriteItems": 1})


TPM_MODULES = (
    "tpm_credential",
    "tpm_join",
    "tpm_manufacturers",
    "dal.tpm_challenges",
    "dal.tpm_manufacturers",
)


class _Forbidden(importlib.abc.MetaPathFinder):
    """Fails any import of the TPM activation code while installed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name.removeprefix("joinplane.") in TPM_MODULES:
            raise AssertionError(f"a join without TPM attestation imported {name}")


def test_a_join_without_tpm_attestation_loads_no_tpm_code(
    make_token, machine_factory, admin_key, calls, monkeypatch
) -> None:
    # Given none of the TPM activation code loaded, and importing it failing
    for name in TPM_MODULES:
        monkeypatch.delitem(sys.modules, f"joinplane.{name}", raising=False)
        # `from joinplane import x` finds a loaded x on the package without importing it again
        package, _, module = f"joinplane.{name}".rpartition(".")
        monkeypatch.delattr(sys.modules[package], module, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Forbidden(), *sys.meta_path])
    # When machines join through a token with a TPM policy, one claiming an EK without activation
    token = make_token(attestation={"tpm": "defer-unlisted"}, maxUses=5)
    assert join({"joinToken": token["token"], "csr": machine_factory().csr}).status == 202
    calls.clear()
    claimed = {"ekPublicKeySha256": "ab" * 32}
    assert join({"joinToken": token["token"], "csr": machine_factory().csr, "tpm": claimed}).status == 202
    # Then nothing of it was imported, and a claimed EK costs no lookup: it counts as no TPM
    assert not [m for m in sys.modules if m.removeprefix("joinplane.") in TPM_MODULES]
    assert calls == Counter({"GetItem": 2, "TransactWriteItems": 1})


def test_a_tpm_join_costs_a_challenge_then_a_consume(make_token, machine_factory, admin_key, calls) -> None:
    # Given a token with a TPM policy, a listed TPM, and a warm container
    assert join({"joinToken": make_token()["token"], "csr": machine_factory().csr}).status == 200
    token = make_token(attestation={"tpm": "require"}, maxUses=5)
    tpm, machine = SoftTpm.make(), machine_factory()
    body = {"ekPublicKeySha256": tpm.ek_sha256()}
    assert (
        call(
            "/api/compute/tpmAllowList/add", {"tenantId": "acme", "siteId": "rack-1", **body}, admin_key
        ).status
        == 200
    )
    calls.clear()
    # When it is challenged: the token, the key's history (a pending poll is not challenged), the challenge
    first = join(
        {"joinToken": token["token"], "csr": machine.csr, "tpm": tpm.presented()}, signed_by=machine.key
    )
    assert first.status == 202 and calls == Counter({"GetItem": 2, "PutItem": 1})
    calls.clear()
    # When it answers: the token, the consume, the allow-list entry, the key's record, the admit
    retry = with_answer(
        {"joinToken": token["token"], "csr": machine.csr}, tpm, tpm.answer(first.body["tpmChallenge"])
    )
    assert join(retry, signed_by=machine.key).status == 200
    assert calls == Counter({"GetItem": 3, "DeleteItem": 1, "TransactWriteItems": 1})
