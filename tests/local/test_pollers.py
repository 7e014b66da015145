"""SQS and stream pollers against a real moto server, with small fake handlers."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.local import incarnation
from ezgh_engine.local.pollers import Activity, Poller, SqsPoller, StreamPoller
from ezgh_engine.local.resources import Provisioned

from .conftest import make_queue, queue_counts


def wait_until(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = clock.monotonic() + timeout
    pause = threading.Event()
    while clock.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        pause.wait(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture()
def running() -> Iterator[list[Poller]]:
    pollers: list[Poller] = []
    yield pollers
    for poller in pollers:
        poller.stop()


def test_sqs_event_shape_and_delete_on_success(
    resources: Provisioned, running: list[Poller]
) -> None:
    url, arn = resources.queue_urls["invocations"], resources.queue_arns["invocations"]
    events: list[dict[str, Any]] = []
    poller = SqsPoller(
        name="t", queue_url=url, queue_arn=arn, invoke=events.append, activity=Activity()
    )
    running.append(poller)
    poller.start()
    aws.client("sqs").send_message(
        QueueUrl=url,
        MessageBody='{"run":"r1"}',
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "start"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    wait_until(lambda: events)
    record = events[0]["Records"][0]
    assert record["body"] == '{"run":"r1"}'
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == arn
    assert record["awsRegion"] == "us-east-1"
    assert record["messageId"] and record["receiptHandle"] and record["md5OfBody"]
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert "SentTimestamp" in record["attributes"]
    assert record["messageAttributes"]["kind"] == {
        "stringValue": "start",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "String",
    }
    assert (
        record["messageAttributes"]["blob"]["binaryValue"] == base64.b64encode(b"\x00\x01").decode()
    )
    wait_until(lambda: queue_counts(url) == (0, 0, 0))


def test_sqs_batch_item_failures_are_kept_and_redelivered(
    resources: Provisioned, running: list[Poller]
) -> None:
    url, arn = make_queue("partial", visibility=1)
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        failures = []
        with lock:
            for record in event["Records"]:
                count = record["attributes"]["ApproximateReceiveCount"]
                seen.append((record["body"], count))
                if record["body"] == "bad" and count == "1":
                    failures.append({"itemIdentifier": record["messageId"]})
        return {"batchItemFailures": failures}

    sqs = aws.client("sqs")
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "1", "MessageBody": "good"},
            {"Id": "2", "MessageBody": "bad"},
        ],
    )
    poller = SqsPoller(
        name="t", queue_url=url, queue_arn=arn, invoke=invoke, activity=Activity(), batch_size=10
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: ("bad", "2") in seen)
    wait_until(lambda: queue_counts(url) == (0, 0, 0))
    assert sorted(seen) == [("bad", "1"), ("bad", "2"), ("good", "1")]


@pytest.mark.parametrize("bad", [{"itemIdentifier": "not-in-batch"}, {"itemIdentifier": ""}, {}])
def test_sqs_an_invalid_batch_item_failure_fails_the_whole_batch(
    resources: Provisioned, running: list[Poller], bad: dict[str, str]
) -> None:
    """As Lambda: an itemIdentifier that is empty, missing or no message of the batch makes the
    answer a complete failure, so every message of the batch comes back (none is deleted)."""
    url, arn = make_queue("invalid-failure", visibility=1)
    seen: list[tuple[str, str]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        counts = [(r["body"], r["attributes"]["ApproximateReceiveCount"]) for r in event["Records"]]
        seen.extend(counts)
        return {"batchItemFailures": [bad] if all(c == "1" for _, c in counts) else []}

    aws.client("sqs").send_message_batch(
        QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "a"}, {"Id": "2", "MessageBody": "b"}]
    )
    poller = SqsPoller(
        name="t", queue_url=url, queue_arn=arn, invoke=invoke, activity=Activity(), batch_size=10
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: {("a", "2"), ("b", "2")} <= set(seen))
    wait_until(lambda: queue_counts(url) == (0, 0, 0))


def test_sqs_handler_raising_deletes_nothing(resources: Provisioned, running: list[Poller]) -> None:
    url, arn = make_queue("raising", visibility=1)
    counts: list[str] = []

    def invoke(event: dict[str, Any]) -> None:
        counts.append(event["Records"][0]["attributes"]["ApproximateReceiveCount"])
        if len(counts) == 1:
            raise RuntimeError("boom")

    aws.client("sqs").send_message(QueueUrl=url, MessageBody="x")
    poller = SqsPoller(
        name="t", queue_url=url, queue_arn=arn, invoke=invoke, activity=Activity(), batch_size=1
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: len(counts) >= 2)
    assert counts[:2] == ["1", "2"]
    wait_until(lambda: queue_counts(url) == (0, 0, 0))


def test_sqs_concurrent_batches(resources: Provisioned, running: list[Poller]) -> None:
    url, arn = make_queue("parallel", visibility=30)
    release = threading.Event()
    inside: list[str] = []

    def invoke(event: dict[str, Any]) -> None:
        inside.append(event["Records"][0]["body"])
        release.wait(10)

    sqs = aws.client("sqs")
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(i))
    activity = Activity()
    poller = SqsPoller(
        name="t",
        queue_url=url,
        queue_arn=arn,
        invoke=invoke,
        activity=activity,
        batch_size=1,
        max_concurrency=4,
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: len(inside) == 3)  # a slow handler does not block the others
    assert activity.snapshot()[0] == 3
    release.set()
    wait_until(lambda: activity.snapshot()[0] == 0 and queue_counts(url) == (0, 0, 0))


def test_a_stream_reader_whose_engine_died_keeps_its_checkpoint(
    resources: Provisioned, running: list[Poller]
) -> None:
    """`restart_engine` ends the engine's life, kills its environments, then stops its
    stream reader and hands the reader's checkpoint to the new one. A batch the old reader
    was handing on then failed at every retry (the dead engine's environments are gone);
    once the retries ran out before the stop came, the old reader gave the batch up and
    moved its checkpoint past it, and the new reader never read those records: a run's
    owed invocation or a step's timer was never sent. A reader whose life ended now
    neither retries nor moves its checkpoint."""
    calls: list[int] = []

    def invoke(event: dict[str, Any]) -> None:
        calls.append(len(event["Records"]))
        if len(calls) == 1:
            incarnation.bump()  # the engine restarts while this batch is handed on
        raise RuntimeError("the environment died")

    aws.client("dynamodb").put_item(TableName=resources.tables["runs"], Item=_runs_key("RUN#x"))
    poller = StreamPoller(
        name="s",
        stream_arn=resources.stream_arns["runs"],
        invoke=invoke,
        activity=Activity(),
        backoff_seconds=0.01,
        max_attempts=3,
    )
    read_after_death = threading.Event()
    get_records = poller._get_records

    def watched(streams: Any, shard_id: str, iterator: str) -> dict[str, Any]:
        if incarnation.dead():
            read_after_death.set()  # done with the batch: on to its next read (it dies there)
        return get_records(streams, shard_id, iterator)

    poller._get_records = watched  # type: ignore[method-assign]
    running.append(poller)
    poller.start()
    assert read_after_death.wait(10)
    poller.stop()
    unread: list[str] = []
    successor = StreamPoller(
        name="s",
        stream_arn=resources.stream_arns["runs"],
        invoke=lambda e: unread.extend(r["dynamodb"]["Keys"]["pk"]["S"] for r in e["Records"]),
        activity=Activity(),
    )
    successor.resume_from(poller.checkpoint())
    running.append(successor)
    successor.start()
    wait_until(lambda: unread and successor.idle)
    assert calls == [1]
    assert unread == ["RUN#x"]


def _runs_key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "RUN"}}


def test_stream_event_shapes(resources: Provisioned, running: list[Poller]) -> None:
    records: list[dict[str, Any]] = []
    stream_arn = resources.stream_arns["runs"]
    poller = StreamPoller(
        name="s",
        stream_arn=stream_arn,
        invoke=lambda e: records.extend(e["Records"]),
        activity=Activity(),
    )
    running.append(poller)
    poller.start()
    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    ddb.put_item(
        TableName=table, Item={**_runs_key("RUN#1"), "version": {"N": "1"}, "blob": {"B": b"\xff"}}
    )
    ddb.update_item(
        TableName=table,
        Key=_runs_key("RUN#1"),
        UpdateExpression="SET version = :v",
        ExpressionAttributeValues={":v": {"N": "2"}},
    )
    ddb.delete_item(TableName=table, Key=_runs_key("RUN#1"))
    wait_until(lambda: [r["eventName"] for r in records][-3:] == ["INSERT", "MODIFY", "REMOVE"])
    wait_until(lambda: poller.idle)
    insert, modify, remove = records[-3:]
    for record in (insert, modify, remove):
        assert record["eventSource"] == "aws:dynamodb"
        assert record["eventSourceARN"] == stream_arn
        assert record["awsRegion"] == "us-east-1"
        assert record["eventID"]
        assert record["dynamodb"]["Keys"] == _runs_key("RUN#1")
        assert record["dynamodb"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
        assert record["dynamodb"]["SequenceNumber"] and record["dynamodb"]["SizeBytes"] > 0
    assert insert["dynamodb"]["NewImage"]["blob"] == {"B": base64.b64encode(b"\xff").decode()}
    assert "OldImage" not in insert["dynamodb"]
    assert modify["dynamodb"]["OldImage"]["version"] == {"N": "1"}
    assert modify["dynamodb"]["NewImage"]["version"] == {"N": "2"}
    assert "NewImage" not in remove["dynamodb"] and remove["dynamodb"]["OldImage"]


def test_stream_retries_from_the_failed_record(
    resources: Provisioned, running: list[Poller]
) -> None:
    batches: list[list[str]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        pks = [r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"]]
        batches.append(pks)
        if len(batches) == 1 and "RUN#b" in pks:
            failed = event["Records"][pks.index("RUN#b")]["dynamodb"]["SequenceNumber"]
            return {"batchItemFailures": [{"itemIdentifier": failed}]}
        return {"batchItemFailures": []}

    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    for pk in ("RUN#a", "RUN#b", "RUN#c"):
        ddb.put_item(TableName=table, Item=_runs_key(pk))
    poller = StreamPoller(
        name="s",
        stream_arn=resources.stream_arns["runs"],
        invoke=invoke,
        activity=Activity(),
        backoff_seconds=0.01,
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: len(batches) >= 2 and poller.idle)
    assert batches[:2] == [["RUN#a", "RUN#b", "RUN#c"], ["RUN#b", "RUN#c"]]


def test_stream_gives_up_after_bounded_retries(
    resources: Provisioned, running: list[Poller]
) -> None:
    calls: list[int] = []

    def invoke(event: dict[str, Any]) -> None:
        calls.append(len(event["Records"]))
        raise RuntimeError("always")

    aws.client("dynamodb").put_item(TableName=resources.tables["runs"], Item=_runs_key("RUN#x"))
    poller = StreamPoller(
        name="s",
        stream_arn=resources.stream_arns["runs"],
        invoke=invoke,
        activity=Activity(),
        backoff_seconds=0.01,
        max_attempts=3,
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: len(calls) == 3 and poller.idle)
    assert calls == [1, 1, 1]


def test_a_stopped_pollers_wake_up_never_reaches_a_handler(
    resources: Provisioned, running: list[Poller]
) -> None:
    """`stop` ends the long poll with a wake-up message of the poller's own. Left in the
    queue (`ezgh dev`'s state dir keeps it when the process ends before its poll returned),
    it reached the next process's handler, which logged "dropping a message that is none
    of ours" on every restart; a poller now deletes every wake-up it receives, unseen."""
    url, arn = make_queue("wakes", visibility=1)
    dead = SqsPoller(
        name="t1", queue_url=url, queue_arn=arn, invoke=lambda e: None, activity=Activity()
    )
    dead.interrupt()  # as its stop would, the process then gone
    assert queue_counts(url) == (1, 0, 0)
    events: list[dict[str, Any]] = []
    poller = SqsPoller(
        name="t2", queue_url=url, queue_arn=arn, invoke=events.append, activity=Activity()
    )
    running.append(poller)
    poller.start()
    wait_until(lambda: queue_counts(url) == (0, 0, 0))
    aws.client("sqs").send_message(QueueUrl=url, MessageBody="real")
    wait_until(lambda: events)
    assert [r["body"] for e in events for r in e["Records"]] == ["real"]


def test_a_batch_cut_off_by_the_stop_is_no_error(
    resources: Provisioned, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop kills the execution environments with their calls in flight: the batch comes
    back at the next start, as after a crash, said in an info line, not an error with a
    traceback. The same failure while running is an error with its traceback."""
    from ezgh_engine.local.environments import EnvironmentDied

    url, arn = make_queue("cut-off", visibility=1)
    calling, killed = threading.Event(), threading.Event()

    def invoke(event: dict[str, Any]) -> Any:
        calling.set()
        killed.wait(10)
        raise EnvironmentDied("invoker's environment died mid-call")

    aws.client("sqs").send_message(QueueUrl=url, MessageBody="in flight")
    poller = SqsPoller(name="t", queue_url=url, queue_arn=arn, invoke=invoke, activity=Activity())
    # For the whole test, not only around the stop: the poller's thread says it when it
    # gets there, which a loaded machine may make later than the stop's return.
    caplog.set_level("INFO", logger="ezgh.local.pollers")
    poller.start()
    assert calling.wait(10)
    stopping = threading.Thread(target=poller.stop)
    stopping.start()
    wait_until(lambda: poller._stop.is_set())
    killed.set()
    stopping.join(10)
    cut_off = ("INFO", "t: a batch was cut off by the stop; it will be retried", None)

    def lines() -> list[tuple[str, str, Any]]:
        return [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]

    wait_until(lambda: cut_off in lines())
    assert not [line for line in lines() if line[0] == "ERROR"], lines()

    calling.clear()
    running = SqsPoller(name="r", queue_url=url, queue_arn=arn, invoke=invoke, activity=Activity())
    caplog.clear()
    running.start()
    try:
        assert calling.wait(10)
        wait_until(lambda: any(r.levelname == "ERROR" for r in caplog.records))
    finally:
        running.stop()
    error = next(r for r in caplog.records if r.levelname == "ERROR")
    assert error.exc_info is not None  # a failure while running keeps its traceback
