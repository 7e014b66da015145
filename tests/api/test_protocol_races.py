"""Races a review of protocol 1.3 found (each a run that got stuck or a replay that saw
another value), driven through the real handlers on in-process moto."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import waits_store as ws

from tests.api.steps_helpers import (
    complete,
    free_lease,
    lease_token,
    start,
    steps_call,
    stored_run,
    write_raw,
)

APP = SimpleNamespace(kind="push", name="app", notifications=None, protocol="1.5")


def _raw_run(run_id: str) -> dict[str, Any]:
    got = ws.get(items.run_pk(run_id), items.RUN_SK)
    assert got is not None
    return got


def _sleeping(run_id: str, wake: str) -> None:
    """The run suspended on a sleep: step sleeping, lease released, its reason handled."""
    write_raw(
        [
            ws.plain_put(
                {
                    "pk": items.run_pk(run_id),
                    "sk": items.STEP_PREFIX + "nap#1",
                    "type": "step",
                    "runId": run_id,
                    "stepId": "nap#1",
                    "name": "nap",
                    "kind": "sleep",
                    "status": "sleeping",
                    "attempt": 1,
                    "order": ids.time_ordered_id(),
                    "startedAt": wake,
                    "wakeAt": wake,
                }
            ),
            {
                "Update": {
                    "TableName": config.settings().runs_table,
                    "Key": items.run_key(run_id),
                    "UpdateExpression": "SET leaseUntil = :z, handledSeq = invokeSeq",
                    "ExpressionAttributeValues": {":z": {"N": "0"}},
                }
            },
        ]
    )


def test_a_timer_whose_handler_died_after_waking_the_sleep_still_invokes_the_run(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The wake-up write took the lease (so the outbox sends nothing); the handler failed
    before invoking. The timer's redelivery finds the sleep awake and the run still owed:
    it invokes it once the dead handler's lease has ended, instead of dropping the message."""
    from ezgh_engine.errors import TransientError
    from ezgh_engine.service import invocation_queue, invoker

    run = stored_run()
    lease_token(run)
    wake = clock.iso(clock.now() - timedelta(seconds=5))
    _sleeping(run.id, wake)
    answers = {"throttled": True}

    def get_app(*_: Any, **__: Any) -> Any:
        if answers.pop("throttled", False):
            raise TransientError("DynamoDB is busy (ThrottlingException); try again")
        return APP

    monkeypatch.setattr(invoker.registry_store, "get_app", get_app)
    monkeypatch.setattr(
        invoker, "invoke_app", lambda app, request: {"outcome": "completed", "output": 7}
    )
    body = json.dumps({"type": "timer", "runId": run.id, "stepId": "nap#1", "wakeAt": wake})
    record = {"messageId": "m1", "body": body}
    assert invocation_queue.handle_batch([record]) == ["m1"]  # failed after the wake: redelivered
    assert invocation_queue.handle_batch([record]) == ["m1"]  # held while the dead lease lasts
    assert _raw_run(run.id)["status"] == "running"
    skip_clock.advance(timedelta(minutes=7))  # past the lease (invoke timeout + margin)
    assert invocation_queue.handle_batch([record]) == []
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed" and done.output == 7


def test_a_losing_complete_does_not_replace_the_recorded_large_output(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large outputs live in S3; each candidate has its own path, so a stale invocation's
    refused complete leaves the recorded one (the one the run went on with) in place."""
    from ezgh_engine.service import runs, wire

    monkeypatch.setenv(config.ENV_PAYLOAD_THRESHOLD, "100")
    config.reset_settings()
    run = stored_run()
    old = lease_token(run)
    steps_call(old, [start("a#1")])
    free_lease(run)
    new = lease_token(run, seq=2)
    assert steps_call(new, [start("a#1", attempt=2)])[0] == 200
    mine = "X" * 500
    assert steps_call(new, [complete("a#1", mine)])[1]["results"][0]["result"] == "ok"
    status, _, _ = steps_call(old, [complete("a#1", "Y" * 500), start("b#1")])
    assert status == 409
    found = runs_store.get_run(run.id)
    assert found is not None
    step = next(s for s in found.steps if s.id == "a#1")
    assert wire.step_body(run.project_id, run.id, step)["output"] == mine
    assert step.output_ref and step.output_ref.startswith("steps/a%231/")
    principal = SimpleNamespace(project_id=run.project_id)
    monkeypatch.setattr(runs, "_visible_run", lambda *a, **k: found)
    assert runs.get_payload(principal, run.id, step.output_ref) == mine  # type: ignore[arg-type]


def test_an_invocation_that_aborts_while_it_holds_the_run_is_invoked_again(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The SDK answers `aborted` while its lease is live (a held end came back recorded
    otherwise, or its token ran out): the engine must invoke the run again, not drop it."""
    from ezgh_engine.service import invoker

    run = stored_run()
    answers = [
        {"protocol": "1.3", "outcome": "aborted", "reason": "step a#1 recorded otherwise"},
        {"protocol": "1.3", "outcome": "completed", "output": "replayed"},
    ]
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", lambda app, request: answers.pop(0))
    retry = invoker.invoke(run.id, 1)
    assert retry is not None  # the message comes back...
    assert _raw_run(run.id)["status"] == "running"
    skip_clock.advance(timedelta(seconds=retry.after_seconds + 1))
    assert invoker.invoke(run.id, 1) is None  # ...and the run is invoked again
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "completed" and done.output == "replayed"


def test_a_stale_invocations_aborted_answer_changes_nothing(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `aborted` answer from an invocation whose lease was taken over is dropped: its
    back-off is refused by the epoch condition, and the new owner's lease stands."""
    from ezgh_engine.adapters import invocations_store as inv
    from ezgh_engine.service import invoker

    run = stored_run()
    leased = inv.take_lease(run.id, 1, now_ms=clock.now_ms(), lease_ms=600_000)
    assert leased is not None
    free_lease(run)
    lease_token(run, seq=2)  # another invocation took the run over
    until = _raw_run(run.id)["leaseUntil"]
    assert invoker._invoke_again(leased) is None
    assert _raw_run(run.id)["leaseUntil"] == until
