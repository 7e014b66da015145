"""Images taken while running (checkpoints): a start after a crash loads the newest one and
replays only the journal written after it, and ends in exactly the state a replay of the
whole journal gives; an image that is not of a prefix of the journal on disk costs time,
never state."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local import image, persistence
from ezgh_engine.local.emulator import Emulator

from tests.local.test_persistence import _build_state, _checkpoint, _state, _stream

SHARD = "shardId-00000001541626099285-f35f62ef"


class Spy:
    """What each start replayed: records from the journal's beginning (`whole`) or after
    an image (`tails`)."""

    def __init__(self) -> None:
        self.whole: list[int] = []
        self.tails: list[int] = []


@pytest.fixture()
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    seen = Spy()
    real = persistence.replay

    def replay(app: Any, records: Any, into: Any = None) -> persistence.Restored:
        records = list(records)
        (seen.whole if into is None else seen.tails).append(len(records))
        return real(app, records, into)

    monkeypatch.setattr("ezgh_engine.local.emulator.replay", replay)
    yield seen


def _crash(emulator: Emulator) -> None:
    """Stop as a `kill -9` leaves the state dir: no image of the stop."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Emulator, "_save_image", lambda *args: None)
        emulator.stop()


def _started(state_dir: Path) -> Emulator:
    emulator = Emulator(state_dir=state_dir)
    emulator.start()
    return emulator


def _more_writes(urls: dict[str, str], tag: str) -> None:
    """Journaled writes of every kind after a checkpoint (8 records): DynamoDB puts, updates
    (a counter that a second application would show) and deletes, SQS sends and deletes (by
    receipt handle: replayed by message ID), S3 puts, a Scheduler schedule."""
    ddb, sqs, s3 = aws.client("dynamodb"), aws.client("sqs"), aws.client("s3")
    ddb.put_item(TableName="t", Item={"pk": {"S": f"n-{tag}"}, "sk": {"S": "x"}, "g": {"S": "y"}})
    ddb.update_item(
        TableName="t",
        Key={"pk": {"S": "p1"}, "sk": {"S": "s1"}},
        UpdateExpression="ADD hits :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    ddb.delete_item(TableName="t", Key={"pk": {"S": "p2"}, "sk": {"S": "s2"}})
    sqs.send_message(QueueUrl=urls["work"], MessageBody=f"sent {tag}")
    sqs.send_message_batch(
        QueueUrl=urls["work"],
        Entries=[{"Id": str(n), "MessageBody": f"batch {tag} {n}"} for n in range(3)],
    )
    received = sqs.receive_message(QueueUrl=urls["work"], MaxNumberOfMessages=2)["Messages"]
    sqs.delete_message(QueueUrl=urls["work"], ReceiptHandle=received[0]["ReceiptHandle"])
    s3.put_object(Bucket="bucket-c", Key=f"after/{tag}", Body=tag.encode() * 100)
    aws.client("scheduler").create_schedule(
        Name=f"s-{tag}",
        GroupName="g",
        ScheduleExpression="rate(5 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": "arn:aws:sqs:us-east-1:1:q", "RoleArn": "arn:aws:iam::1:role/r"},
    )


def _everything(urls: dict[str, str]) -> dict[str, Any]:
    """`_state` and what the extra writes touched: every object, schedule and stream record
    (with its sequence number)."""
    s3, scheduler = aws.client("s3"), aws.client("scheduler")
    objects = {
        o["Key"]: s3.get_object(Bucket="bucket-c", Key=o["Key"])["Body"].read()
        for o in s3.list_objects_v2(Bucket="bucket-c")["Contents"]
    }
    schedules = sorted(s["Name"] for s in scheduler.list_schedules(GroupName="g")["Schedules"])
    return {**_state(urls), "all objects": objects, "schedules": schedules, "stream": _stream()}


def _restored(emulator: Emulator) -> dict[str, Any]:
    """What the start reports to the runtime besides moto's state."""
    restored = emulator.restored
    assert emulator.journaling is not None
    return {
        "requests": restored.requests,
        "refused": restored.refused,
        "checkpoints": restored.checkpoints,
        "mappings": restored.mappings,
        "services": restored.services,
        "remembered": (emulator.journaling.checkpoints, emulator.journaling.mappings),
    }


