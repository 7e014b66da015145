"""One invoker environment drives many pushes at once: the stream hands the invoker the
starts of a batch of records as one asynchronous event (a group), and the invoker answers a
group's messages (and an SQS batch's) at the same time, each on its own.

On in-process moto (both DynamoDB backends), with the local Lambda API on loopback (the
fixtures of tests/api/test_async_invocations.py). The push app is the only stand-in
(`invoker.invoke_app`): it is the user's, not ours. Nothing here waits on time: a push that
must overlap its neighbours meets them at a barrier, and Lambda's retry waits and the
leases pass on the skip clock.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, messages, runs_store
from ezgh_engine.core import messages as wire
from ezgh_engine.core.models import Run
from ezgh_engine.local import lambda_async
from ezgh_engine.local.pollers import Activity
from ezgh_engine.service import invocation_queue, invoker, stream

from tests.api.steps_helpers import stored_run
from tests.api.test_async_invocations import (
    APP,
    _counts,
    _deliver_all,
    _events,
    _queued,
    _run_inserted,
    lambda_api,
)

__all__ = ["lambda_api"]  # a fixture, imported to be used here

COMPLETED = {"protocol": "1.3", "outcome": "completed", "output": "done"}


class Died(BaseException):
    """The invoker's environment died (no `except Exception` of the engine catches it)."""


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The push app: `calls` (run IDs, in the order invoked); `barrier`, when set, every
    push waits at it first (so all of them are in flight at once, or the test fails);
    `answer(run_id)` decides each answer (completed by default)."""
    state: dict[str, Any] = {"calls": [], "barrier": None, "answer": lambda run_id: COMPLETED}
    lock = threading.Lock()

    def invoke_app(_app: Any, request: dict[str, Any]) -> Any:
        run_id = request["run"]["id"]
        with lock:
            state["calls"].append(run_id)
        if state["barrier"] is not None:
            state["barrier"].wait(timeout=30)
        return state["answer"](run_id)

    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", invoke_app)
    return state


def _environment(event: dict[str, Any]) -> Any:
    """The invoker's handler in an environment that may die: Lambda sees a failed
    invocation (the poller's `Exception`)."""
    try:
        return invocation_queue.lambda_handler(event, None)
    except Died:
        raise RuntimeError("Runtime exited: the environment died") from None


def _status(run: Run) -> str:
    got = runs_store.get_run(run.id, with_steps=False)
    assert got is not None
    return got.status


def _invokes_counted() -> tuple[list[dict[str, Any]], Any]:
    seen: list[dict[str, Any]] = []

    def on_call(service: str, operation: str, params: dict[str, Any]) -> None:
        if service == "lambda" and operation == "Invoke":
            seen.append(json.loads(params["Payload"]))

    return seen, aws.intercept(on_call)


def _batch(runs: list[Run]) -> list[dict[str, Any]]:
    records = [_run_inserted(run.id) for run in runs]
    for n, record in enumerate(records):
        record["dynamodb"]["SequenceNumber"] = f"{n + 1:04d}"
    return records


def test_a_batch_of_starts_is_one_asynchronous_invoke_of_a_group(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any]
) -> None:
    runs = [stored_run() for _ in range(12)]
    invokes, stop = _invokes_counted()
    try:
        assert stream.handle_batch(_batch(runs)) == []
    finally:
        stop()
    # Twelve starts, two requests: a group of ten (the most one environment pushes at once),
    # then the other two.
    assert [len(event["messages"]) for event in invokes] == [wire.GROUP_MAX_MESSAGES, 2]
    started = [m["runId"] for event in _events(lambda_api) for m in event["messages"]]
    assert sorted(started) == sorted(run.id for run in runs)
    assert _counts(config.settings().invocations_queue_url)["ApproximateNumberOfMessages"] == 0


def test_a_lone_start_is_the_same_single_event_as_before(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any]
) -> None:
    """At low load a batch holds one start: one request, the message itself, as ever."""
    run = stored_run()
    invokes, stop = _invokes_counted()
    try:
        # The same record twice (moto may show an upsert as two INSERTs): one start.
        assert stream.handle_batch(_batch([run]) * 2) == []
    finally:
        stop()
    assert invokes == [{"type": "invoke", "runId": run.id, "seq": 1}]


def test_a_group_is_pushed_at_once_and_every_run_completes(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any]
) -> None:
    runs = [stored_run() for _ in range(wire.GROUP_MAX_MESSAGES)]
    stream.handle_batch(_batch(runs))
    (event,) = _events(lambda_api)
    # Each push waits until all ten are in flight: one after another, the first would wait
    # alone and the barrier would break.
    app["barrier"] = threading.Barrier(len(runs))
    assert invocation_queue.lambda_handler(event, None) == {}
    assert sorted(app["calls"]) == sorted(run.id for run in runs)
    assert {_status(run) for run in runs} == {"completed"}
    assert _queued(config.settings().invocations_queue_url) == []


