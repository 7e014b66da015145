"""Races and stuck shapes a targeted attack found (stalled timers, cancels, RetryRun, expired
run keys, messages delivered twice, deleted apps), each reproduced on the real handlers on
in-process moto with a skipped clock and failures injected at the boto3 seam
(`adapters.aws.intercept`)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import runs_store
from ezgh_engine.core import tokens

from tests.api.steps_helpers import stored_run, write_raw
from tests.api.test_protocol_races import _raw_run, _sleeping

APP = SimpleNamespace(kind="push", name="app", notifications=None, protocol="1.5")


def _epoch_of(request: dict[str, Any]) -> int:
    claims = tokens.verify(config.settings().token_secret, request["api"]["token"], 0)
    return int(claims.epoch)


def test_a_timer_handler_that_stalls_past_its_lease_acts_only_on_the_epoch_it_took(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The wake-up write took epoch e; the handler stalls past the lease, and another
    invocation takes the run (epoch e + 1). The stalled handler must not invoke the app
    with e + 1 (two attempts at once) nor move that invocation's lease."""
    from ezgh_engine.service import invocation_queue, invoker

    run = stored_run()
    wake = clock.iso(clock.now() - timedelta(seconds=5))
    _sleeping(run.id, wake)
    real_get_run = invoker.runs_store.get_run
    taken: dict[str, Any] = {}

    def stalled_get_run(run_id: str, *args: Any, **kwargs: Any) -> Any:
        if not taken and kwargs.get(
            "with_steps", True
        ):  # the stall: the lease ends, a newer invocation leases the run
            skip_clock.advance(timedelta(minutes=7))
            raw = _raw_run(run_id)
            newer = inv.take_lease(
                run_id, int(raw["invokeSeq"]), now_ms=clock.now_ms(), lease_ms=600_000
            )
            assert newer is not None
            taken["run"] = newer
        return real_get_run(run_id, *args, **kwargs)

    invoked: list[int] = []

    def invoke_app(app: Any, request: dict[str, Any]) -> Any:
        invoked.append(_epoch_of(request))
        return {"protocol": "1.3", "outcome": "aborted", "reason": "test"}

    monkeypatch.setattr(invoker.runs_store, "get_run", stalled_get_run)
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", invoke_app)
    body = json.dumps({"type": "timer", "runId": run.id, "stepId": "nap#1", "wakeAt": wake})
    assert invocation_queue.handle_batch([{"messageId": "m1", "body": body}]) == []
    newer = taken["run"]
    assert invoked == []  # the newer epoch belongs to the newer invocation alone
    raw = _raw_run(run.id)
    assert int(raw["epoch"]) == newer.epoch
    assert int(raw["leaseUntil"]) == newer.lease_until_ms  # its live lease is untouched