def _whole_replay_of(state_dir: Path, copy: Path, urls: dict[str, str]) -> dict[str, Any]:
    """The state and report of a start that replays the whole journal (a copy of the state
    dir without its image)."""
    shutil.copytree(state_dir, copy)
    (copy / image.IMAGE_NAME).unlink(missing_ok=True)
    emulator = _started(copy)
    try:
        return {"state": _everything(urls), "restored": _restored(emulator)}
    finally:
        _crash(emulator)


def test_a_crash_after_a_checkpoint_replays_only_the_tail_to_the_same_state(
    tmp_path: Path, spy: Spy
) -> None:
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    try:
        urls = _build_state()
        _checkpoint(first, _stream()[10]["seq"])  # a stream reader acknowledged 11 records
        assert first.checkpoint()
        assert first.journaling is not None
        at_image = first.journaling.journal.size
        _more_writes(urls, "a")
        _checkpoint(first, _stream()[-1]["seq"])
        first.journaling.note({"t": "mappings", "mappings": [{"uuid": "m1", "queue": "work"}]})
        before = _everything(urls)
    finally:
        _crash(first)
    whole = _whole_replay_of(state_dir, tmp_path / "copy", urls)
    second = _started(state_dir)
    try:
        assert spy.whole[0] == 0 and spy.whole[1] > 40 and len(spy.whole) == 2  # (the copy)
        assert spy.tails == [10]  # 8 requests, 2 checkpoints, the mappings
        state = _everything(urls)
        assert state == before == whole["state"]
        assert _restored(second) == whole["restored"]
        assert second.restored.checkpoints == {"stream:t": {SHARD: before["stream"][-1]["seq"]}}
        assert second.restored.mappings == [{"uuid": "m1", "queue": "work"}]
        assert second.restored.services == {"dynamodb", "sqs", "s3", "scheduler"}
        hits = [i for i in state["items"] if i["pk"]["S"] == "p1" and i["sk"]["S"] == "s1"]
        assert hits[0]["hits"] == {"N": "1"}  # applied once: by the tail, not by the image
        # Writes go on after the tail, numbered on from the stream's last record.
        aws.client("dynamodb").put_item(
            TableName="t", Item={"pk": {"S": "later"}, "sk": {"S": "x"}, "g": {"S": "y"}}
        )
        assert int(_stream()[-1]["seq"]) == int(before["stream"][-1]["seq"]) + 1
        assert second.journaling is not None
        assert second.journaling.imaged_at == at_image  # the next image is due from there
    finally:
        second.stop()


