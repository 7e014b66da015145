"""The local emulator with DynamoDB on AWS's DynamoDB Local (SQS, S3, Scheduler on moto):
reset, and the stream readers, which get no wakeup from moto there."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.waiter import Waiter
from ezgh_engine.adapters import aws
from ezgh_engine.local import pollers
from ezgh_engine.local.emulator import ENV_DYNAMODB_URL, Emulator, loopback_url
from ezgh_engine.local.pollers import Activity, StreamPoller
from ezgh_engine.local.resources import Provisioned, provision

from tests.ddblocal import DynamoDBLocal

pytestmark = pytest.mark.ddblocal


@pytest.fixture(scope="module")
def emulator(dynamodb_local: DynamoDBLocal) -> Iterator[Emulator]:
    saved = os.environ.get(ENV_DYNAMODB_URL)
    os.environ[ENV_DYNAMODB_URL] = dynamodb_local.url
    emu = Emulator()
    try:
        emu.start()
        yield emu
    finally:
        emu.stop()
        os.environ.pop(ENV_DYNAMODB_URL, None)
        if saved is not None:
            os.environ[ENV_DYNAMODB_URL] = saved


@pytest.fixture()
def resources(emulator: Emulator) -> Provisioned:
    emulator.reset()
    done = provision(api_url="http://127.0.0.1:1", token_secret="test-secret")
    emulator.apply_env(done.env)
    return done


@pytest.fixture()
def running() -> Iterator[list[StreamPoller]]:
    pollers: list[StreamPoller] = []
    yield pollers
    for poller in pollers:
        poller.stop()


def _key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "RUN"}}


def _wait(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def _reader(resources: Provisioned, seen: list[str], activity: Activity) -> StreamPoller:
    return StreamPoller(
        name="s",
        stream_arn=resources.stream_arns["runs"],
        invoke=lambda e: seen.extend(r["dynamodb"]["Keys"]["pk"]["S"] for r in e["Records"]),
        activity=activity,
    )


def test_dynamodb_goes_to_dynamodb_local_and_the_rest_to_moto(
    resources: Provisioned, dynamodb_local: DynamoDBLocal
) -> None:
    assert os.environ["AWS_ENDPOINT_URL_DYNAMODB"] == dynamodb_local.url
    assert os.environ["AWS_ENDPOINT_URL_DYNAMODB_STREAMS"] == dynamodb_local.url
    assert aws.client("dynamodb").meta.endpoint_url == dynamodb_local.url
    assert aws.client("dynamodbstreams").meta.endpoint_url == dynamodb_local.url
    assert aws.client("sqs").meta.endpoint_url != dynamodb_local.url
    assert resources.tables["runs"] in dynamodb_local.client().list_tables()["TableNames"]


def test_reset_empties_the_tables_without_waiting(
    emulator: Emulator, resources: Provisioned, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reset deletes and creates the tables without waiting for their states (in memory,
    both are immediate; a botocore waiter polls every 20 s). Checked by the waits made, not
    timed: a timed check fails on a slow machine."""
    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    ddb.put_item(TableName=table, Item=_key("RUN#old"))
    waits: list[str] = []
    monkeypatch.setattr(Waiter, "wait", lambda waiter, **kwargs: waits.append(waiter.name))
    emulator.reset()
    provision(api_url="http://127.0.0.1:1", token_secret="test-secret")
    assert ddb.scan(TableName=table)["Items"] == []
    assert waits == []


def test_a_reader_gets_past_a_cancelled_first_transaction(
    resources: Provisioned, running: list[StreamPoller]
) -> None:
    """DynamoDB Local gives a cancelled transaction sequence numbers; when they are a shard's
    first, reading from its start is `TrimmedDataAccessException`. The reader read on from
    the oldest record left, instead of failing on every poll for good."""
    seen: list[str] = []
    poller = _reader(resources, seen, Activity())
    running.append(poller)
    poller.start()
    _wait(lambda: poller.idle)
    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    with pytest.raises(ClientError):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": _key("RUN#cancelled")}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": _key("RUN#absent"),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    ddb.put_item(TableName=table, Item=_key("RUN#written"))
    _wait(lambda: seen == ["RUN#written"])


