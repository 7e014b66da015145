"""The image of a clean stop (`local/image.py`): the next start loads it instead of replaying
the journal, gets the very same state, and falls back to the replay whenever the journal
moved on since (a crash after the image), the image is damaged or another version's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local import image, persistence
from ezgh_engine.local.emulator import Emulator

from tests.local.test_persistence import _build_state, _checkpoint, _state, _stream


class Replays(list[int]):
    """How many records each start replayed from the journal's beginning (a whole replay),
    and in `tails` how many after the image it loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.tails: list[int] = []


@pytest.fixture()
def replays(monkeypatch: pytest.MonkeyPatch) -> Iterator[Replays]:
    """A spy on `persistence.replay`: what each start replayed."""
    counted = Replays()
    real = persistence.replay

    def replay(app: Any, records: Any, into: Any = None) -> persistence.Restored:
        records = list(records)
        (counted if into is None else counted.tails).append(len(records))
        return real(app, records, into)

    monkeypatch.setattr("ezgh_engine.local.emulator.replay", replay)
    yield counted


def _crash(emulator: Emulator, monkeypatch: pytest.MonkeyPatch, *, mid_save: bool = False) -> None:
    """Stop as a `kill -9` would leave the state dir: no image of this life (with
    `mid_save`, killed while writing it: a part of it in the temporary file, the image of
    the life before still in place)."""

    def save_in_part(self: Emulator, journaling: Any) -> None:
        path = journaling.journal.path.with_name(image.IMAGE_NAME)
        path.with_name(f".{path.name}.tmp").write_bytes(path.read_bytes()[:1000])

    with monkeypatch.context() as patch:
        patch.setattr(Emulator, "_save_image", save_in_part if mid_save else lambda *a: None)
        emulator.stop()


def test_a_start_after_a_clean_stop_loads_the_image_and_replays_nothing(
    tmp_path: Path, replays: Replays
) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
        stream = _stream()
        _checkpoint(first, stream[10]["seq"])
        before = _state(urls)
    finally:
        first.stop()
    assert (tmp_path / image.IMAGE_NAME).exists()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert replays == [0]  # the first start's empty journal; none at the second
        assert second.restored.requests > 0  # a restored state, as the runtime sees it
        assert _state(urls) == before
        assert _stream() == stream  # the same records with the same sequence numbers
        shard = "shardId-00000001541626099285-f35f62ef"
        assert second.restored.checkpoints == {"stream:t": {shard: stream[10]["seq"]}}
        # Writes go on into the same journal, numbered on from there.
        aws.client("dynamodb").put_item(
            TableName="t", Item={"pk": {"S": "later"}, "sk": {"S": "x"}, "g": {"S": "y"}}
        )
        assert int(_stream()[-1]["seq"]) == int(stream[-1]["seq"]) + 1
        after = _state(urls)
    finally:
        second.stop()
    third = Emulator(state_dir=tmp_path)
    third.start()  # the image of the second life
    try:
        assert replays == [0]
        assert _state(urls) == after
    finally:
        third.stop()


@pytest.mark.parametrize("mid_save", [False, True], ids=["killed", "killed mid-save"])
def test_a_crash_after_the_image_loads_it_and_replays_only_the_tail(
    tmp_path: Path, replays: Replays, monkeypatch: pytest.MonkeyPatch, mid_save: bool
) -> None:
    """The image is of the journal's prefix at the clean stop: what the next life journaled
    (then died without a stop, or while saving its own image) is only in the journal after
    that prefix, so the next start loads the older image and replays just those records."""
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        aws.client("sqs").send_message(QueueUrl=urls["work"], MessageBody="after the image")
        aws.client("dynamodb").delete_item(
            TableName="t", Key={"pk": {"S": "p1"}, "sk": {"S": "s1"}}
        )
        before, stream = _state(urls), _stream()
        requests = second.restored.requests + 2
    finally:
        _crash(second, monkeypatch, mid_save=mid_save)
    assert (tmp_path / image.IMAGE_NAME).exists()  # the first life's: of a prefix
    third = Emulator(state_dir=tmp_path)
    third.start()
    try:
        assert replays == [0] and replays.tails == [0, 2]  # the records after the image
        assert third.restored.refused == 0 and third.restored.requests == requests
        assert _state(urls) == before and _stream() == stream
    finally:
        third.stop()


