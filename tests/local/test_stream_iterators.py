"""Stream readers and moto's shard iterators: a reader never loses its place in a shard.

Each `GetRecords` hands out the next iterator; moto keeps every one and AWS expires each
15 minutes after it is issued. A reader whose iterator is gone gets a new one right after
the last record it handled, as an event source mapping does: every record reaches its
handler once, in order, however many other readers poll meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.local import emulator
from ezgh_engine.local.account import ACCOUNT_ID, REGION
from ezgh_engine.local.pollers import Activity, StreamPoller
from ezgh_engine.local.resources import Provisioned


def wait_until(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = clock.monotonic() + timeout
    pause = threading.Event()
    while clock.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        pause.wait(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture()
def running() -> Iterator[list[StreamPoller]]:
    pollers: list[StreamPoller] = []
    yield pollers
    for poller in pollers:
        poller.stop()


def _put(resources: Provisioned, *pks: str) -> None:
    ddb = aws.client("dynamodb")
    for pk in pks:
        ddb.put_item(TableName=resources.tables["runs"], Item={"pk": {"S": pk}, "sk": {"S": "RUN"}})


def _pks(event: dict[str, Any]) -> list[str]:
    return [r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"]]


def _reader(resources: Provisioned, invoke: Any, name: str = "s", **options: Any) -> StreamPoller:
    return StreamPoller(
        name=name,
        stream_arn=resources.stream_arns["runs"],
        invoke=invoke,
        activity=Activity(),
        **options,
    )


def _moto_iterators() -> dict[str, Any]:
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    iterators: dict[str, Any] = dynamodbstreams_backends[ACCOUNT_ID][REGION].shard_iterators
    return iterators


def test_a_reader_keeps_its_place_while_another_reader_polls_hundreds_of_times(
    resources: Provisioned, running: list[StreamPoller]
) -> None:
    """The runs table has two readers (the stream function and observe). While the first
    handled the batch that launched a gather of 1,000 branches, the other polled on every
    write; the emulator kept only the 200 newest iterators of all, so the first reader's
    was dropped, moto answered 500 on its next read, and the reader failed on that same
    iterator without end: the run never ended."""
    other_seen: list[str] = []
    other = _reader(
        resources, lambda e: other_seen.extend(_pks(e)), name="other", idle_wait_seconds=0.001
    )
    seen: list[str] = []

    def invoke(event: dict[str, Any]) -> None:
        seen.extend(_pks(event))
        if seen == ["RUN#1"]:  # the other reader polls hundreds of times meanwhile
            wait_until(lambda: other._polls >= 700, timeout=120)

    reader = _reader(resources, invoke)
    running.extend([reader, other])
    _put(resources, "RUN#1")
    reader.start()
    other.start()
    wait_until(lambda: other._polls >= 700, timeout=120)
    _put(resources, "RUN#2", "RUN#3")
    wait_until(lambda: len(seen) >= 3 and len(other_seen) >= 3)
    wait_until(lambda: reader.idle and other.idle)
    assert seen == other_seen == ["RUN#1", "RUN#2", "RUN#3"]


def test_a_reader_whose_iterator_expired_reads_on_after_its_last_record(
    resources: Provisioned, running: list[StreamPoller]
) -> None:
    """AWS expires an iterator 15 minutes after it is issued (a batch handled that long, a
    laptop asleep); here every iterator moto holds is dropped between two reads. The reader
    gets a new one after the last record it handled: nothing lost, nothing twice."""
    seen: list[str] = []
    batches: list[list[str]] = []
    reader = _reader(resources, lambda e: (batches.append(_pks(e)), seen.extend(_pks(e))))
    running.append(reader)
    _put(resources, "RUN#1", "RUN#2")
    reader.start()
    wait_until(lambda: len(seen) == 2 and reader.idle)
    _moto_iterators().clear()
    _put(resources, "RUN#3")
    wait_until(lambda: len(seen) >= 3 and reader.idle)
    _moto_iterators().clear()
    _put(resources, "RUN#4", "RUN#5")
    wait_until(lambda: len(seen) >= 5 and reader.idle)
    assert seen == ["RUN#1", "RUN#2", "RUN#3", "RUN#4", "RUN#5"]


def test_an_unknown_iterator_is_expired_as_on_aws(resources: Provisioned) -> None:
    """moto answered 500 (its `KeyError`) for an iterator it no longer holds; AWS answers
    `ExpiredIteratorException` (400), the error a reader recovers from."""
    streams = aws.client("dynamodbstreams")
    arn = resources.stream_arns["runs"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    _moto_iterators().pop(iterator)
    with pytest.raises(ClientError) as raised:
        streams.get_records(ShardIterator=iterator)
    assert raised.value.response["Error"]["Code"] == "ExpiredIteratorException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_iterators_stay_bounded_and_one_never_read_is_kept(
    resources: Provisioned, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read hands out a new iterator and moto keeps them all: the emulator drops the
    oldest of those already read, and keeps one never read (a reader's next) however
    many were read after it was issued."""
    monkeypatch.setattr(emulator, "STREAM_ITERATORS_READ_KEPT", 5)
    monkeypatch.setattr(emulator, "STREAM_ITERATORS_KEPT", 50)
    streams = aws.client("dynamodbstreams")
    arn = resources.stream_arns["runs"]
    shard_id = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]

    def oldest() -> str:
        return str(
            streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )

    _put(resources, "RUN#1")
    held, busy = oldest(), oldest()
    for _ in range(30):  # another reader polls
        busy = streams.get_records(ShardIterator=busy)["NextShardIterator"]
    assert len(_moto_iterators()) <= 5 + 2
    assert [
        r["dynamodb"]["Keys"]["pk"]["S"] for r in streams.get_records(ShardIterator=held)["Records"]
    ] == ["RUN#1"]
    for _ in range(60):  # past the bound of all: the oldest go, read or not
        oldest()
    assert len(_moto_iterators()) <= 50


def test_a_successor_resumes_right_after_what_its_predecessor_handled(
    resources: Provisioned, running: list[StreamPoller]
) -> None:
    """`checkpoint()` names, per shard, the last record handled; a reader resumed from it
    reads exactly the records after it, whatever became of the iterators meanwhile."""
    first: list[str] = []
    reader = _reader(resources, lambda e: first.extend(_pks(e)))
    running.append(reader)
    _put(resources, "RUN#1", "RUN#2")
    reader.start()
    wait_until(lambda: len(first) == 2 and reader.idle)
    reader.stop()
    checkpoint = reader.checkpoint()
    _moto_iterators().clear()
    _put(resources, "RUN#3")
    second: list[str] = []
    successor = _reader(resources, lambda e: second.extend(_pks(e)))
    successor.resume_from(checkpoint)
    running.append(successor)
    successor.start()
    wait_until(lambda: second and successor.idle)
    assert (first, second) == (["RUN#1", "RUN#2"], ["RUN#3"])
