"""Each correction of moto (joinplane_local.moto_patches) shows here what it provides, against the
session's embedded moto server: every test below fails when its correction is left out of
`moto_patches.PATCHES`. And a moto other than the one they were written for is refused at start."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import sys
import threading
import tomllib
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from joinplane import aws
from joinplane_local import emulator as embedded
from joinplane_local import moto_patches
from joinplane_local.emulator import Emulator
from tests.support.races import release_together
from tests.support.requirements import ROOT, RUN, pins

# --- the version ----------------------------------------------------------------------------------


def test_the_installed_moto_is_the_one_the_corrections_were_written_for(emulator: Emulator) -> None:
    # Given the session's emulator, started with the corrections applied
    # Then moto is the version they were written for, pinned as such for make run and for the
    # local runtime's package, and every correction is in place
    local = tomllib.loads((ROOT / "local" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert importlib.metadata.version("moto") == moto_patches.MOTO_VERSION
    assert pins(RUN)["moto"] == [moto_patches.MOTO_VERSION]
    assert f"moto=={moto_patches.MOTO_VERSION}" in local
    assert moto_patches.applied() == tuple(moto_patches.PATCHES)


def test_another_moto_is_refused_with_what_to_do() -> None:
    # Given a moto version other than the one the corrections were written for
    # When the runtime checks it at start / Then it refuses, naming both versions, every correction
    # that could no longer hold, and how to upgrade
    with pytest.raises(moto_patches.MotoVersionMismatch) as refused:
        moto_patches.check_moto_version("5.3.0")
    message = str(refused.value)
    assert "moto 5.3.0 is installed" in message
    assert f"moto=={moto_patches.MOTO_VERSION}" in message
    assert all(name in message for name in moto_patches.PATCHES)
    assert "tests/local/test_moto_patches.py" in message


def test_the_embedded_emulator_does_not_start_on_a_moto_the_corrections_were_not_written_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given corrections written for a moto other than the installed one
    monkeypatch.setattr(moto_patches, "MOTO_VERSION", "5.2.4")
    # When the embedded emulator starts / Then it refuses before serving anything
    with pytest.raises(moto_patches.MotoVersionMismatch, match=r"moto 5\.2\.5 is installed"):
        embedded.start()


def test_every_correction_has_its_self_test_here() -> None:
    # Given the corrections moto_patches applies, Then each has a test of this module named after it
    tests = [name for name in vars(sys.modules[__name__]) if name.startswith("test_")]
    assert [p for p in moto_patches.PATCHES if not any(t.startswith(f"test_{p}_") for t in tests)] == []


# --- request_atomicity ----------------------------------------------------------------------------


@pytest.fixture
def stream_table(emulator: Emulator) -> Iterator[str]:
    """A table of its own with a stream, made directly in moto (the template's takes a second)."""
    client = aws.client("dynamodb")
    name = f"jp-moto-{uuid.uuid4().hex[:10]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    yield name
    client.delete_table(TableName=name)


@pytest.fixture
def condition_held_open(stream_table: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Barrier]:
    """moto's put_item reads the current item, then evaluates the condition, then writes. Each put
    on this test's table waits, right after that read, for the other to reach the same point (at
    most 0.3 s): whatever interleaving moto's code allows, this one happens."""
    from moto.dynamodb.models.table import Table

    barrier = threading.Barrier(2, timeout=0.3)
    original = Table.get_item

    def get_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        current = original(self, *args, **kwargs)
        if self.name == stream_table:
            # Broken: the other put could not get here while this one was inside; nothing to wait for.
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
        return current

    monkeypatch.setattr(Table, "get_item", get_item)
    yield barrier


def test_request_atomicity_one_of_two_conditional_puts_of_a_new_item_wins(
    stream_table: str, condition_held_open: threading.Barrier
) -> None:
    # Given two puts of the same new item, each on the condition that it does not exist yet, with
    # moto's read of the current item held open until the other put has read it too
    client = aws.client("dynamodb")

    def put(index: int) -> str:
        client.put_item(
            TableName=stream_table,
            Item={"pk": {"S": "RACE"}, "sk": {"S": "1"}, "by": {"S": str(index)}},
            ConditionExpression="attribute_not_exists(pk)",
        )
        return "won"

    # When both are released together
    results = release_together(put, 2, catch=ClientError)

    # Then exactly one wins and the other is refused by its condition, as DynamoDB does: each
    # request applies to the item atomically (without the lock, both read "absent" and both write)
    assert results.count("won") == 1, results
    (lost,) = [r for r in results if r != "won"]
    assert lost.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert condition_held_open.broken  # the second put could not read while the first was inside


# --- transaction_rollback -------------------------------------------------------------------------


def _keys(records: list[dict[str, Any]]) -> list[str]:
    return [r["dynamodb"]["Keys"]["pk"]["S"] for r in records]


def test_transaction_rollback_writes_and_streams_nothing_and_the_stream_flows_on(stream_table: str) -> None:
    # Given two items, and a stream iterator opened before anything else happens
    client, streams = aws.client("dynamodb"), aws.client("dynamodbstreams")

    def key(pk: str) -> dict[str, Any]:
        return {"pk": {"S": pk}, "sk": {"S": "1"}}

    for pk in ("A", "B"):
        client.put_item(TableName=stream_table, Item={**key(pk), "n": {"N": "1"}})
    arn = client.describe_table(TableName=stream_table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]

    # When a transaction updates the first, writes a new one, and then fails a condition on the second
    with pytest.raises(ClientError, match="TransactionCanceled"):
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": stream_table,
                        "Key": key("A"),
                        "UpdateExpression": "SET n = :two",
                        "ExpressionAttributeValues": {":two": {"N": "2"}},
                    }
                },
                {"Put": {"TableName": stream_table, "Item": key("C")}},
                {
                    "ConditionCheck": {
                        "TableName": stream_table,
                        "Key": key("B"),
                        "ConditionExpression": "n = :zero",
                        "ExpressionAttributeValues": {":zero": {"N": "0"}},
                    }
                },
            ]
        )

    # Then nothing was written: the first is as it was, the new one absent
    assert client.get_item(TableName=stream_table, Key=key("A"))["Item"]["n"] == {"N": "1"}
    assert "Item" not in client.get_item(TableName=stream_table, Key=key("C"))
    # And a later write reaches the iterator opened before the cancelled transaction, after the
    # writes before it and nothing of the transaction (moto alone: the transaction's records, then
    # silence, its rollback having swapped in a copy of the table with a shard of its own)
    client.put_item(TableName=stream_table, Item=key("D"))
    seen: list[str] = []
    for _ in range(3):
        answer = streams.get_records(ShardIterator=iterator, Limit=100)
        seen += _keys(answer["Records"])
        iterator = answer["NextShardIterator"]
    assert seen == ["A", "B", "D"]