@pytest.mark.parametrize("damage", ["torn", "another version", "not a pickle"])
def test_a_damaged_or_foreign_image_is_passed_over_for_the_journal(
    tmp_path: Path, replays: Replays, damage: str
) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
        before = _state(urls)
    finally:
        first.stop()
    path = tmp_path / image.IMAGE_NAME
    if damage == "torn":
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "not a pickle":
        path.write_bytes(b"{}")
    else:
        import io
        import pickle

        file = io.BytesIO(path.read_bytes())
        header = pickle.load(file)  # the versions and the mark, then moto's objects
        path.write_bytes(pickle.dumps({**header, "moto": "0.0.1"}) + file.read())
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert len(replays) == 2 and replays[1] > 30
        assert _state(urls) == before
    finally:
        second.stop()


def test_a_reset_and_a_compaction_delete_the_image(tmp_path: Path) -> None:
    from ezgh_engine.cli.dev import reset_state

    emulator = Emulator(state_dir=tmp_path / "aws")
    emulator.start()
    try:
        _build_state()
    finally:
        emulator.stop()
    path = tmp_path / "aws" / image.IMAGE_NAME
    assert path.exists()
    emulator.start()
    try:
        assert emulator.journaling is not None
        emulator.journaling.compact()  # the image is of the journal just folded away
        assert not path.exists()
    finally:
        emulator.stop()
    assert path.exists()
    reset_state(tmp_path)  # `ezgh dev --reset`
    assert not path.exists() and not (tmp_path / "aws" / persistence.JOURNAL_NAME).exists()
    emulator.start()
    try:
        assert emulator.restored.empty
        emulator.reset()  # a runtime's reset (tests) empties the journal and drops the image
    finally:
        emulator.stop()
    assert path.exists()  # the image of the empty state: a clean stop's


def test_an_image_that_fails_to_install_midway_is_undone_and_the_journal_replayed(
    tmp_path: Path, replays: Replays, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
        before = _state(urls)
    finally:
        first.stop()
    real = image._install

    def install_in_part(saved: dict[str, Any]) -> None:
        real({"dynamodb": saved["dynamodb"]})  # moto now holds a part of the image
        raise MemoryError("the rest did not fit")

    monkeypatch.setattr(image, "_install", install_in_part)
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert len(replays) == 2 and replays[1] > 30
        assert second.restored.refused == 0  # no table replayed onto one already there
        assert _state(urls) == before
    finally:
        second.stop()


def test_a_message_received_before_the_stop_is_visible_at_once_and_keeps_its_count(
    tmp_path: Path,
) -> None:
    """Its consumer went with the stop (as after a replay), but not its receive count."""
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        sqs = aws.client("sqs")
        url = sqs.create_queue(QueueName="held", Attributes={"VisibilityTimeout": "600"})[
            "QueueUrl"
        ]
        sqs.send_message(QueueUrl=url, MessageBody="in flight at the stop")
        taken = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)["Messages"]
        assert len(taken) == 1
        assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages") is None
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.restored.requests > 0
        again = aws.client("sqs").receive_message(
            QueueUrl=url, WaitTimeSeconds=0, AttributeNames=["ApproximateReceiveCount"]
        )["Messages"]
        assert [m["Body"] for m in again] == ["in flight at the stop"]
        assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    finally:
        second.stop()


