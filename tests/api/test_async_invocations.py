"""The stream starts the invoker with an asynchronous Lambda invoke, and long timers'
schedules target the invoker function, instead of an SQS message each (a request fewer to
pay for per start and per timer).

On in-process moto (both DynamoDB backends), with the local Lambda API (`local.lambda_async`)
on loopback: what the stream and the timers send, what the invoker does with an event
delivered once, twice, while another invocation holds the run, and after failures (Lambda's
retries, then the on-failure record in the invocations queue). The push app is the only
stand-in (`invoker.invoke_app`): it is the user's, not ours.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, ddb, messages, runs_store, schedules_store
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.local import lambda_async
from ezgh_engine.local.emulator import sqs_on_engine_clock
from ezgh_engine.local.pollers import Activity
from ezgh_engine.local.scheduler import Scheduler
from ezgh_engine.service import invocation_queue, invoker, stream
from ezgh_engine.topology import INVOKER_FUNCTION, TOPOLOGY

from tests.api.steps_helpers import stored_run
from tests.api.test_protocol_races import _sleeping

APP = SimpleNamespace(kind="push", name="app", notifications=None, protocol="1.5")
GROUP = "ezgh-test-timers"


@pytest.fixture
def lambda_api(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> Iterator[lambda_async.AsyncInvokes]:
    """The local Lambda API, with the stream's environment: the invoker's ARN set."""
    invokes = lambda_async.AsyncInvokes(TOPOLOGY)
    invokes.serve()
    queues = {"invocations": config.settings().invocations_queue_url}
    for name, value in invokes.provision(queues).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(TOPOLOGY.scheduler_group_env_var, GROUP)
    monkeypatch.setenv(TOPOLOGY.scheduler_role_env_var, "arn:aws:iam::123456789012:role/s")
    aws.reset_clients()
    config.reset_settings()
    aws.client("scheduler").create_schedule_group(Name=GROUP)
    sqs_on_engine_clock(True)  # Lambda's retry waits (a message's visibility) skip with it
    try:
        yield invokes
    finally:
        sqs_on_engine_clock(False)
        invokes.shutdown()


@pytest.fixture
def app_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The push app: answers `completed`; records each invocation's seq of the run."""
    calls: list[int] = []

    def invoke_app(app: Any, request: dict[str, Any]) -> Any:
        calls.append(len(calls) + 1)
        return {"protocol": "1.3", "outcome": "completed", "output": "done"}

    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", invoke_app)
    return calls


def _queued(url: str) -> list[dict[str, Any]]:
    """Every message now visible in the queue at `url` (received, so hidden for a while)."""
    found: list[dict[str, Any]] = []
    while True:
        got = (
            aws.client("sqs")
            .receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            .get("Messages", [])
        )
        if not got:
            return found
        found += got


def _counts(url: str) -> dict[str, int]:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    got = aws.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=names)
    return {name: int(got["Attributes"][name]) for name in names}


def _events(invokes: lambda_async.AsyncInvokes) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in _queued(invokes.queue_urls["invoker"])]


def _run_inserted(run_id: str) -> dict[str, Any]:
    """The stream record of the run item as it is now, written first."""
    raw = ws.get(items.run_pk(run_id), items.RUN_SK)
    assert raw is not None
    return {"eventName": "INSERT", "dynamodb": {"NewImage": ddb.to_item(raw)}}


def _poller(invokes: lambda_async.AsyncInvokes) -> lambda_async.AsyncInvokePoller:
    (poller,) = invokes.pollers(
        {"invoker": lambda event: invocation_queue.lambda_handler(event, None)}, Activity()
    )
    return poller


def _deliver_all(poller: lambda_async.AsyncInvokePoller) -> int:
    """Run every event visible in the poller's queue once, as its thread would."""
    received = _queued(poller.queue_url)
    for message in received:
        poller._deliver(message)
    return len(received)


def test_a_run_start_is_an_asynchronous_invoke_of_the_invoker_not_a_queue_message(
    lambda_api: lambda_async.AsyncInvokes, app_calls: list[int]
) -> None:
    run = stored_run()
    stream.handle_record(_run_inserted(run.id))
    assert _counts(config.settings().invocations_queue_url)["ApproximateNumberOfMessages"] == 0
    (event,) = _events(lambda_api)
    assert event == {"type": "invoke", "runId": run.id, "seq": 1}
    assert invocation_queue.lambda_handler(event, None) == {}
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed"
    assert app_calls == [1]


