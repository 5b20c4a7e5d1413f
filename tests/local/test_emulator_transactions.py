"""The emulator keeps DynamoDB's promise for cancelled transactions: nothing written, nothing
streamed, and the stream goes on flowing for the writes that follow."""

from __future__ import annotations

import pytest

from joinplane import aws
from joinplane.dal import dynamo
from joinplane.settings import settings


def stream_records() -> list[dict]:
    table = aws.client("dynamodb").describe_table(TableName=settings().table_name)["Table"]
    streams = aws.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=table["LatestStreamArn"])["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=table["LatestStreamArn"], ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    return streams.get_records(ShardIterator=iterator, Limit=1000)["Records"]


def test_a_cancelled_transaction_streams_nothing_and_later_writes_still_stream(table: str) -> None:
    # Given an item, and a stream iterator opened before anything else happens
    dynamo.put({"pk": "A", "sk": "1", "n": 1})
    table_info = aws.client("dynamodb").describe_table(TableName=table)["Table"]
    streams = aws.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=table_info["LatestStreamArn"])["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=table_info["LatestStreamArn"], ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    # When a transaction writes one item and then fails a condition on another
    with pytest.raises(dynamo.TransactionCanceled):
        dynamo.transact(
            [
                dynamo.Write("Put", item={"pk": "B", "sk": "1"}),
                dynamo.Write("Put", item={"pk": "A", "sk": "1"}, condition="attribute_not_exists(pk)"),
            ]
        )
    # Then nothing was written and nothing streamed
    assert dynamo.get("B", "1") is None
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in stream_records()] == ["A"]
    # And a later write reaches the iterator opened before the cancelled transaction
    dynamo.put({"pk": "C", "sk": "1"})
    seen = []
    for _ in range(3):
        answer = streams.get_records(ShardIterator=iterator, Limit=100)
        seen += [r["dynamodb"]["Keys"]["pk"]["S"] for r in answer["Records"]]
        iterator = answer["NextShardIterator"]
    assert seen == ["A", "C"]