def test_a_reader_is_not_idle_before_it_read_what_a_handler_wrote(
    resources: Provisioned, running: list[StreamPoller]
) -> None:
    """No moto append to hook: the end of each tracked handler or API call wakes the
    readers, so `idle` (what `LocalRuntime.wait_idle` trusts) never holds while a write
    is still unread."""
    activity = Activity()
    seen: list[str] = []
    poller = _reader(resources, seen, activity)
    running.append(poller)
    poller.start()
    _wait(lambda: poller.idle)
    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    for n in range(5):
        with activity.track():
            ddb.put_item(TableName=table, Item=_key(f"RUN#{n}"))
        _wait(lambda: poller.idle)
        assert seen[-1:] == [f"RUN#{n}"]


class _ExpiringStreams:
    """A DynamoDB Streams client on which, once `expire` is set, the iterator of the next
    `GetRecords` has expired: it answers `ExpiredIteratorException` from then on, as AWS
    answers an iterator past its 15 minutes."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.expire = False
        self.expired: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_records(self, **kwargs: Any) -> Any:
        if self.expire:
            self.expire = False
            self.expired.add(kwargs["ShardIterator"])
        if kwargs["ShardIterator"] in self.expired:
            error = {"Error": {"Code": "ExpiredIteratorException", "Message": "expired"}}
            raise ClientError(error, "GetRecords")  # type: ignore[arg-type]
        return self._client.get_records(**kwargs)


def test_a_reader_whose_iterator_expired_reads_on_after_its_last_record(
    resources: Provisioned, running: list[StreamPoller], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader gets a new iterator after the last record it handled
    (`AFTER_SEQUENCE_NUMBER`, on DynamoDB Local's own sequence numbers): nothing lost,
    nothing handed on twice."""
    streams = _ExpiringStreams(aws.client("dynamodbstreams"))
    client = aws.client
    monkeypatch.setattr(
        pollers.aws, "client", lambda name: streams if name == "dynamodbstreams" else client(name)
    )
    activity = Activity()
    seen: list[str] = []
    poller = _reader(resources, seen, activity)
    running.append(poller)
    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    with activity.track():
        ddb.put_item(TableName=table, Item=_key("RUN#1"))
        ddb.put_item(TableName=table, Item=_key("RUN#2"))
    poller.start()
    _wait(lambda: len(seen) == 2 and poller.idle)
    for batch in (["RUN#3"], ["RUN#4", "RUN#5"]):
        streams.expire = True
        with activity.track():
            for pk in batch:
                ddb.put_item(TableName=table, Item=_key(pk))
        _wait(lambda last=batch[-1]: not streams.expire and poller.idle and seen[-1] == last)
    assert len(streams.expired) == 2
    assert seen == ["RUN#1", "RUN#2", "RUN#3", "RUN#4", "RUN#5"]


def test_a_successor_resumes_right_after_what_its_predecessor_handled(
    resources: Provisioned, running: list[StreamPoller]
) -> None:
    activity = Activity()
    first: list[str] = []
    poller = _reader(resources, first, activity)
    running.append(poller)
    ddb, table = aws.client("dynamodb"), resources.tables["runs"]
    with activity.track():
        ddb.put_item(TableName=table, Item=_key("RUN#1"))
    poller.start()
    _wait(lambda: first == ["RUN#1"] and poller.idle)
    poller.stop()
    with activity.track():
        ddb.put_item(TableName=table, Item=_key("RUN#2"))
    second: list[str] = []
    successor = _reader(resources, second, activity)
    successor.resume_from(poller.checkpoint())
    running.append(successor)
    successor.start()
    _wait(lambda: second and successor.idle)
    assert second == ["RUN#2"]


def test_only_a_loopback_dynamodb_url_is_taken() -> None:
    assert loopback_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert loopback_url("") == ""
    for url in ("http://ddb.example.invalid:8000", "file:///tmp/x", "http://10.0.0.1"):
        with pytest.raises(ValueError):
            loopback_url(url)