def test_a_cancel_while_the_invocation_runs_ends_the_run_cancelled(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The invocation read `running`; a cancel comes while the app runs; the app answers
    `completed`. The end is conditional on the status it saw, so the run ends cancelled."""
    from ezgh_engine.adapters import run_control_store as control
    from ezgh_engine.service import invoker

    run = stored_run()

    def invoke_app(app: Any, request: dict[str, Any]) -> Any:
        current = runs_store.get_run(run.id, with_steps=False)
        assert current is not None
        control.request_cancel(current, at=clock.iso(clock.now()))
        return {"protocol": "1.3", "outcome": "completed", "output": "done"}

    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", invoke_app)
    assert invoker.invoke(run.id, 1) is None
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "cancelled" and done.output is None


def _fail(run_id: str) -> None:
    """The run ends `failed` as an invocation's answer would end it."""
    from ezgh_engine.core.models import RunError
    from ezgh_engine.protocol.outcomes import Outcome
    from ezgh_engine.service import outcomes

    from tests.api.steps_helpers import free_lease, lease_token

    leased = runs_store.get_run(run_id)
    assert leased is not None
    if leased.lease_until_ms < clock.now_ms() or leased.handled_seq >= leased.invoke_seq:
        # Only a live invocation with an unanswered reason may answer (a stale token must
        # not act): give the run one, as the invoker would.
        free_lease(leased)
        bumped = runs_store.get_run(run_id, with_steps=False)
        assert bumped is not None
        lease_token(bumped, bumped.invoke_seq)
        leased = runs_store.get_run(run_id)
        assert leased is not None
    error = RunError("boom", "Boom", "it failed")
    outcomes.apply(
        leased,
        leased.invoke_seq,
        Outcome("failed", error=error),
        invocation_id="inv-1",
        started_at=clock.iso(clock.now()),
    )


def test_retry_run_cuts_off_the_old_attempts_invocation(aws_env: None) -> None:
    """Attempt 1's token must not record steps once the run was retried: RetryRun takes a
    new epoch."""
    from ezgh_engine.adapters import run_control_store as control

    from tests.api.steps_helpers import lease_token, start, steps_call

    run = stored_run()
    old = lease_token(run)
    assert steps_call(old, [start("a#1")])[0] == 200
    _fail(run.id)
    failed = runs_store.get_run(run.id)
    assert failed is not None and failed.status == "failed"
    control.retry(failed, at=clock.iso(clock.now()))
    status, body, _ = steps_call(old, [start("b#1")])
    assert status == 409, body


def test_retry_run_after_a_timer_was_dropped_records_the_sleep_afresh(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """A run failed while a step slept; its timer fired while it was failed and was
    dropped. RetryRun must not leave that step `sleeping` with no timer: the new attempt
    records the sleep again (a new item, whose timer the stream sends)."""
    from ezgh_engine.adapters import run_control_store as control
    from ezgh_engine.service import invocation_queue, invoker

    run = stored_run()
    wake = clock.iso(clock.now() + timedelta(minutes=1))
    _sleeping(run.id, wake)
    _fail(run.id)
    skip_clock.advance(timedelta(minutes=2))
    timer = json.dumps({"type": "timer", "runId": run.id, "stepId": "nap#1", "wakeAt": wake})
    assert invocation_queue.handle_batch([{"messageId": "t1", "body": timer}]) == []  # dropped
    failed = runs_store.get_run(run.id)
    assert failed is not None and failed.status == "failed"
    control.retry(failed, at=clock.iso(clock.now()))
    sent: list[list[dict[str, Any]]] = []

    def invoke_app(app: Any, request: dict[str, Any]) -> Any:
        sent.append(request["steps"])
        nap = {"kind": "sleep", "stepId": "nap#1", "name": "nap", "seconds": 60}
        return {"protocol": "1.3", "outcome": "suspended", "waits": [nap]}

    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", invoke_app)
    retried = runs_store.get_run(run.id, with_steps=False)
    assert retried is not None
    assert invoker.invoke(run.id, retried.invoke_seq) is None
    assert [s for s in sent[0] if s.get("status") == "sleeping"] == []
    after = runs_store.get_run(run.id)
    assert after is not None and after.status == "running"
    nap = next(s for s in after.steps if s.id == "nap#1")
    assert nap.status == "sleeping" and nap.wake_at is not None and nap.wake_at > wake


def _synced_app(project: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from ezgh_engine.adapters import push

    app = project.call(
        "POST", "/apps", body={"name": "billing", "kind": "push", "url": "https://app.example.com/"}
    ).body
    monkeypatch.setattr(push, "sync_app", lambda _app: push.Synced(["onboarding"], "1.5"))
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200
    return dict(app)


def test_a_run_key_is_free_again_once_its_run_expired(
    project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TTL deleted the run's item (30 days after it ended); its key must start a new run,
    not answer `409 … being released` forever."""
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.adapters import waits_store as ws

    app = _synced_app(project, monkeypatch)
    body = {"appId": app["slug"], "workflow": "onboarding", "input": {}, "runKey": "k-1"}
    first = project.call("POST", "/runs", body=body)
    assert first.status == 201
    scope = items.run_key_scope(app["id"], "onboarding")
    key_item = ws.get(items.run_key_pk(project.project_id, "k-1", scope), "RUNKEY")
    assert key_item is not None and int(key_item["ttl"]) > 0  # the key expires too
    ws.transact([ws.delete(items.run_pk(first.body["id"]), items.RUN_SK)])  # as TTL does
    second = project.call("POST", "/runs", body=body)
    assert second.status == 201, second.body
    assert second.body["id"] != first.body["id"]
    again = project.call("POST", "/runs", body=body)
    assert again.status == 200 and again.body["id"] == second.body["id"]


Q1 = "00000000-0000-4000-8000-000000000001"


def _queue_record(run: Any, queue_id: str) -> None:
    """The queue `queue_id` in the run's project (a wait on a missing queue fails at once)."""
    from ezgh_engine.adapters import queues_store
    from ezgh_engine.core.queues import QueueRecord

    if queues_store.get_queue(run.project_id, queue_id) is None:
        url = "http://127.0.0.1:1/q"  # never called: the wait only reads the record
        queues_store.create_queue(
            QueueRecord(
                id=queue_id,
                org_id=run.org_id,
                project_id=run.project_id,
                name=f"q-{queue_id[-2:]}",
                fifo=False,
                max_receive_count=5,
                visibility_timeout_seconds=30,
                url=url,
                arn="arn:aws:sqs:us-east-1:000000000000:q",
                dlq_url=url,
                dlq_arn="arn:aws:sqs:us-east-1:000000000000:q-dlq",
                created_at=clock.iso(clock.now()),
            )
        )


def _message_wait(run: Any, step_id: str, queue_id: str, key: str) -> None:
    """The run waits on (queue, key) at `step_id`, as a suspend writes it."""
    from ezgh_engine.adapters import waits_store as ws
    from ezgh_engine.protocol.outcomes import Wait
    from ezgh_engine.service import waits

    _queue_record(run, queue_id)

    wait = Wait(kind="message", step_id=step_id, name=step_id.split("#")[0])
    wait = replace(wait, queue_id=queue_id, key=key)
    new = waits.suspend_writes(run, wait, at=clock.iso(clock.now()), order=step_id)
    assert new.launch is not None  # what the outbox makes once the suspend commits
    assert ws.transact(list(new.launch.items))


def _resume(run: Any, message: Any) -> int:
    """A resume subscription of the run's app and workflow delivers `message` (key order-1)."""
    from ezgh_engine.service import waits

    target = {"app_id": run.app_id, "workflow": run.workflow}
    return waits.resume_message_waiters(run.project_id, Q1, "order-1", message, **target)


def test_one_message_delivered_twice_resumes_one_wait(aws_env: None) -> None:
    """A workflow waits twice in a row on one queue and key; the first delivery's delete is
    lost and SQS delivers the message again while the second wait waits: it must not end
    the second wait with the same messageId (and is acknowledged, not retried)."""

    run = stored_run()
    message = {"messageId": "m-1", "body": "{}", "attributes": {"k": "order-1"}}
    _message_wait(run, "paid#1", Q1, "order-1")
    assert _resume(run, message) == 1
    _message_wait(run, "paid#2", Q1, "order-1")
    assert _resume(run, message) == 1
    steps = {s.id: s.status for s in (runs_store.get_run(run.id) or run).steps}
    assert steps == {"paid#1": "completed", "paid#2": "waiting"}
    other = dict(message, messageId="m-2")
    assert _resume(run, other) == 1
    after = runs_store.get_run(run.id)
    assert after is not None
    assert {s.id: s.status for s in after.steps} == {"paid#1": "completed", "paid#2": "completed"}


def test_a_failed_run_leaves_no_step_pending(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run fails while one step waits for its retry and another for a message: both end
    with the run (cancelled), none stays `retrying` or `waiting`."""
    from ezgh_engine.adapters import waits_store as ws
    from ezgh_engine.service import invoker

    run = stored_run()
    later = clock.iso(clock.now() + timedelta(hours=1))
    values = {"name": "a", "kind": "run", "status": "retrying", "attempt": 1, "order": "1"}
    assert ws.transact([ws.step_put(run.id, "a#1", {**values, "wakeAt": later})])
    _message_wait(run, "paid#1", Q1, "order-1")
    answer = {"protocol": "1.3", "outcome": "failed", "error": {"message": "x", "name": "E"}}
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", lambda app, request: answer)
    assert invoker.invoke(run.id, 1) is None
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "failed"
    assert {s.id: s.status for s in done.steps} == {"a#1": "cancelled", "paid#1": "cancelled"}
    index = ws.query_pk(ws.msgwait_pk(run.project_id, Q1, "order-1"))
    assert index == []


def _suspend_on_callback(run_id: str) -> None:
    """The run waits on a callback without a timeout: nothing is owed, no lease."""
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.adapters import waits_store as ws

    values = {"name": "approve", "kind": "callback", "status": "waiting", "attempt": 1}
    update = {
        "Update": {
            "TableName": config.settings().runs_table,
            "Key": items.run_key(run_id),
            "UpdateExpression": "SET leaseUntil = :z, handledSeq = invokeSeq",
            "ExpressionAttributeValues": {":z": {"N": "0"}},
        }
    }
    write_raw([ws.step_put(run_id, "approve#1", {**values, "order": "1"}), update])


def test_deleting_an_app_ends_its_live_runs_failed(
    project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of a deleted app waiting on a callback without a timeout would stay `running`
    for ever: deleting the app ends it `failed` with `workflows.app_deleted` at once, and
    leaves other apps' runs alone."""
    from ezgh_engine.service.ops import find_stuck_runs

    app = _synced_app(project, monkeypatch)
    other = project.call(
        "POST", "/apps", body={"name": "other", "kind": "push", "url": "https://o.example.com/"}
    ).body
    assert project.call("POST", f"/apps/{other['id']}/sync").status == 200
    start = {"appId": app["slug"], "workflow": "onboarding", "input": {}}
    waiting = project.call("POST", "/runs", body=start).body
    unrelated = project.call("POST", "/runs", body={**start, "appId": other["slug"]}).body
    for run in (waiting, unrelated):
        _suspend_on_callback(run["id"])
    assert project.call("DELETE", f"/apps/{app['id']}").status in (200, 204)
    ended = project.call("GET", f"/runs/{waiting['id']}").body
    assert ended["status"] == "failed", ended
    assert ended["error"]["code"] == "workflows.app_deleted"
    done = runs_store.get_run(waiting["id"])
    assert done is not None and [s.status for s in done.steps] == ["cancelled"]
    assert project.call("GET", f"/runs/{unrelated['id']}").body["status"] == "running"
    assert find_stuck_runs(project.project_id, older_than_seconds=0) == []


def _run_of(project_id: str, app_id: str, **changes: Any) -> Any:
    return stored_run(project_id=project_id, app_id=app_id, **changes)


def test_the_stuck_run_detector_reports_every_stuck_shape(
    aws_env: None, skip_clock: clock.SkipClock
) -> None:
    """Runs nothing will move although a step is pending: a sleep whose timer was dropped,
    a child wait whose child ended, a callback wait of a deleted app. A sleep still due
    later is healthy."""
    from ezgh_engine import ids
    from ezgh_engine.adapters import registry_store
    from ezgh_engine.adapters import waits_store as ws
    from ezgh_engine.core.models import App
    from ezgh_engine.service.ops import find_stuck_runs

    project = ids.new_id()
    now = clock.iso(clock.now())
    app = App(ids.new_id(), "wfa_x", "o", project, "x", "push", None, "synced", (), "k", now)
    registry_store.create_app(app)
    lost_timer = _run_of(project, app.id)
    _sleeping(lost_timer.id, clock.iso(clock.now() + timedelta(minutes=1)))
    healthy = _run_of(project, app.id)
    _sleeping(healthy.id, clock.iso(clock.now() + timedelta(days=3)))
    parent = _run_of(project, app.id)
    child = _run_of(project, app.id, status="completed", parent_run_id=parent.id)
    wait = {"name": "sub", "kind": "invoke", "status": "waiting", "attempt": 1, "order": "1"}
    assert ws.transact([ws.step_put(parent.id, "sub#1", {**wait, "childRunId": child.id})])
    _suspend_on_callback(parent.id)  # (and nothing owed)
    orphan = _run_of(project, ids.new_id())  # its app was deleted
    _suspend_on_callback(orphan.id)
    skip_clock.advance(timedelta(hours=1))
    found = {s.run_id: s.why for s in find_stuck_runs(project, older_than_seconds=300)}
    assert set(found) == {lost_timer.id, parent.id, orphan.id}
    assert "timer lost" in found[lost_timer.id]
    assert child.id in found[parent.id] and "ended completed" in found[parent.id]
    assert "was deleted" in found[orphan.id]


def test_a_child_wait_of_a_failed_parent_is_ended_and_retried_afresh(aws_env: None) -> None:
    """A parent fails while it waits on a child: the wait ends with it (the child is
    cancelled), so a child ending later has nothing to resume, and RetryRun starts the
    wait afresh instead of leaving the parent waiting on an end that was refused."""
    from ezgh_engine.adapters import run_control_store as control
    from ezgh_engine.adapters import waits_store as ws

    parent = stored_run()
    child = _run_of(parent.project_id, parent.app_id, parent_run_id=parent.id)
    wait = {"name": "sub", "kind": "invoke", "status": "waiting", "attempt": 1, "order": "1"}
    assert ws.transact([ws.step_put(parent.id, "sub#1", {**wait, "childRunId": child.id})])
    _fail(parent.id)
    failed = runs_store.get_run(parent.id)
    assert failed is not None and failed.status == "failed"
    assert [(s.id, s.status) for s in failed.steps] == [("sub#1", "cancelled")]
    cancelled = runs_store.get_run(child.id, with_steps=False)
    assert cancelled is not None and cancelled.status == "cancelling"
    control.retry(failed, at=clock.iso(clock.now()))
    retried = runs_store.get_run(parent.id)
    assert retried is not None and retried.status == "running" and retried.steps == ()
