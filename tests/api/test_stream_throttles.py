"""No stream record waits on, or is dropped for, a throttle (service/stream.py): an invoke
or a schedule still throttled after the client's retries goes round through the invocations
queue, a schedule that cannot be deleted is left to fire harmlessly, and a reaction still
throttled is tried again in place while the stream's invocation has time. Throttles are
answered at the HTTP seam as AWS answers them (`aws.throttled_answer`)."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import botocore.endpoint
import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, ddb, messages
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.errors import TransientError
from ezgh_engine.service import stream, waits
from ezgh_engine.topology import TOPOLOGY

from tests.api.steps_helpers import stored_run
from tests.api.test_protocol_races import _sleeping

INVOKER_ARN = "arn:aws:lambda:us-east-1:123456789012:function:ezgh-invoker"


@pytest.fixture
def throttled(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """Every request of the services named in the answered set is throttled; botocore's
    backoff is recorded, not slept. The stream's environment: the invoker's ARN known."""
    monkeypatch.setenv("EZGH_INVOKER_FUNCTION_ARN", INVOKER_ARN)
    monkeypatch.setenv(config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:1:q")
    monkeypatch.setenv(TOPOLOGY.scheduler_group_env_var, "ezgh-timers")
    monkeypatch.setenv(TOPOLOGY.scheduler_role_env_var, "arn:aws:iam::123456789012:role/s")
    config.reset_settings()
    monkeypatch.setattr(botocore.endpoint, "time", types.SimpleNamespace(sleep=lambda s: None))
    services: set[str] = set()
    seen: list[str] = []

    def answer(service: str, operation: str, request: Any) -> Any:
        if service not in services:
            return None
        seen.append(f"{service}.{operation}")
        return aws.throttled_answer(service, operation, request)

    stop = aws.respond(answer)
    try:
        yield services
    finally:
        stop()


@pytest.fixture
def sent(aws_env: None) -> Iterator[list[tuple[dict[str, Any], int]]]:
    """What went to the invocations queue: (body, DelaySeconds)."""
    got: list[tuple[dict[str, Any], int]] = []

    def keep(record: dict[str, Any]) -> None:
        if record["operation"] == "SendMessage" and record["status"] == 200:
            params = record["params"]
            got.append((json.loads(params["MessageBody"]), int(params.get("DelaySeconds", 0))))

    stop = aws.observe(keep)
    try:
        yield got
    finally:
        stop()


def _record(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    change: dict[str, Any] = {"NewImage": ddb.to_item(new), "SequenceNumber": "100"}
    if old is not None:
        change["OldImage"] = ddb.to_item(old)
    return {"eventName": "MODIFY" if old else "INSERT", "dynamodb": change}


def test_a_start_whose_invoke_is_throttled_goes_through_the_queue(
    throttled: set[str], sent: list[tuple[dict[str, Any], int]]
) -> None:
    throttled.add("lambda")
    run = stored_run()
    raw = ws.get(items.run_pk(run.id), items.RUN_SK)
    assert raw is not None
    assert stream.handle_batch([_record(None, raw)]) == []
    assert sent == [({"type": "invoke", "runId": run.id, "seq": 1}, 0)]


def test_a_long_timer_whose_schedule_is_throttled_waits_in_the_queue(
    throttled: set[str], sent: list[tuple[dict[str, Any], int]]
) -> None:
    """The timer goes to the queue delayed as long as SQS allows; arriving early, it is
    scheduled again then (`resend_timer`)."""
    throttled.add("scheduler")
    run = stored_run()
    wake = clock.iso(clock.now() + timedelta(hours=2))
    _sleeping(run.id, wake)
    step = ws.get(items.run_pk(run.id), items.STEP_PREFIX + "nap#1")
    assert step is not None
    assert stream.handle_batch([_record(None, step)]) == []
    timer = {"type": "timer", "runId": run.id, "stepId": "nap#1", "wakeAt": wake}
    assert sent == [(timer, config.settings().sqs_max_delay_seconds)]


def test_a_schedule_that_cannot_be_deleted_is_left_to_fire(throttled: set[str]) -> None:
    throttled.add("scheduler")
    messages.drop_timer("r1", "$deadline", clock.iso(clock.now() + timedelta(days=2)))


def test_a_throttled_reaction_is_tried_again_in_place_while_there_is_time(
    throttled: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's end whose parent write is still throttled after the client's retries: the
    record is tried again (backoff, jitter) while the invocation has more than the reserve
    left, and not reported failed. Without the time, or for another error, it is reported
    (the mapping retries it)."""
    parent = stored_run()
    child = items.run_values(stored_run(parent_run_id=parent.id, parent_step_id="kid#1"))
    ended = {**child, "status": "completed", "output": "1"}
    throttles = [TransientError("DynamoDB is busy"), TransientError("still busy")]
    calls: list[str] = []

    def on_run_ended(image: dict[str, Any]) -> None:
        calls.append(str(image["id"]))
        if throttles:
            raise throttles.pop(0)

    slept: list[float] = []
    monkeypatch.setattr(waits, "on_run_ended", on_run_ended)
    monkeypatch.setattr(stream.time, "sleep", slept.append)
    record = _record(child, ended)
    assert stream.handle_batch([record], time_left=lambda: 50.0) == []
    assert len(calls) == 3 and len(slept) == 2
    assert all(0 < s <= stream.THROTTLE_BACKOFF_MAX for s in slept)
    throttles.append(TransientError("busy"))
    assert stream.handle_batch([record], time_left=lambda: stream.THROTTLE_RESERVE_SECONDS) == [
        "100"
    ]
    throttles.append(TransientError("busy"))
    assert stream.handle_batch([record]) == ["100"]  # no time given: the mapping retries


def test_another_error_is_not_retried_in_place(
    throttled: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def broken(image: dict[str, Any]) -> None:
        calls.append(1)
        raise ValueError("a bug")

    monkeypatch.setattr(waits, "on_run_ended", broken)
    child = items.run_values(stored_run())
    record = _record(child, {**child, "status": "failed"})
    assert stream.handle_batch([record], time_left=lambda: 50.0) == ["100"]
    assert calls == [1]