def test_a_failing_run_goes_round_the_queue_by_itself_and_its_neighbours_complete(
    lambda_api: lambda_async.AsyncInvokes,
    app: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    skip_clock: clock.SkipClock,
) -> None:
    """One run's handler raises (its store is away), another's app is unreachable: each
    becomes its own retry on the queue; the group's event succeeds and no neighbour is
    invoked twice or failed."""
    broken, unreachable, *fine = [stored_run() for _ in range(5)]
    real_take = invoker.store.take_lease

    def take_lease(run_id: str, *args: Any, **kwargs: Any) -> Any:
        if run_id == broken.id:
            raise RuntimeError("DynamoDB is away for this run")
        return real_take(run_id, *args, **kwargs)

    monkeypatch.setattr(invoker.store, "take_lease", take_lease)

    def answer(run_id: str) -> Any:
        if run_id == unreachable.id:
            raise invoker.AppUnreachable("connection refused")
        return COMPLETED

    app["answer"] = answer
    group = wire.Group(tuple(wire.Invoke(r.id, 1) for r in [broken, unreachable, *fine]))
    invocation_queue.lambda_handler(json.loads(wire.dumps_group(group.messages)), None)
    assert {_status(run) for run in fine} == {"completed"}
    assert sorted(app["calls"]) == sorted(r.id for r in [unreachable, *fine])
    url = config.settings().invocations_queue_url
    assert _counts(url) == {
        "ApproximateNumberOfMessages": 0,
        "ApproximateNumberOfMessagesDelayed": 2,
    }

    monkeypatch.setattr(invoker.store, "take_lease", real_take)
    app["answer"] = lambda run_id: COMPLETED
    skip_clock.advance(timedelta(seconds=invocation_queue.FAILED_RETRY_SECONDS + 1))
    back = _queued(url)
    assert sorted(json.loads(m["Body"])["runId"] for m in back) == sorted(
        [broken.id, unreachable.id]
    )
    records = [{"messageId": m["MessageId"], "body": m["Body"]} for m in back]
    assert invocation_queue.handle_batch(records) == []
    assert {_status(run) for run in [broken, unreachable, *fine]} == {"completed"}
    assert sorted(app["calls"]) == sorted(r.id for r in [unreachable, unreachable, broken, *fine])


def test_an_invoker_that_dies_mid_group_loses_nothing_and_repeats_no_finished_run(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any], skip_clock: clock.SkipClock
) -> None:
    """Of ten pushes, three are answered and written; then the environment dies with seven
    in flight (their apps ran, their answers are lost). Lambda delivers the event again a
    minute later: the three are done (dropped as duplicates), the seven still leased go to
    the queue until their leases end, and are invoked again there, once each."""
    runs = [stored_run() for _ in range(10)]
    stream.handle_batch(_batch(runs))
    (poller,) = lambda_api.pollers({"invoker": _environment}, Activity())
    finished = {run.id for run in runs[:3]}

    def answer(run_id: str) -> Any:
        if run_id in finished:
            return COMPLETED
        raise Died()

    app["answer"] = answer
    assert _deliver_all(poller) == 1
    assert poller.failed == 1 and poller.given_up == 0
    assert {_status(run) for run in runs[:3]} == {"completed"}
    assert {_status(run) for run in runs[3:]} == {"running"}
    assert len(app["calls"]) == 10

    app["answer"] = lambda run_id: COMPLETED
    skip_clock.advance(timedelta(seconds=61))  # Lambda's first retry of the failed event
    assert _deliver_all(poller) == 1
    assert poller.failed == 1  # this time the event succeeded: each dead push is queued
    assert len(app["calls"]) == 10  # nothing pushed while the dead invocations' leases last
    url = config.settings().invocations_queue_url
    assert _counts(url)["ApproximateNumberOfMessagesDelayed"] == 7

    skip_clock.advance(timedelta(seconds=config.settings().invoke_timeout_seconds * 2))
    back = _queued(url)
    assert sorted(json.loads(m["Body"])["runId"] for m in back) == sorted(r.id for r in runs[3:])
    records = [{"messageId": m["MessageId"], "body": m["Body"]} for m in back]
    assert invocation_queue.handle_batch(records) == []
    assert {_status(run) for run in runs} == {"completed"}
    pushes = {run.id: app["calls"].count(run.id) for run in runs}
    assert pushes == {run.id: 1 if run.id in finished else 2 for run in runs}


