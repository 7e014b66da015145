"""The emulator's journal: torn tails, and what a replay must give back exactly."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local import persistence
from ezgh_engine.local.account import ACCOUNT_ID, REGION
from ezgh_engine.local.emulator import Emulator
from ezgh_engine.local.persistence import Journal, read_records


@pytest.fixture(autouse=True)
def _restarts_replay() -> Iterator[None]:
    """Each restart here replays the journal, as after a crash: a stop writes no image of
    the state (tests/local/test_image.py tests the image a clean stop writes). A patch of
    its own: the tests' `monkeypatch.undo()` leaves it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Emulator, "_save_image", lambda self, journaling: None)
        yield


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


def test_damage_before_the_last_record_is_set_aside_not_thrown_away(tmp_path: Path) -> None:
    """A bad record with whole records after it is what a crash of the machine leaves in the
    part written since the last group commit's sync (none of it answered), or disk damage:
    the journal starts from the records before it, and the bytes from it on are kept beside
    the journal (not cut off for good); a zero-filled tail (a crash that extended the file
    but not its data) is a torn tail, cut off as before."""
    path = tmp_path / "journal.log"
    journal = Journal(path, sync=False)
    journal.open()
    for n in range(3):
        journal.append({"t": "x", "n": n})
    journal.close()
    whole = path.read_bytes()
    first = len(whole) // 3  # the three records have the same size
    data = bytearray(whole)
    data[first + _HEADER_SIZE + 3] ^= 0xFF  # inside the second record: its CRC no longer matches
    path.write_bytes(bytes(data))
    assert [r["n"] for r in Journal(path, sync=False).open()] == [0]
    assert path.read_bytes() == whole[:first]
    assert (tmp_path / f"journal.log.damaged-{first}").read_bytes() == bytes(data[first:])
    path.write_bytes(whole + bytes(64))
    assert [r["n"] for r in Journal(path, sync=False).open()] == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journal.log",
        f"journal.log.damaged-{first}",
    ]


def test_a_record_of_an_unknown_kind_refuses_the_replay(tmp_path: Path) -> None:
    """A journal written by another version of ezgh (a kind of record this one does not
    know) would replay as a part of its state: refuse, naming it."""
    journal = Journal(tmp_path / "journal.log", sync=False)
    journal.open()
    journal.append({"t": "from-the-future", "n": 0})
    journal.close()
    emulator = Emulator(state_dir=tmp_path)
    with pytest.raises(RuntimeError, match="unknown kind 'from-the-future'"):
        emulator.start()
    emulator.stop()


_HEADER_SIZE = struct.calcsize("<II")


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


def test_a_replay_keeps_s3_keys_with_escapes_in_them(tmp_path: Path) -> None:
    """A large step output's key has its step ID quoted in it (`steps/blob%231/...`): the
    journal must replay the key moto stored, not a key unquoted once more (`blob#1`), or
    the run's step result is gone after a restart."""
    keys = ["run/steps/blob%231/v/output", "run/steps/caf\u00e9 +x/output"]
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        s3 = aws.client("s3")
        s3.create_bucket(Bucket="bucket-k")
        for key in keys:
            s3.put_object(Bucket="bucket-k", Key=key, Body=key.encode())
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        s3 = aws.client("s3")
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="bucket-k").get("Contents", [])]
        assert sorted(listed) == sorted(keys)
        for key in keys:
            assert s3.get_object(Bucket="bucket-k", Key=key)["Body"].read() == key.encode()
    finally:
        second.stop()


# --- compaction (the journal folded into a snapshot) and dead-letter moves ---------------------