def test_an_event_delivered_twice_invokes_the_run_once(
    lambda_api: lambda_async.AsyncInvokes, app_calls: list[int]
) -> None:
    """Lambda's queue may deliver an event twice: the second finds the reason handled."""
    run = stored_run()
    event = {"type": "invoke", "runId": run.id, "seq": 1}
    invocation_queue.lambda_handler(event, None)
    invocation_queue.lambda_handler(event, None)
    assert app_calls == [1]
    # Dropped as a duplicate message is, not sent round the queue.
    assert _counts(config.settings().invocations_queue_url) == {
        "ApproximateNumberOfMessages": 0,
        "ApproximateNumberOfMessagesDelayed": 0,
    }


def test_an_event_for_a_run_another_invocation_holds_comes_back_through_the_queue(
    lambda_api: lambda_async.AsyncInvokes, app_calls: list[int], skip_clock: clock.SkipClock
) -> None:
    """A duplicate while the first invocation still runs: held as a held message is, i.e.
    the same message on the queue, delayed until the lease would end."""
    run = stored_run()
    assert inv.take_lease(run.id, 1, now_ms=clock.now_ms(), lease_ms=120_000) is not None
    invocation_queue.lambda_handler({"type": "invoke", "runId": run.id, "seq": 1}, None)
    assert app_calls == []
    url = config.settings().invocations_queue_url
    assert _counts(url) == {
        "ApproximateNumberOfMessages": 0,
        "ApproximateNumberOfMessagesDelayed": 1,
    }
    skip_clock.advance(timedelta(seconds=122))
    (held,) = _queued(url)
    assert json.loads(held["Body"]) == {"type": "invoke", "runId": run.id, "seq": 1}


