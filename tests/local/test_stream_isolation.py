"""Regression (found by the fault suite: a parent left `waiting` on a child that ended): a
stream reader must not see the records of a transaction before it commits.

moto applies a `TransactWriteItems` action by action, appending each one's stream record,
and rolls back when a later action is refused; `emulator.lighten_dynamodb` then truncates
the shard back. `serialize_dynamodb` locked DynamoDB's requests but not DynamoDB Streams':
a `GetRecords` served in that window (the stream wakeup fires at the first append) answered
the records of the transaction that was about to be cancelled and moved the reader's
iterator past them. moto numbers records by their position in the shard, so the next
committed writes reused those sequence numbers and the reader skipped them: in the fault
suite, a child's run-ended record (so its parent's `invoke` step never ended) or any other.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError
from ezgh_engine.adapters import aws

from tests.local.streams import pks, table_with_stream


def test_a_reader_never_sees_a_transaction_that_is_then_cancelled(emulator, monkeypatch):
    from moto.dynamodb.models.table import StreamShard

    emulator.reset()
    arn = table_with_stream("isolation")
    ddb, streams = aws.client("dynamodb"), aws.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    ddb.put_item(TableName="isolation", Item={"pk": {"S": "a"}})
    answer = streams.get_records(ShardIterator=iterator)
    assert pks(answer["Records"]) == ["a"]
    iterator = answer["NextShardIterator"]

    # The stream poller, woken by the first record of the transaction, reads the shard
    # while moto is still inside the transaction (another server thread).
    read: dict[str, Any] = {}

    def poll() -> None:
        reader = aws.client("dynamodbstreams")
        read["answer"] = reader.get_records(ShardIterator=iterator)

    original = StreamShard.add
    reader = threading.Thread(target=poll, daemon=True)

    def add(shard_: Any, old: Any, new: Any) -> None:
        original(shard_, old, new)
        if not reader.is_alive() and "answer" not in read:
            reader.start()
            reader.join(timeout=1.0)  # done at once unless reads wait for the transaction

    monkeypatch.setattr(StreamShard, "add", add)
    # The first action succeeds inside moto, the second is refused: the transaction is cancelled.
    with pytest.raises(ClientError) as raised:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "isolation", "Item": {"pk": {"S": "cancelled"}}}},
                {
                    "Put": {
                        "TableName": "isolation",
                        "Item": {"pk": {"S": "a"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    monkeypatch.setattr(StreamShard, "add", original)
    reader.join(timeout=10)
    assert "answer" in read
    ddb.put_item(TableName="isolation", Item={"pk": {"S": "b"}})

    # The reader saw nothing of the cancelled transaction, and sees the next write.
    assert pks(read["answer"]["Records"]) == []
    later = streams.get_records(ShardIterator=read["answer"]["NextShardIterator"])
    assert pks(later["Records"]) == ["b"]