def test_a_crash_mid_compaction_after_an_image_replays_the_journal(
    tmp_path: Path, replays: Replays, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction folds the journal the image is of into a new snapshot: killed between the
    snapshot's rename and the image's deletion, it leaves an image of a snapshot generation
    that is no longer there, which the next start passes over."""
    from ezgh_engine.local import private_files

    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        urls = _build_state()
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.journaling is not None
        aws.client("sqs").send_message(QueueUrl=urls["work"], MessageBody="before the fold")
        before, stream = _state(urls), _stream()

        def killed(path: Path) -> None:
            raise KeyboardInterrupt  # the process ends here

        with monkeypatch.context() as patch:
            patch.setattr(private_files, "fsync_directory", killed)
            with pytest.raises(KeyboardInterrupt):
                second.journaling.compact()
    finally:
        _crash(second, monkeypatch)
    assert (tmp_path / image.IMAGE_NAME).exists()  # the first life's, of the old generation
    third = Emulator(state_dir=tmp_path)
    third.start()
    try:
        assert len(replays) == 2  # the new snapshot and its (dropped) old journal
        assert third.restored.refused == 0
        assert _state(urls) == before and _stream() == stream
    finally:
        third.stop()


@pytest.mark.parametrize("kept", [True, False], ids=["kept by the image", "not kept"])
def test_the_runs_trace_segments_outlive_a_clean_stop(
    tmp_path: Path, replays: Replays, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """A replay of the journal puts X-Ray's segments back (PutTraceSegments is journaled):
    the image keeps them too. A service the image would not keep (here X-Ray, taken off its
    list) means no image at all: the next start replays, and nothing is lost."""
    import json

    if not kept:
        monkeypatch.setattr(image, "SERVICES", tuple(s for s in image.SERVICES if s != "xray"))

    trace_id = "1-5f84c7a1-0123456789abcdef01234567"
    segment = {
        "name": "ezgh-invoker",
        "id": "0123456789abcdef",
        "trace_id": trace_id,
        "start_time": 1.0,
        "end_time": 2.0,
    }
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        aws.client("xray").put_trace_segments(TraceSegmentDocuments=[json.dumps(segment)])
    finally:
        first.stop()
    assert (tmp_path / image.IMAGE_NAME).exists() == kept
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        traces = aws.client("xray").batch_get_traces(TraceIds=[trace_id])["Traces"]
        assert [t["Id"] for t in traces] == [trace_id]
        assert len(replays) == (1 if kept else 2)
    finally:
        second.stop()


def test_x_rays_state_is_put_back_last_and_kept_by_a_life_that_never_asked(
    tmp_path: Path,
) -> None:
    """X-Ray's part of the image (`image.LATER`) is installed when a request for X-Ray
    first comes (or in the background once the runtime serves: `restore_later`), not
    during the start; a life that never asked writes it on into its own image; a reset
    drops it with the rest."""
    import json

    import moto.xray.models

    def traced(trace_id: str) -> list[str]:
        traces = aws.client("xray").batch_get_traces(TraceIds=[trace_id])["Traces"]
        return [t["Id"] for t in traces]

    def segments() -> int:
        return sum(
            len(backend._telemetry_records) + len(backend._segment_collection._traces)
            for regions in moto.xray.models.xray_backends.values()
            for backend in regions.values()
        )

    trace_id = "1-5f84c7a1-0123456789abcdef01234567"
    segment: dict[str, Any] = {"name": "x", "id": "0123456789abcdef", "trace_id": trace_id}
    segment.update(start_time=1.0, end_time=2.0)
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        aws.client("xray").put_trace_segments(TraceSegmentDocuments=[json.dumps(segment)])
    finally:
        first.stop()
    for life in range(2):  # the second life asks nothing of X-Ray
        emulator = Emulator(state_dir=tmp_path)
        emulator.start()
        try:
            assert emulator._later is not None and emulator._later.pending
            assert segments() == 0  # not in moto during the start
            aws.client("sqs").list_queues()  # another service's request does not wait for it
            assert emulator._later.pending
            if life == 1:
                emulator.restore_later()
                assert traced(trace_id) == [trace_id]  # put back by then, either way
                assert not emulator._later.pending
        finally:
            emulator.stop()
    last = Emulator(state_dir=tmp_path)
    last.start()
    try:
        last.reset()
        assert traced(trace_id) == []
    finally:
        last.stop()


def test_an_items_attributes_come_back_as_moto_keeps_them_and_still_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image rebuilds an item's attributes without moto's per-attribute 400 KB check
    (quadratic, most of a load's CPU): the item comes back equal, as moto's own type, and a
    write that would take it past 400 KB is refused after the restore as before it."""
    from ezgh_engine.local.account import ACCOUNT_ID, REGION
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict

    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        _build_state()
        item = {"pk": {"S": "wide"}, "sk": {"S": "x"}, "g": {"S": "y"}}
        item.update({f"a{i}": {"S": "v" * 1000} for i in range(100)})  # about 100 KB
        aws.client("dynamodb").put_item(TableName="t", Item=item)
    finally:
        first.stop()
    checked: list[str] = []
    real_set = LimitedSizeDict.__setitem__

    def counted(attrs: Any, name: str, value: Any) -> None:
        checked.append(name)
        real_set(attrs, name, value)

    second = Emulator(state_dir=tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(LimitedSizeDict, "__setitem__", counted)
        second.start()
    try:
        assert second.restored.requests > 0 and checked == []  # loaded, none re-checked
        ddb = aws.client("dynamodb")
        key = {"pk": {"S": "wide"}, "sk": {"S": "x"}}
        assert ddb.get_item(TableName="t", Key=key)["Item"] == item
        table = dynamodb_backends[ACCOUNT_ID][REGION].tables["t"]
        stored = [i for by_range in table.items.values() for i in by_range.values()]
        assert stored and all(type(i.attrs) is LimitedSizeDict for i in stored)
        with pytest.raises(ddb.exceptions.ClientError, match="maximum allowed size"):
            ddb.update_item(
                TableName="t",
                Key=key,
                UpdateExpression="SET big = :big",
                ExpressionAttributeValues={":big": {"S": "v" * 350_000}},
            )
        assert ddb.get_item(TableName="t", Key=key)["Item"] == item
    finally:
        second.stop()


def test_what_the_runtime_keeps_with_the_image_comes_back_with_it_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Emulator.keep` (the runtime's provisioning answers) travels with the image of a
    clean stop: the next start from that image has it (also when it replays a tail after
    it); a start that replays the whole journal (no image) or a reset has nothing to
    adopt."""
    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        assert first.adoptable == {}
        _build_state()
        first.keep("facts", {"queue": "work"})
    finally:
        first.stop()
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert second.adoptable == {"facts": {"queue": "work"}}
        aws.client("sqs").send_message(QueueUrl=_build_state_urls()["work"], MessageBody="later")
    finally:
        _crash(second, monkeypatch)  # its image is not written: the first one's stays
    third = Emulator(state_dir=tmp_path)
    third.start()
    try:
        assert third.adoptable == {"facts": {"queue": "work"}}  # the image, and a tail
    finally:
        _crash(third, monkeypatch)
    image.discard(tmp_path / image.IMAGE_NAME)
    third = Emulator(state_dir=tmp_path)
    third.start()
    try:
        assert third.adoptable == {}  # a replay: whatever was kept is not known to hold
        third.keep("facts", {"queue": "again"})
        third.reset()
        assert third.adoptable == {}
    finally:
        third.stop()
    fourth = Emulator(state_dir=tmp_path)
    fourth.start()
    try:
        assert fourth.adoptable == {}  # the reset dropped what was kept for the old state
    finally:
        fourth.stop()


def _build_state_urls() -> dict[str, str]:
    sqs = aws.client("sqs")
    return {"work": sqs.get_queue_url(QueueName="work")["QueueUrl"]}


def test_a_bucket_from_the_image_is_not_made_again_empty(tmp_path: Path, replays: Replays) -> None:
    """A new process knows no bucket's owner until one is made, and the runtime provisions
    its payload bucket on every start: the image's buckets are registered as they load, so
    that `CreateBucket` finds the bucket (with its objects) and makes no empty one over it."""
    from botocore.exceptions import ClientError
    from moto.s3.models import s3_backends

    first = Emulator(state_dir=tmp_path)
    first.start()
    try:
        s3 = aws.client("s3")
        s3.create_bucket(Bucket="image-payloads")
        s3.put_object(Bucket="image-payloads", Key="run/steps/a/output", Body=b"x" * 70_000)
    finally:
        first.stop()
    s3_backends.bucket_accounts.clear()  # what a new process starts with
    second = Emulator(state_dir=tmp_path)
    second.start()
    try:
        assert replays == [0]  # from the image
        s3 = aws.client("s3")
        try:  # as provisioning does (us-east-1 answers 200 for a bucket one owns)
            s3.create_bucket(Bucket="image-payloads")
        except ClientError as exc:
            assert "BucketAlready" in str(exc)
        body = s3.get_object(Bucket="image-payloads", Key="run/steps/a/output")["Body"].read()
        assert len(body) == 70_000
    finally:
        second.stop()