def test_an_invocation_that_fails_after_taking_the_lease_is_retried_and_recovered(
    lambda_api: lambda_async.AsyncInvokes,
    app_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
    skip_clock: clock.SkipClock,
) -> None:
    """The invoker crashes mid-way (after the lease write, before the app): Lambda runs the
    event again a minute later; that attempt finds the dead invocation's lease and sends the
    message to the queue until the lease ends, where it invokes the run, once."""
    run = stored_run()
    messages.start(messages.wire.Invoke(run.id, 1))
    poller = _poller(lambda_api)
    real_get_app = invoker.registry_store.get_app
    failures = [RuntimeError("the invoker died")]

    def flaky_get_app(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_get_app(*args, **kwargs)

    monkeypatch.setattr(invoker.registry_store, "get_app", flaky_get_app)
    assert _deliver_all(poller) == 1
    assert poller.failed == 1 and app_calls == []
    assert _deliver_all(poller) == 0  # Lambda waits a minute before the retry
    skip_clock.advance(timedelta(seconds=61))
    assert _deliver_all(poller) == 1
    assert poller.failed == 1 and poller.given_up == 0 and app_calls == []
    skip_clock.advance(timedelta(minutes=20))
    assert _deliver_all(poller) == 0  # the event is done: deleted
    url = config.settings().invocations_queue_url
    (held,) = _queued(url)  # the lease has ended by now
    assert json.loads(held["Body"]) == {"type": "invoke", "runId": run.id, "seq": 1}
    assert invocation_queue.handle_batch([{"messageId": "m1", "body": held["Body"]}]) == []
    assert app_calls == [1]
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed"


def test_a_failed_invocation_before_the_lease_is_retried_by_lambda_and_runs_once(
    lambda_api: lambda_async.AsyncInvokes,
    app_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
    skip_clock: clock.SkipClock,
) -> None:
    run = stored_run()
    messages.start(messages.wire.Invoke(run.id, 1))
    poller = _poller(lambda_api)
    real_take = invoker.store.take_lease
    failures = [RuntimeError("throttled")]

    def flaky_take(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_take(*args, **kwargs)

    monkeypatch.setattr(invoker.store, "take_lease", flaky_take)
    assert _deliver_all(poller) == 1
    assert poller.failed == 1 and app_calls == []
    skip_clock.advance(timedelta(seconds=61))
    assert _deliver_all(poller) == 1
    assert app_calls == [1] and poller.given_up == 0
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed"
    skip_clock.advance(timedelta(minutes=20))
    assert _deliver_all(poller) == 0  # deleted once it succeeded
    assert _queued(config.settings().invocations_queue_url) == []


def test_an_event_that_keeps_failing_lands_in_the_invocations_queue_and_is_handled_there(
    lambda_api: lambda_async.AsyncInvokes,
    app_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
    skip_clock: clock.SkipClock,
) -> None:
    """Three failed attempts (a minute, then two, apart): Lambda gives the event up to the
    on-failure queue, the invocations queue, whose consumer reads the record's payload."""
    run = stored_run()
    messages.start(messages.wire.Invoke(run.id, 1))
    poller = _poller(lambda_api)
    real_take = invoker.store.take_lease

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("DynamoDB is away")

    monkeypatch.setattr(invoker.store, "take_lease", failing)
    for wait in (0, 61, 121):
        skip_clock.advance(timedelta(seconds=wait))
        assert _deliver_all(poller) == 1
    assert poller.failed == 3 and poller.given_up == 1
    skip_clock.advance(timedelta(minutes=20))
    assert _deliver_all(poller) == 0
    (record,) = _queued(config.settings().invocations_queue_url)
    body = json.loads(record["Body"])
    assert body["requestContext"]["condition"] == "RetriesExhausted"
    assert body["requestContext"]["approximateInvokeCount"] == 3
    assert body["requestPayload"] == {"type": "invoke", "runId": run.id, "seq": 1}
    monkeypatch.setattr(invoker.store, "take_lease", real_take)
    assert invocation_queue.handle_batch([{"messageId": "m1", "body": record["Body"]}]) == []
    assert app_calls == [1]


def test_a_long_timer_targets_the_invoker_and_its_fire_wakes_and_invokes_the_run(
    lambda_api: lambda_async.AsyncInvokes, app_calls: list[int], skip_clock: clock.SkipClock
) -> None:
    run = stored_run()
    wake = clock.iso(clock.now() + timedelta(hours=1))
    _sleeping(run.id, wake)
    messages.schedule_timer(run.id, "nap#1", clock.parse_iso(wake))
    (summary,) = aws.client("scheduler").list_schedules(GroupName=GROUP)["Schedules"]
    schedule = aws.client("scheduler").get_schedule(GroupName=GROUP, Name=summary["Name"])
    assert schedule["Target"]["Arn"] == config.settings().invoker_function_arn
    assert schedule["Target"]["Arn"] == lambda_async.function_arn(INVOKER_FUNCTION)
    assert schedule["Target"]["RetryPolicy"] == messages.SCHEDULER_RETRY
    timers = Scheduler(group=GROUP, activity=Activity())
    assert timers.scan() == 0
    skip_clock.advance(timedelta(hours=1))
    assert timers.scan() == 1
    assert _counts(config.settings().invocations_queue_url)["ApproximateNumberOfMessages"] == 0
    (event,) = _events(lambda_api)
    assert event == {"type": "timer", "runId": run.id, "stepId": "nap#1", "wakeAt": wake}
    invocation_queue.lambda_handler(event, None)
    assert app_calls == [1]  # woken with the lease and invoked at once
    invocation_queue.lambda_handler(event, None)  # fired twice: the sleep is awake already
    assert app_calls == [1]
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed"


class Crash(Exception):
    """The handler's process died before its request left."""


def test_a_wake_up_that_dies_between_its_two_writes_is_finished_by_the_timer_again(
    lambda_api: lambda_async.AsyncInvokes, app_calls: list[int], skip_clock: clock.SkipClock
) -> None:
    """A sleep's wake-up is two single writes (the step completed, then the run's ask and
    lease, marked with the wake-up): a timer handler dying between them leaves the sleep
    completed and nothing asked; the timer delivered again (Lambda's retry) asks, once, and
    the run is invoked once. Delivered a third time, it finds the ask marked: nothing."""
    run = stored_run()
    wake = clock.iso(clock.now())
    _sleeping(run.id, wake)
    timer = messages.wire.Timer(run.id, "nap#1", wake)
    event = json.loads(messages.wire.dumps(timer))

    def crash_at_the_runs_write(service: str, operation: str, params: dict[str, Any]) -> None:
        if operation == "UpdateItem" and params.get("Key") == items.run_key(run.id):
            raise Crash()

    stop = aws.intercept(crash_at_the_runs_write)
    try:
        with pytest.raises(Crash):
            invocation_queue.lambda_handler(event, None)
    finally:
        stop()
    asleep = runs_store.get_run(run.id)
    assert asleep is not None and asleep.invoke_seq == asleep.handled_seq  # nothing asked yet
    assert app_calls == []
    invocation_queue.lambda_handler(event, None)  # Lambda retries the failed event
    assert app_calls == [1]
    invocation_queue.lambda_handler(event, None)
    assert app_calls == [1]
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed"
    assert done.woke == inv.wake_mark("nap#1", wake)


def test_a_cron_schedule_targets_the_invoker_and_fires_it_with_its_planned_time(
    lambda_api: lambda_async.AsyncInvokes,
) -> None:
    """A cron fire is an asynchronous invoke of the invoker (no SQS send, receive, delete),
    its input's `<aws.scheduler.scheduled-time>` filled in as Scheduler does."""
    at = clock.iso(clock.now())
    cron = schedules_store.Schedule(
        "s-1", "wfs_x", "o", "p", "a", "nightly", "0 3 * * *", "UTC", None, "active", at, at
    )
    schedules_store.put_timer(cron, create=True)
    name = schedules_store.schedule_name("s-1")
    schedule = aws.client("scheduler").get_schedule(GroupName=GROUP, Name=name)
    assert schedule["Target"]["Arn"] == lambda_async.function_arn(INVOKER_FUNCTION)
    planned = datetime(2030, 1, 2, 3, 0, tzinfo=UTC)
    Scheduler(group=GROUP, activity=Activity())._fire(schedule, planned)
    assert _counts(config.settings().invocations_queue_url)["ApproximateNumberOfMessages"] == 0
    (event,) = _events(lambda_api)
    assert messages.wire.parse(json.dumps(event)) == messages.wire.Cron(
        "s-1", "2030-01-02T03:00:00Z"
    )


def test_without_the_invokers_arn_a_start_and_a_timer_go_to_the_queue(
    lambda_api: lambda_async.AsyncInvokes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function not granted the invoke (the invoker itself, the api's cron) sends as
    before: the queue, and schedules targeting the queue."""
    monkeypatch.delenv(INVOKER_FUNCTION.async_invoke.env_var)  # type: ignore[union-attr]
    monkeypatch.setenv(config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:1:q")
    config.reset_settings()
    messages.send_invocation("r1", 1)
    assert _events(lambda_api) == []
    (sent,) = _queued(config.settings().invocations_queue_url)
    assert json.loads(sent["Body"]) == {"type": "invoke", "runId": "r1", "seq": 1}
    target = messages.scheduler_target(messages.wire.Timer("r1", "s", "2030-01-01T00:00:00Z"))
    assert target["Arn"] == "arn:aws:sqs:us-east-1:1:q"


def test_the_local_lambda_api_refuses_what_lambda_would(
    lambda_api: lambda_async.AsyncInvokes,
) -> None:
    from botocore.exceptions import ClientError

    client = aws.client("lambda")
    with pytest.raises(ClientError) as unknown:
        client.invoke(FunctionName="nope", InvocationType="Event", Payload=b"{}")
    assert unknown.value.response["Error"]["Code"] == "ResourceNotFoundException"
    arn = lambda_async.function_arn(INVOKER_FUNCTION)
    with pytest.raises(ClientError) as sync:
        client.invoke(FunctionName=arn, Payload=b"{}")
    assert sync.value.response["Error"]["Code"] == "InvalidParameterValueException"
    with pytest.raises(ClientError) as bad:
        client.invoke(FunctionName=arn, InvocationType="Event", Payload=b"{nope")
    assert bad.value.response["Error"]["Code"] == "InvalidRequestContentException"
    answer = client.invoke(FunctionName=arn, InvocationType="Event", Payload=b'{"a": 1}')
    assert answer["StatusCode"] == 202
    assert _events(lambda_api) == [{"a": 1}]