# --- stream_iterators -----------------------------------------------------------------------------

# A region no other test uses: its streams backend, and so its shard iterators, are this test's alone.
REGION = "ap-southeast-4"


def test_stream_iterators_are_bounded_and_the_newest_still_reads(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    # Given a table with a stream, a bound of 3 iterators, and 6 iterators taken, as a poller takes
    # a new one on each read
    monkeypatch.setattr(moto_patches, "MAX_SHARD_ITERATORS", 3)
    dynamodb, streams = (
        boto3.client(service, region_name=REGION, endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        for service in ("dynamodb", "dynamodbstreams")
    )
    name = f"jp-iterators-{os.getpid()}"
    arn = dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]["LatestStreamArn"]
    try:
        dynamodb.put_item(TableName=name, Item={"pk": {"S": "A"}})
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        taken = [
            streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
                "ShardIterator"
            ]
            for _ in range(6)
        ]

        # When the newest reads
        answer = streams.get_records(ShardIterator=taken[-1], Limit=10)

        # Then it reads the stream, and moto keeps no more iterators than the bound (without the
        # correction it keeps every one it ever issued)
        assert _keys(answer["Records"]) == ["A"]
        kept = dynamodbstreams_backends[DEFAULT_ACCOUNT_ID][REGION].shard_iterators
        assert len(kept) <= 3
        streams.get_records(ShardIterator=answer["NextShardIterator"], Limit=10)
    finally:
        dynamodb.delete_table(TableName=name)


# --- kms_message_type -----------------------------------------------------------------------------


def test_kms_message_type_a_digest_is_signed_as_the_hash_it_is_and_raw_is_bounded(emulator: Emulator) -> None:
    # Given a P-256 signing key, as the pools' CAs use
    client = aws.client("kms")
    key_id = client.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
    public_key = serialization.load_der_public_key(bytes(client.get_public_key(KeyId=key_id)["PublicKey"]))
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    message = b"x" * (moto_patches.KMS_MAX_RAW_MESSAGE + 1)

    # When the SHA-256 of a message is signed as a DIGEST
    digest = hashlib.sha256(message).digest()
    signed = client.sign(KeyId=key_id, Message=digest, MessageType="DIGEST", SigningAlgorithm="ECDSA_SHA_256")

    # Then the signature is the message's, as KMS makes it (moto alone hashes the digest again)
    public_key.verify(bytes(signed["Signature"]), message, ec.ECDSA(hashes.SHA256()))
    # And the message itself, one byte over KMS's limit for RAW, is refused as KMS refuses it
    with pytest.raises(ClientError, match=str(moto_patches.KMS_MAX_RAW_MESSAGE)):
        client.sign(KeyId=key_id, Message=message, MessageType="RAW", SigningAlgorithm="ECDSA_SHA_256")


# --- kms_sign_quota -------------------------------------------------------------------------------


def test_kms_sign_quota_signs_up_to_the_quota_then_throttles_as_kms_does(emulator: Emulator) -> None:
    # Given a P-256 key, a client that does not retry, and a quota of 2 Sign calls a minute
    client = boto3.client(
        "kms",
        endpoint_url=emulator.endpoint_url,
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )
    key_id = client.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]

    def sign() -> dict[str, Any]:
        return client.sign(KeyId=key_id, Message=b"m", MessageType="RAW", SigningAlgorithm="ECDSA_SHA_256")

    # (counted over a minute, so that a slow machine cannot spread the three calls over two windows)
    moto_patches.kms_sign_quota(2, window=60.0)
    try:
        # When three are asked at once, Then two are signed and the third is throttled as KMS throttles
        assert [bool(sign()["Signature"]) for _ in range(2)] == [True, True]
        with pytest.raises(ClientError) as throttled:
            sign()
        assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
        assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    finally:
        moto_patches.kms_sign_quota(None)
    # And without a quota, Sign answers again at once
    assert sign()["Signature"]
