"""What a function reachable without an API key could do with a code-execution bug: its role is
all that limits it. Each forbidden write is attempted here with the function's own policy (the
template's statements, enforced at call time by joinplane_local.iam against the moto server) and
must be refused with nothing written; the writes the join needs still pass."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from joinplane import aws, ca_keys, clock, expiry
from joinplane.dal import apikeys as apikeys_db
from joinplane.dal import authorities as authorities_db
from joinplane.dal import ca_retention, dynamo
from joinplane.dal import tokens as tokens_db
from joinplane.dal.pools import pool_key
from joinplane_local import iam
from tests.support import call, join, key_id_of, openssl_csr
from tests.support.iam import policies, refusals

POOL = {"tenantId": "acme", "poolId": "gpu"}
ANONYMOUS = ("MachineJoinFunction", "ClusterJoinFunction")


@pytest.fixture
def joined(admin_key: str, tmp_path: Path) -> dict[str, Any]:
    """A pool, a 5-use token and one admitted machine (so the pool has its CA and its KMS key)."""
    assert (
        call(
            "/api/compute/pools/create",
            {**POOL, "siteId": "s1", "name": "GPU", "workspaceId": "w"},
            admin_key,
        ).status
        == 200
    )
    token = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 5}, admin_key).body
    assert join({"joinToken": token["token"], "csr": openssl_csr(tmp_path)}).status == 200
    stored = authorities_db.read("acme", "gpu")
    assert stored is not None
    return {"tokenId": token["tokenId"], "keyId": stored.active.key_id}


def refused(function: str, write: Any) -> str:
    """Run `write` as `function`: it must fail with IAM's AccessDenied; the refusal's text."""
    with refusals() as taken, iam.acting_as(function), pytest.raises(ClientError) as failure:
        write()
    assert failure.value.response["Error"]["Code"] == "AccessDeniedException"
    assert len(taken) == 1
    return taken[0]


def token_item(token_id: str) -> dict[str, Any]:
    item = dynamo.get(*tokens_db.token_key(token_id))
    assert item is not None
    return item


@pytest.mark.parametrize("function", ANONYMOUS)
def test_a_join_function_can_write_no_api_key(function: str, admin_key: str, joined: dict[str, Any]) -> None:
    # Given a forged platform-admin key, as a code-execution bug on the join path would write it
    forged = apikeys_db.ApiKeyRecord(
        key_id="k_forged",
        tenant_id="acme",
        grants=("PLATFORM_ADMIN@*",),
        description="",
        secret_sha256="0" * 64,
        state="active",
        created_at=clock.rfc3339(clock.now()),
    )
    # When the join function puts it, alone or inside a transaction with a write it may make
    message = refused(function, lambda: dynamo.put(forged.to_item()))
    spend = tokens_db.spend_use(
        tokens_db.JoinTokenRecord.from_item(token_item(joined["tokenId"])), now=clock.now()
    )
    put = dynamo.Write("Put", item=forged.to_item(), name="key")
    refused(function, lambda: dynamo.transact([spend, put]))
    # Or widens an existing key's grants
    admin_pk, admin_sk = apikeys_db.key_key(key_id_of(admin_key))
    refused(
        function,
        lambda: dynamo.update(
            admin_pk, admin_sk, update="SET grants = :g", values={":g": ["PLATFORM_ADMIN@*"]}
        ),
    )
    # Then nothing was written, and the refusal names the statement that would allow it
    assert dynamo.get(*apikeys_db.key_key("k_forged")) is None
    assert token_item(joined["tokenId"])["usesRemaining"] == 4
    assert "dynamodb:PutItem" in message and "APIKEY#" in message and function in message


@pytest.mark.parametrize("function", ANONYMOUS)
def test_a_join_function_can_write_no_pool(function: str, joined: dict[str, Any]) -> None:
    pk, sk = pool_key("acme", "gpu")
    refused(function, lambda: dynamo.update(pk, sk, update="SET requireApproval = :f", values={":f": False}))
    refused(function, lambda: dynamo.put({"pk": pk, "sk": "POOL#other", "state": "active"}))
    assert dynamo.get(pk, "POOL#other") is None


def test_the_machine_join_may_spend_a_tokens_use_and_write_nothing_else_of_it(joined: dict[str, Any]) -> None:
    function = "MachineJoinFunction"
    pk, sk = tokens_db.token_key(joined["tokenId"])
    before = token_item(joined["tokenId"])
    # When the join function spends one use, as a join does / Then it may
    token = tokens_db.JoinTokenRecord.from_item(before)
    with iam.acting_as(function):
        dynamo.transact([tokens_db.spend_use(token, now=clock.now())])
    assert token_item(joined["tokenId"])["usesRemaining"] == before["usesRemaining"] - 1
    # But it may neither change what the token is nor make or delete one
    for attribute, value in (
        ("maxUses", 1000),
        ("tenantId", "other"),
        ("requireApproval", False),
        ("poolId", "x"),
    ):
        change = functools.partial(
            dynamo.update, pk, sk, update=f"SET {attribute} = :v", values={":v": value}
        )
        refused(function, change)
    refused(function, lambda: dynamo.put({**before, "pk": "JOINTOKEN#jt_forged", "tokenId": "jt_forged"}))
    refused(function, lambda: dynamo.transact([dynamo.Write("Delete", pk, sk, name="token")]))
    after = token_item(joined["tokenId"])
    assert {k: v for k, v in after.items() if k != "usesRemaining"} == {
        k: v for k, v in before.items() if k != "usesRemaining"
    }
    assert dynamo.get(*tokens_db.token_key("jt_forged")) is None


def test_the_cluster_join_writes_no_token_at_all(joined: dict[str, Any]) -> None:
    # Given a token (a cluster join never uses one: its credential is the cluster key)
    token = tokens_db.JoinTokenRecord.from_item(token_item(joined["tokenId"]))
    # When the cluster join spends a use / Then IAM refuses, and the token is unchanged
    refused(
        "ClusterJoinFunction",
        lambda: dynamo.transact([tokens_db.spend_use(token, now=clock.now())]),
    )
    assert token_item(joined["tokenId"])["usesRemaining"] == token.uses_remaining


def test_only_the_retention_job_may_delete_a_ca_key(joined: dict[str, Any]) -> None:
    # Given the pool CA's key, and every function of the template
    functions = sorted(policies())
    # When each function but the retention job schedules its deletion / Then IAM refuses
    for function in functions:
        if function != "RetentionFunction":
            refused(
                function,
                lambda: aws.client("kms").schedule_key_deletion(KeyId=joined["keyId"], PendingWindowInDays=7),
            )
    state = aws.client("kms").describe_key(KeyId=joined["keyId"])["KeyMetadata"]["KeyState"]
    assert state == "Enabled"


def test_a_lost_first_ca_race_leaves_its_key_to_the_retention_job(joined: dict[str, Any]) -> None:
    # Given a key a join made and could not use (its first-CA transaction lost)
    spare = ca_keys.create_key("ca_spare", "acme", "gpu")
    with iam.acting_as("MachineJoinFunction"):
        ca_keys.schedule_key_deletion(spare)
    # Then the join only recorded it; the retention job, past the grace, schedules its deletion
    kms = aws.client("kms")
    assert kms.describe_key(KeyId=spare)["KeyMetadata"]["KeyState"] == "Enabled"
    clock.advance(expiry.ABANDONED_KEY_GRACE_SECONDS + 1)
    with iam.acting_as("RetentionFunction"):
        assert expiry.delete_abandoned_keys() == 1
    assert kms.describe_key(KeyId=spare)["KeyMetadata"]["KeyState"] == "PendingDeletion"


def test_a_forged_abandoned_key_record_cannot_delete_a_key_in_use(joined: dict[str, Any]) -> None:
    # Given a record naming the pool's active CA key, as a compromised join function could write it
    with iam.acting_as("MachineJoinFunction"):
        ca_retention.abandon_key(joined["keyId"], at=clock.now())
    # When the retention job runs past the grace
    clock.advance(expiry.ABANDONED_KEY_GRACE_SECONDS + 1)
    with iam.acting_as("RetentionFunction"):
        assert expiry.delete_abandoned_keys() == 0
    # Then the key is still enabled (its CA is stored and active), and the record is gone
    assert aws.client("kms").describe_key(KeyId=joined["keyId"])["KeyMetadata"]["KeyState"] == "Enabled"
    assert dynamo.get(*ca_retention.abandoned_key_key(joined["keyId"])) is None