def test_a_replay_through_moto_s_handlers_makes_what_its_whole_app_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replayed DynamoDB or SQS request is handed to moto's handler as moto's Flask view
    hands it, without Flask around it (`persistence._apply`); through the whole app
    instead, the same journal replays to the same state and report, the same as before
    the crash."""
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    try:
        urls = _build_state()
        _more_writes(urls, "a")
        _checkpoint(first, _stream()[-1]["seq"])
        before = _everything(urls)
    finally:
        _crash(first)
    direct = _whole_replay_of(state_dir, tmp_path / "direct", urls)
    monkeypatch.setattr(persistence, "_DIRECT", ())
    through_app = _whole_replay_of(state_dir, tmp_path / "app", urls)
    assert direct == through_app
    assert direct["state"] == before
    assert direct["restored"]["refused"] == 0


def test_a_checkpoint_taken_while_requests_run_is_of_exactly_its_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers, receivers (some long-polling) and deleters run while images are taken: no
    request works on moto while one is pickled, and the start after the crash, from the
    last image and its tail, has every counter exactly as often as it was incremented and
    the state a whole replay gives."""
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    pickling = threading.Event()
    overlapped: list[str] = []  # requests moto worked on while an image was pickled
    capture = image.capture

    def watched_capture(*args: Any) -> bytes:
        pickling.set()
        try:
            return capture(*args)
        finally:
            pickling.clear()

    monkeypatch.setattr(image, "capture", watched_capture)
    assert first.journaling is not None
    moto = first.journaling.app

    def watched_moto(environ: dict[str, Any], start_response: Any) -> Any:
        if pickling.is_set():
            overlapped.append(str(environ.get("HTTP_X_AMZ_TARGET")))
        return moto(environ, start_response)

    first.journaling.app = watched_moto
    stop = threading.Event()
    failures: list[BaseException] = []
    increments = [0] * 3

    def writer(n: int) -> None:
        ddb, sqs = aws.client("dynamodb"), aws.client("sqs")
        while not stop.is_set():
            ddb.update_item(
                TableName="t",
                Key={"pk": {"S": "counter"}, "sk": {"S": str(n)}},
                UpdateExpression="ADD n :one SET g = :g",
                ExpressionAttributeValues={":one": {"N": "1"}, ":g": {"S": "c"}},
            )
            increments[n] += 1
            sqs.send_message(QueueUrl=urls["work"], MessageBody=f"w{n}-{increments[n]}")

    def receiver(wait: int) -> None:
        sqs = aws.client("sqs")
        while not stop.is_set():
            answer = sqs.receive_message(
                QueueUrl=urls["work"], MaxNumberOfMessages=2, WaitTimeSeconds=wait
            )
            for message in answer.get("Messages", [])[:1]:
                sqs.delete_message(QueueUrl=urls["work"], ReceiptHandle=message["ReceiptHandle"])

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as error:  # reported below
                failures.append(error)

        return run

    try:
        urls = _build_state()
        works = [lambda n=n: writer(n) for n in range(3)] + [
            lambda: receiver(0),
            lambda: receiver(1),
        ]
        threads = [threading.Thread(target=guarded(w)) for w in works]
        for thread in threads:
            thread.start()
        try:
            taken = [first.checkpoint() for _ in range(5)]
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert not failures and not overlapped
        assert taken == [True] * 5 and first.checkpoints_taken == 5
        assert first.journaling is not None
        assert first.journaling.journal.size > first.journaling.imaged_at  # a tail to replay
        before = _everything(urls)
    finally:
        _crash(first)
    whole = _whole_replay_of(state_dir, tmp_path / "copy", urls)
    second = _started(state_dir)
    try:
        state = _everything(urls)
        counters = {i["sk"]["S"]: i["n"]["N"] for i in state["items"] if i["pk"]["S"] == "counter"}
        assert counters == {str(n): str(increments[n]) for n in range(3)}
        assert state == before == whole["state"]
        assert _restored(second) == whole["restored"]
    finally:
        second.stop()


def _image_of_another_journal(tmp_path: Path) -> bytes:
    """An image taken of another state dir's journal (as long as this test's, or longer)."""
    other = _started(tmp_path / "other")
    try:
        _build_state()
        _more_writes({"work": aws.client("sqs").get_queue_url(QueueName="work")["QueueUrl"]}, "o")
        assert other.checkpoint()
    finally:
        _crash(other)
    return (tmp_path / "other" / image.IMAGE_NAME).read_bytes()


@pytest.mark.parametrize(
    "wrong", ["another journal's", "ahead of the journal", "damaged", "another generation's"]
)
def test_an_image_not_of_a_prefix_of_the_journal_is_passed_over(
    tmp_path: Path, spy: Spy, wrong: str
) -> None:
    state_dir = tmp_path / "aws"
    foreign = _image_of_another_journal(tmp_path) if wrong == "another journal's" else b""
    first = _started(state_dir)
    try:
        urls = _build_state()
        assert first.journaling is not None
        if wrong == "another generation's":
            assert first.checkpoint()
            kept = (state_dir / image.IMAGE_NAME).read_bytes()
            first.journaling.compact()  # folds the journal the image is of into a snapshot
            (state_dir / image.IMAGE_NAME).write_bytes(kept)
        _more_writes(urls, "a")
        if wrong in ("ahead of the journal", "damaged"):
            assert first.checkpoint()
        before = _everything(urls)
    finally:
        _crash(first)
    path = state_dir / image.IMAGE_NAME
    if wrong == "another journal's":
        path.write_bytes(foreign)
    elif wrong == "damaged":
        path.write_bytes(path.read_bytes()[:-200])
    elif wrong == "ahead of the journal":  # the journal lost its end (a damaged disk)
        journal = state_dir / persistence.JOURNAL_NAME
        records, _ = persistence.read_records(journal)
        cut = len(journal.read_bytes()) - len(persistence._frame(records[-1]))
        with open(journal, "r+b") as file:
            file.truncate(cut)
    whole = _whole_replay_of(state_dir, tmp_path / "copy", urls)
    second = _started(state_dir)
    try:
        assert spy.tails == [] and spy.whole[-1] == spy.whole[-2] > 0  # as the copy did
        assert _everything(urls) == whole["state"]
        if wrong != "ahead of the journal":
            assert whole["state"] == before
    finally:
        second.stop()