def test_a_group_lambda_gave_up_on_is_split_into_single_messages_in_the_queue(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any], skip_clock: clock.SkipClock
) -> None:
    """The on-failure record of a group (three failed attempts) reaches the invocations
    queue; its consumer puts each message back on its own (one request), so no environment
    pushes more than a group's worth at once; they are then answered as a batch."""
    runs = [stored_run() for _ in range(3)]
    group = json.loads(wire.dumps_group([wire.Invoke(r.id, 1) for r in runs]))
    record = lambda_async.invocation_record(
        lambda_api.functions[0], {"MessageId": "e1"}, group, "RetriesExhausted", 3, None
    )
    url = config.settings().invocations_queue_url
    assert invocation_queue.handle_batch([{"messageId": "m1", "body": json.dumps(record)}]) == []
    assert app["calls"] == []
    singles = _queued(url)
    assert sorted(json.loads(m["Body"])["runId"] for m in singles) == sorted(r.id for r in runs)
    app["barrier"] = threading.Barrier(len(runs))  # an SQS batch is pushed at once too
    records = [{"messageId": m["MessageId"], "body": m["Body"]} for m in singles]
    assert invocation_queue.handle_batch(records) == []
    assert {_status(run) for run in runs} == {"completed"}


def test_a_group_that_cannot_be_sent_fails_the_batch_from_its_first_record(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any]
) -> None:
    """Twelve starts: the first group goes, the second's invoke fails (not a throttle):
    the stream answers the eleventh record, so it and the twelfth are handled again."""
    runs = [stored_run() for _ in range(12)]
    sent: list[int] = []

    def second_fails(service: str, operation: str, params: dict[str, Any]) -> None:
        if service == "lambda" and operation == "Invoke":
            sent.append(1)
            if len(sent) == 2:
                raise RuntimeError("Lambda is away")

    stop = aws.intercept(second_fails)
    try:
        assert stream.handle_batch(_batch(runs)) == ["0011"]
    finally:
        stop()
    (event,) = _events(lambda_api)
    assert [m["runId"] for m in event["messages"]] == [r.id for r in runs[:10]]
    assert stream.handle_batch(_batch(runs[10:])) == []  # the retry, from the eleventh
    (event,) = _events(lambda_api)
    assert [m["runId"] for m in event["messages"]] == [r.id for r in runs[10:]]


def test_a_throttled_group_goes_to_the_queue_in_one_request(
    lambda_api: lambda_async.AsyncInvokes, app: dict[str, Any]
) -> None:
    from botocore.exceptions import ClientError

    runs = [stored_run() for _ in range(4)]
    calls: list[str] = []

    def throttled(service: str, operation: str, params: dict[str, Any]) -> None:
        calls.append(f"{service}.{operation}")
        if service == "lambda":
            error = {"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}}
            raise ClientError(error, "Invoke")

    stop = aws.intercept(throttled)
    try:
        assert stream.handle_batch(_batch(runs)) == []
    finally:
        stop()
    assert calls.count("sqs.SendMessageBatch") == 1 and "sqs.SendMessage" not in calls
    queued = _queued(config.settings().invocations_queue_url)
    assert sorted(json.loads(m["Body"])["runId"] for m in queued) == sorted(r.id for r in runs)


def test_a_group_keeps_its_messages_that_parse_and_names_the_others() -> None:
    body = {
        "type": "group",
        "messages": [
            {"type": "invoke", "runId": "r1", "seq": 1},
            {"type": "from-the-future", "runId": "r2"},
            {"type": "group", "messages": []},
            {"type": "branch", "runId": "r3", "stepId": "s"},
        ],
    }
    group = wire.load_event(body)
    assert isinstance(group, wire.Group)
    assert group.messages == (wire.Invoke("r1", 1), wire.Branch("r3", "s"))
    assert len(group.malformed) == 2
    for bad in ({"type": "group"}, {"type": "group", "messages": []}):
        with pytest.raises(wire.MalformedMessage):
            wire.load_event(bad)


def test_an_outbox_splits_groups_by_bytes_too(lambda_api: lambda_async.AsyncInvokes) -> None:
    """Groups stay under `GROUP_MAX_BYTES` whatever their messages hold, so Lambda's event
    limit and the on-failure queue's message limit hold by construction."""
    long_step = "s" * 20_000
    with messages.gathering() as outbox:
        for n in range(5):
            outbox.mark(n)
            messages.send_branch(f"r{n}", long_step)
        assert outbox.flush() is None
    events = _events(lambda_api)
    sizes = [len(json.dumps(e, separators=(",", ":"))) for e in events]
    assert len(events) == 2 and max(sizes) <= wire.GROUP_MAX_BYTES
    assert sum(len(e["messages"]) for e in events) == 5
