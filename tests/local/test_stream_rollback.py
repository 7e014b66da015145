"""Regression (found by the fault suite): a failed transaction must not cut the
stream readers off the table.

moto rolls a cancelled `TransactWriteItems` back by putting a deep copy of the table in place,
stream shard included; every iterator handed out before kept reading the old shard, which no
write reaches, so the local stream poller saw nothing more and runs stalled (invocations never
sent). `emulator.lighten_dynamodb` rolls back in place, keeping the live shard.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from ezgh_engine.adapters import aws

from tests.local.streams import pks, table_with_stream


def test_a_cancelled_transaction_leaves_the_stream_readable_and_writes_no_record(emulator):
    emulator.reset()
    arn = table_with_stream("rollback")
    ddb, streams = aws.client("dynamodb"), aws.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    ddb.put_item(TableName="rollback", Item={"pk": {"S": "a"}})
    answer = streams.get_records(ShardIterator=iterator)
    assert pks(answer["Records"]) == ["a"]
    iterator = answer["NextShardIterator"]

    # The first action succeeds inside moto, the second fails: the transaction is cancelled.
    with pytest.raises(ClientError) as raised:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "rollback", "Item": {"pk": {"S": "partial"}}}},
                {
                    "Put": {
                        "TableName": "rollback",
                        "Item": {"pk": {"S": "a"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    ddb.put_item(TableName="rollback", Item={"pk": {"S": "b"}})

    # The reader that was already following the stream sees the next write, and nothing of
    # the cancelled transaction.
    assert pks(streams.get_records(ShardIterator=iterator)["Records"]) == ["b"]
    assert "Item" not in ddb.get_item(TableName="rollback", Key={"pk": {"S": "partial"}})