def test_a_torn_record_after_the_image_is_cut_off(tmp_path: Path, spy: Spy) -> None:
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    try:
        urls = _build_state()
        assert first.checkpoint()
        _more_writes(urls, "a")
        before = _everything(urls)
        assert first.journaling is not None
        good = first.journaling.journal.size
    finally:
        _crash(first)
    journal = state_dir / persistence.JOURNAL_NAME
    torn = persistence._frame({"t": "http", "s": "sqs", "a": "SendMessage", "b": ""})[:-5]
    with open(journal, "ab") as file:  # the record being written when the process died
        file.write(torn)
    second = _started(state_dir)
    try:
        assert spy.tails == [8]
        assert _everything(urls) == before
        assert journal.stat().st_size == good
        aws.client("sqs").send_message(QueueUrl=urls["work"], MessageBody="goes on")
    finally:
        _crash(second)
    third = _started(state_dir)  # the same image; the tail now ends with the new send
    try:
        assert spy.tails == [8, 9]
    finally:
        third.stop()


def test_a_compaction_after_a_checkpoint_takes_the_image_again_at_once(
    tmp_path: Path, spy: Spy
) -> None:
    """A compaction deletes the image (of the journal it folds away) and asks for a new one
    at once: a start after a crash loads that one, not the snapshot's records."""
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    try:
        urls = _build_state()
        assert first.checkpoint()
        first.restore_later()  # takes images as the journal grows from now on
        journaling = first.journaling
        assert journaling is not None
        _more_writes(urls, "a")
        journaling.compact()
        assert not (state_dir / image.IMAGE_NAME).exists()
        _wait_for(lambda: first.checkpoints_taken == 2)  # taken by the thread
        journaling.image_bytes = 0  # no more: the tail below stays a tail
        _more_writes(urls, "b")
        before = _everything(urls)
    finally:
        _crash(first)
    second = _started(state_dir)
    try:
        assert spy.whole == [0] and spy.tails == [8]  # the new generation's image, a tail
        assert _everything(urls) == before
    finally:
        second.stop()


