"""The emulator's journal (issue 15): torn tails, and what a replay must give back exactly."""

from __future__ import annotations

import struct
from pathlib import Path

from ezgh_engine.adapters import aws
from ezgh_engine.local.emulator import Emulator
from ezgh_engine.local.persistence import Journal, read_records


def test_a_torn_tail_is_cut_off_and_appending_goes_on(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.log", sync=False)
    journal.open()
    for n in range(3):
        journal.append({"t": "x", "n": n})
    journal.close()
    whole = (tmp_path / "journal.log").stat().st_size
    with open(tmp_path / "journal.log", "ab") as file:  # a kill -9 mid-write
        file.write(struct.pack("<II", 100, 0) + b'{"t": "x", "n"')
    again = Journal(tmp_path / "journal.log", sync=False)
    assert [r["n"] for r in again.open()] == [0, 1, 2]
    assert (tmp_path / "journal.log").stat().st_size == whole
    again.append({"t": "x", "n": 3})
    again.close()
    assert [r["n"] for r in read_records(tmp_path / "journal.log")[0]] == [0, 1, 2, 3]


def test_a_corrupt_record_ends_the_journal_there(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.log", sync=False)
    journal.open()
    journal.append({"n": 0})
    journal.append({"n": 1})
    journal.close()
    data = bytearray((tmp_path / "journal.log").read_bytes())
    data[-2] ^= 0xFF  # the last record's CRC no longer matches
    (tmp_path / "journal.log").write_bytes(bytes(data))
    assert [r["n"] for r in read_records(tmp_path / "journal.log")[0]] == [0]


def _table() -> None:
    aws.client("dynamodb").create_table(
        TableName="t",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )


def test_a_replay_keeps_items_stream_numbers_and_sqs_message_ids(tmp_path: Path) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        _table()
        ddb, sqs = aws.client("dynamodb"), aws.client("sqs")
        for n in range(3):
            ddb.put_item(TableName="t", Item={"pk": {"S": f"k{n}"}})
        ddb.delete_item(TableName="t", Key={"pk": {"S": "k0"}})
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sent = [sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")["MessageId"] for n in range(3)]
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=600)
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
        held = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]
        arn = ddb.describe_table(TableName="t")["Table"]["LatestStreamArn"]

        def sequence_numbers(stream_arn: str) -> list[str]:
            streams = aws.client("dynamodbstreams")  # this emulator's
            shard = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"][0]
            iterator = streams.get_shard_iterator(
                StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            records = streams.get_records(ShardIterator=iterator)["Records"]
            return [r["dynamodb"]["SequenceNumber"] for r in records]

        before = sequence_numbers(arn)
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.restored.requests > 0 and second.restored.refused == 0
        ddb, sqs = aws.client("dynamodb"), aws.client("sqs")
        keys = sorted(i["pk"]["S"] for i in ddb.scan(TableName="t")["Items"])
        assert keys == ["k1", "k2"]
        arn = ddb.describe_table(TableName="t")["Table"]["LatestStreamArn"]
        assert sequence_numbers(arn) == before and len(before) == 4
        url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
        # The deleted message stays deleted; the one held in flight is visible again at
        # once, with its ID; the delayed one is still delayed.
        visible = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["MessageId"] for m in visible) == sorted(
            m for m in sent if m != got["MessageId"]
        )
        assert held["MessageId"] in {m["MessageId"] for m in visible}
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert counts["ApproximateNumberOfMessagesDelayed"] == "1"
    finally:
        second.stop()


def test_a_replay_keeps_s3_objects_and_schedules(tmp_path: Path) -> None:
    big = bytes(range(256)) * 1200  # ~300 KB, binary: the engine's large payloads
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        s3, scheduler = aws.client("s3"), aws.client("scheduler")
        s3.create_bucket(Bucket="bucket-b")
        s3.put_object(Bucket="bucket-b", Key="small", Body=b"{}")
        s3.put_object(Bucket="bucket-b", Key="big", Body=big)
        s3.put_object(Bucket="bucket-b", Key="gone", Body=b"x")
        s3.delete_object(Bucket="bucket-b", Key="gone")
        scheduler.create_schedule_group(Name="g")
        scheduler.create_schedule(
            Name="s",
            GroupName="g",
            ScheduleExpression="at(2030-01-01T00:00:00)",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": "arn:aws:sqs:us-east-1:123456789012:q",
                "RoleArn": "arn:aws:iam::1:role/r",
            },
        )
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.restored.refused == 0
        s3 = aws.client("s3")
        assert s3.get_object(Bucket="bucket-b", Key="small")["Body"].read() == b"{}"
        assert s3.get_object(Bucket="bucket-b", Key="big")["Body"].read() == big
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="bucket-b").get("Contents", [])]
        assert sorted(keys) == ["big", "small"]
        schedule = aws.client("scheduler").get_schedule(Name="s", GroupName="g")
        assert schedule["ScheduleExpression"] == "at(2030-01-01T00:00:00)"
    finally:
        second.stop()