def _build_state() -> dict[str, str]:
    """A bit of every kind of state a snapshot must keep; returns the queue URLs."""
    ddb, sqs, s3 = aws.client("dynamodb"), aws.client("sqs"), aws.client("s3")
    ddb.create_table(
        TableName="t",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "g", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    ddb.update_time_to_live(
        TableName="t", TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    for n in range(30):  # more than one BatchWriteItem's worth
        item = {"pk": {"S": f"p{n % 3}"}, "sk": {"S": f"s{n}"}, "g": {"S": "x"}}
        item["blob"] = {"B": bytes([n, 0, 255])}
        item["doc"] = {"M": {"n": {"N": str(n)}, "l": {"L": [{"S": "a"}, {"BOOL": True}]}}}
        ddb.put_item(TableName="t", Item=item)
    ddb.delete_item(TableName="t", Key={"pk": {"S": "p0"}, "sk": {"S": "s0"}})
    dlq = sqs.create_queue(QueueName="work-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "3"})
    work = sqs.create_queue(
        QueueName="work", Attributes={"VisibilityTimeout": "7", "RedrivePolicy": redrive}
    )["QueueUrl"]
    fifo = sqs.create_queue(
        QueueName="ordered.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    attributes = {"orderKey": {"DataType": "String", "StringValue": "order:1"}}
    sqs.send_message(QueueUrl=work, MessageBody="now", MessageAttributes=attributes)
    sqs.send_message(QueueUrl=work, MessageBody="later", DelaySeconds=600)
    sqs.send_message(QueueUrl=fifo, MessageBody="first", MessageGroupId="g")
    s3.create_bucket(Bucket="bucket-c")
    s3.put_object(Bucket="bucket-c", Key="dir/big", Body=bytes(range(256)) * 400)
    s3.put_object(Bucket="bucket-c", Key="small", Body=b"{}", ContentType="application/json")
    scheduler = aws.client("scheduler")
    scheduler.create_schedule_group(Name="g")
    scheduler.create_schedule(
        Name="s",
        GroupName="g",
        ScheduleExpression="at(2030-01-01T00:00:00)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": dlq_arn, "RoleArn": "arn:aws:iam::1:role/r", "Input": '{"a": 1}'},
    )
    return {"work": work, "dlq": dlq, "fifo": fifo}


def _stream(start: str = "TRIM_HORIZON", after: str | None = None) -> list[dict[str, Any]]:
    """Table t's stream records (Keys and sequence number) from `start`."""
    ddb, streams = aws.client("dynamodb"), aws.client("dynamodbstreams")
    arn = ddb.describe_table(TableName="t")["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    where: dict[str, Any] = {"ShardIteratorType": start}
    if after is not None:
        where["SequenceNumber"] = after
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, **where)["ShardIterator"]
    records = streams.get_records(ShardIterator=iterator, Limit=1000)["Records"]
    return [
        {
            "seq": r["dynamodb"]["SequenceNumber"],
            "name": r["eventName"],
            "keys": r["dynamodb"]["Keys"],
        }
        for r in records
    ]


def _state(urls: dict[str, str]) -> dict[str, Any]:
    """What must come back exactly: items, table settings, queues and their messages (IDs,
    bodies, delays, attributes), objects, schedules."""
    from moto.sqs.models import sqs_backends

    ddb, s3, scheduler = aws.client("dynamodb"), aws.client("s3"), aws.client("scheduler")
    table = ddb.describe_table(TableName="t")["Table"]
    items = sorted(ddb.scan(TableName="t")["Items"], key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
    queues = {}
    for name in ("work", "work-dlq", "ordered.fifo"):
        queue = sqs_backends[ACCOUNT_ID][REGION].queues[name]
        attrs = aws.client("sqs").get_queue_attributes(
            QueueUrl=urls["fifo" if name.endswith("fifo") else name.replace("work-", "")]
            if name != "work"
            else urls["work"],
            AttributeNames=["VisibilityTimeout", "RedrivePolicy", "FifoQueue"],
        )["Attributes"]
        messages = [
            (m.id, m.body, m.delayed_until, m.group_id, m.message_attributes, m.sent_timestamp)
            for m in queue._messages
        ]
        queues[name] = (attrs, messages)
    objects = {
        o["Key"]: s3.get_object(Bucket="bucket-c", Key=o["Key"])["Body"].read()
        for o in s3.list_objects_v2(Bucket="bucket-c")["Contents"]
    }
    small = s3.head_object(Bucket="bucket-c", Key="small")["ContentType"]
    schedule = scheduler.get_schedule(Name="s", GroupName="g")
    return {
        "items": items,
        "keys": table["KeySchema"],
        "indexes": [i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])],
        "ttl": ddb.describe_time_to_live(TableName="t")["TimeToLiveDescription"],
        "queues": queues,
        "objects": objects,
        "small": small,
        "schedule": (schedule["ScheduleExpression"], schedule["State"], schedule["Target"]),
    }


def _checkpoint(emulator: Emulator, seq: str) -> None:
    """What the runtime journals when a stream reader's handler acknowledged up to `seq`."""
    assert emulator.journaling is not None
    shard = "shardId-00000001541626099285-f35f62ef"
    emulator.journaling.note(
        {"t": "checkpoint", "poller": "stream:t", "shard": shard, "seq": seq, "table": "t"}
    )


def test_a_compaction_keeps_the_state_and_the_stream_goes_on(tmp_path: Path) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
        stream = _stream()
        _checkpoint(first, stream[20]["seq"])  # a reader acknowledged the first 21 records
        before = _state(urls)
        assert first.journaling is not None
        journaled = first.journaling.journal.size
        first.journaling.compact()
        assert first.journaling.journal.size < 100 < journaled  # just the base record
        assert _state(urls) == before  # compaction changes nothing live
        aws.client("dynamodb").put_item(
            TableName="t", Item={"pk": {"S": "after"}, "sk": {"S": "x"}, "g": {"S": "y"}}
        )
        live_next = _stream()[-1]
    finally:
        first.stop()
    assert (tmp_path / "snapshot.log").exists()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.restored.refused == 0
        after = _state(urls)
        new_item = [i for i in after["items"] if i["pk"]["S"] == "after"]
        after["items"] = [i for i in after["items"] if i["pk"]["S"] != "after"]
        assert after == before and len(new_item) == 1
        # The reader resumes after its checkpoint and reads the same records with the same
        # numbers; the acknowledged ones are gone from the snapshot (as AWS trims a stream).
        assert _stream("AFTER_SEQUENCE_NUMBER", stream[20]["seq"]) == [*stream[21:], live_next]
        assert _stream()[0] == stream[21]
        # A write after the restart is numbered on from there.
        aws.client("dynamodb").put_item(
            TableName="t", Item={"pk": {"S": "later"}, "sk": {"S": "x"}, "g": {"S": "y"}}
        )
        assert int(_stream()[-1]["seq"]) == int(live_next["seq"]) + 1
        shard = "shardId-00000001541626099285-f35f62ef"
        assert second.restored.checkpoints == {"stream:t": {shard: stream[20]["seq"]}}
    finally:
        second.stop()


class _Crash(Exception):
    """The process dies here."""


@pytest.mark.parametrize("at", ["writing the snapshot", "after the rename", "after the reset"])
def test_a_crash_at_any_point_of_a_compaction_restores_the_same_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
        assert first.journaling is not None
        first.journaling.compact()  # a first snapshot, and more in the journal after it
        aws.client("dynamodb").put_item(
            TableName="t", Item={"pk": {"S": "p9"}, "sk": {"S": "s9"}, "g": {"S": "x"}}
        )
        aws.client("sqs").send_message(QueueUrl=urls["work"], MessageBody="after")
        before, stream = _state(urls), _stream()
        journal = first.journaling.journal
        if at == "writing the snapshot":
            real = persistence._frame
            written = iter(range(10_000))

            def torn(record: dict[str, Any]) -> bytes:
                if next(written) == 5:
                    raise _Crash
                return real(record)

            monkeypatch.setattr(persistence, "_frame", torn)
        elif at == "after the rename":
            monkeypatch.setattr(persistence.private_files, "fsync_directory", _raise)
        else:
            real_append = journal.append

            def append(record: dict[str, Any], **kwargs: Any) -> None:
                if record.get("t") == "base":
                    raise _Crash
                real_append(record, **kwargs)

            monkeypatch.setattr(journal, "append", append)
        with pytest.raises(_Crash):
            first.journaling.compact()
        monkeypatch.undo()
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.restored.refused == 0
        assert _state(urls) == before
        assert _stream() == stream
        assert not (tmp_path / ".snapshot.log.tmp").exists()
    finally:
        second.stop()


def _raise(*args: Any) -> None:
    raise _Crash


def test_the_journal_compacts_itself_past_its_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(persistence.ENV_COMPACT_BYTES, "20000")
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        _table()
        ddb = aws.client("dynamodb")
        for n in range(60):
            ddb.put_item(TableName="t", Item={"pk": {"S": f"k{n}"}, "v": {"S": "x" * 500}})
        assert first.journaling is not None and first.journaling.compactions >= 1
        assert first.journaling.journal.size <= 20000
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert len(aws.client("dynamodb").scan(TableName="t")["Items"]) == 60
    finally:
        second.stop()


def test_a_restart_after_a_dead_letter_move_keeps_the_message_in_the_dlq(tmp_path: Path) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        sqs = aws.client("sqs")
        dlq = sqs.create_queue(QueueName="q-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})
        url = sqs.create_queue(QueueName="q", Attributes={"RedrivePolicy": redrive})["QueueUrl"]
        sent = sqs.send_message(QueueUrl=url, MessageBody="poison")["MessageId"]
        assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]  # count 1
        assert "Messages" not in sqs.receive_message(QueueUrl=url)  # moved to the DLQ
        assert queue_ids("q-dlq") == [sent] and queue_ids("q") == []
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert queue_ids("q-dlq") == [sent] and queue_ids("q") == []
        assert second.journaling is not None
        second.journaling.compact()  # and a snapshot keeps it there too
    finally:
        second.stop()
    third = Emulator(state_dir=tmp_path)
    third.start()
    try:
        assert queue_ids("q-dlq") == [sent] and queue_ids("q") == []
    finally:
        third.stop()


def queue_ids(name: str) -> list[str]:
    from moto.sqs.models import sqs_backends

    return [m.id for m in sqs_backends[ACCOUNT_ID][REGION].queues[name]._messages]


def test_a_recurring_schedule_older_than_five_minutes_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto refuses to create a cron schedule whose StartDate is over 5 minutes old: the
    replay of one created a while before the restart must not be refused."""
    from moto.scheduler import models

    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        scheduler = aws.client("scheduler")
        scheduler.create_schedule_group(Name="g")
        scheduler.create_schedule(
            Name="c",
            GroupName="g",
            ScheduleExpression="cron(0 * * * ? *)",
            StartDate=models.utcnow(),
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": "arn:aws:sqs:us-east-1:123456789012:q",
                "RoleArn": "arn:aws:iam::1:role/r",
            },
        )
    finally:
        first.stop()
    later = models.utcnow() + timedelta(minutes=10)
    monkeypatch.setattr(models, "utcnow", lambda: later)  # the restart is 10 minutes later
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.restored.refused == 0
        assert aws.client("scheduler").get_schedule(Name="c", GroupName="g")["State"] == "ENABLED"
    finally:
        second.stop()


def test_provisioning_a_restored_state_keeps_the_timers_schedules(tmp_path: Path) -> None:
    """`ezgh dev` provisions its resources on every start; on a restored state that must keep
    the timers' schedule group as it is (moto's `CreateScheduleGroup` replaces a group that
    exists, and its schedules with it: every long sleep's and year limit's timer was lost)."""
    from ezgh_engine.local.resources import SCHEDULER_GROUP, provision

    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        provision(api_url="http://127.0.0.1:1", token_secret="test-secret")
        aws.client("scheduler").create_schedule(
            Name="year-limit",
            GroupName=SCHEDULER_GROUP,
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
        provision(api_url="http://127.0.0.1:1", token_secret="test-secret")
        listed = aws.client("scheduler").list_schedules(GroupName=SCHEDULER_GROUP)["Schedules"]
        assert [s["Name"] for s in listed] == ["year-limit"]
    finally:
        second.stop()


def test_a_damaged_state_json_refuses_instead_of_starting_another_project(tmp_path: Path) -> None:
    """state.json holds the admin key's plaintext (the registry keeps only its hash) and the
    served apps' signing keys, and is written atomically: a file there that does not parse
    is damage. Read as empty, the start made a new organization, project and key, hid every
    kept run behind them and overwrote the old key for good. A missing one (a first start
    that died before writing it) still starts."""
    state = persistence.DevState(tmp_path)
    assert state.load() == {}
    state.save(apiKey="k", orgId="o")
    assert persistence.DevState(tmp_path).load() == {"apiKey": "k", "orgId": "o"}
    for damaged in ('{"apiKey": "k", "org', "[]", ""):
        (tmp_path / persistence.STATE_NAME).write_text(damaged)
        with pytest.raises(RuntimeError, match=r"state.json is damaged"):
            persistence.DevState(tmp_path).load()
        assert (tmp_path / persistence.STATE_NAME).read_text() == damaged