def test_the_journals_growth_takes_images_off_the_request_path(tmp_path: Path, spy: Spy) -> None:
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    try:
        assert first.journaling is not None
        first.journaling.image_bytes = 4096
        urls = _build_state()
        assert first.checkpoints_taken == 0  # not before the runtime serves
        first.restore_later()
        for n in range(5):
            _more_writes(urls, str(n))
        _wait_for(lambda: first.checkpoints_taken >= 2)
        journaling = first.journaling
        with journaling.lock:  # the next is due after a quarter of the image, if more
            assert journaling.image_size == (state_dir / image.IMAGE_NAME).stat().st_size
            assert journaling.image_growth() == max(4096, journaling.image_size // 4)
            journaling.image_size = 40_000
            assert journaling.image_growth() == 10_000
            journaling.image_bytes = 0
        _more_writes(urls, "last")
        before = _everything(urls)
        journaled = len(persistence.read_records(first.journaling.journal.path)[0])
    finally:
        _crash(first)
    second = _started(state_dir)
    try:
        assert spy.whole == [0] and 8 <= spy.tails[0] < journaled // 2
        assert _everything(urls) == before
    finally:
        second.stop()


def test_x_rays_segments_journaled_after_an_image_come_back_with_it(
    tmp_path: Path, spy: Spy
) -> None:
    """X-Ray's part of an image is put back last (`image.Later`); a tail with X-Ray requests
    puts it back first, so the tail's segments are added to the image's."""

    def segment(trace_id: str) -> str:
        shape = {"name": "x", "id": "0123456789abcdef", "trace_id": trace_id}
        return json.dumps({**shape, "start_time": 1.0, "end_time": 2.0})

    traces = ["1-5f84c7a1-0123456789abcdef01234567", "1-5f84c7a1-0123456789abcdef01234568"]
    first = _started(tmp_path)
    try:
        aws.client("xray").put_trace_segments(TraceSegmentDocuments=[segment(traces[0])])
    finally:
        first.stop()
    second = _started(tmp_path)
    try:
        assert second._later is not None and second._later.pending
        assert second.checkpoint()  # keeps X-Ray's part as the image had it
        aws.client("xray").put_trace_segments(TraceSegmentDocuments=[segment(traces[1])])
    finally:
        _crash(second)
    third = _started(tmp_path)
    try:
        assert spy.tails[-1] == 1
        found = aws.client("xray").batch_get_traces(TraceIds=traces)["Traces"]
        assert sorted(t["Id"] for t in found) == traces
    finally:
        third.stop()


def test_a_checkpoint_that_fails_keeps_the_older_image_and_the_state(
    tmp_path: Path, spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir = tmp_path / "aws"
    first = _started(state_dir)
    try:
        urls = _build_state()
        assert first.checkpoint()
        older = (state_dir / image.IMAGE_NAME).read_bytes()
        _more_writes(urls, "a")
        with monkeypatch.context() as patch:
            patch.setattr(image, "capture", _unpicklable)
            assert not first.checkpoint()
        assert (state_dir / image.IMAGE_NAME).read_bytes() == older
        _more_writes(urls, "b")  # the journal and the requests go on
        before = _everything(urls)
    finally:
        _crash(first)
    second = _started(state_dir)
    try:
        assert spy.tails == [16]  # both batches of writes, after the older image
        assert _everything(urls) == before
    finally:
        second.stop()


def _unpicklable(*args: Any) -> bytes:
    raise TypeError("cannot pickle '_thread.lock' object")


def _wait_for(condition: Callable[[], bool]) -> None:
    """Until `condition()` holds (a background checkpoint's end), or fail after a while."""
    done = threading.Event()
    for _ in range(600):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("the checkpoint was not taken")


def test_a_service_never_imported_is_pickled_empty_without_importing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An image of a life that never asked X-Ray for anything holds no X-Ray state, and
    taking it imports nothing (AWS's X-Ray SDK: 0.2 s with every request held back)."""
    import sys

    monkeypatch.delitem(sys.modules, "moto.xray.models", raising=False)
    assert image._backends(("xray",)) == {"xray": {}}
    assert "moto.xray.models" not in sys.modules


def test_a_long_poll_waits_outside_the_hold_and_gets_what_is_sent_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint does not wait for a long poll's seconds (the poll waits between short
    receives, outside the hold), and the poll still answers a message sent while it waits;
    a wait moto refuses is refused as before."""
    from botocore.exceptions import ClientError
    from moto.sqs.models import Queue

    emulator = _started(tmp_path)
    waiting = threading.Event()
    real_wait = Queue.wait_for_messages

    def wait_for_messages(queue: Any, timeout: float) -> None:
        waiting.set()
        real_wait(queue, timeout)

    monkeypatch.setattr(Queue, "wait_for_messages", wait_for_messages)
    try:
        sqs = aws.client("sqs")
        url = sqs.create_queue(QueueName="polled")["QueueUrl"]
        answers: list[Any] = []
        poll = threading.Thread(
            target=lambda: answers.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20))
        )
        poll.start()
        assert waiting.wait(30)
        assert emulator.checkpoint()  # while the poll waits: it is not inside the hold
        assert poll.is_alive()
        sqs.send_message(QueueUrl=url, MessageBody="came while it waited")
        poll.join(30)
        assert [m["Body"] for m in answers[0]["Messages"]] == ["came while it waited"]
        with pytest.raises(ClientError, match="WaitTimeSeconds"):
            sqs.receive_message(QueueUrl=url, WaitTimeSeconds=25)
    finally:
        emulator.stop()
