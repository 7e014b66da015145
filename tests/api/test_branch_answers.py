"""A branch invocation's answer that carries its step's end (docs/protocol.md section 7):
the lease take started the step, and the invoker writes the end, the lease's release and the
invocation's events in one conditional write of the step. A duplicate or late answer records
nothing twice; an app that does not answer within the invoke timeout fails its step at once.
"""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, NoReturn

import httpx
import pytest
from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb, push, runs_store, steps_store
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core import leases
from ezgh_engine.core.models import App, RunError
from ezgh_engine.protocol import ops as protocol_ops
from ezgh_engine.service import branch_answers, branches, stream

from tests.api.test_branch_outcomes import STEP, _app, _run_with_branch


def _step(run_id: str) -> dict[str, Any]:
    return ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}


def _event_items(run_id: str) -> list[dict[str, Any]]:
    answer = client("dynamodb").query(
        TableName=settings().runs_table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :evt)",
        ExpressionAttributeValues={":pk": {"S": items.run_pk(run_id)}, ":evt": {"S": "EVT#"}},
    )
    return list(answer.get("Items", []))


class App_:
    """A push app of the new shape: it finds its step started (`branch.attempt`) and answers
    its end in `ops`, making no step call."""

    def __init__(self, ops: list[dict[str, Any]] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.ops = ops

    def __call__(self, app: App, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        ops = self.ops or [{"op": "complete", "stepId": STEP, "output": "done"}]
        return {
            "protocol": "1.5",
            "deploymentId": "d1",
            "outcome": "branch",
            "stepId": STEP,
            "ops": ops,
        }


def _serve(monkeypatch: pytest.MonkeyPatch, app: Any) -> None:
    monkeypatch.setattr(branches, "invoke_app", app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))


def test_the_answer_s_end_is_one_write_with_the_lease_and_the_events(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _run_with_branch()
    app = App_()
    _serve(monkeypatch, app)
    assert branches.invoke_branch(run_id, STEP) is None
    request = app.requests[0]
    assert request["branch"] == {"stepId": STEP, "attempt": 1}
    sent = next(s for s in request["steps"] if s["id"] == STEP)
    assert sent["status"] == "running" and sent["attempt"] == 1  # the lease take started it
    step = _step(run_id)
    assert step["status"] == "completed" and step["output"] == '"done"'
    assert int(step["branchLeaseUntil"]) == 0 and int(step["attempt"]) == 1
    assert step["deploymentId"] == "d1" and step.get("evtId")
    (mark,) = step["bOut"]
    assert mark["k"] == "branch" and mark["d"] == "d1"
    assert _event_items(run_id) == []  # no event item: the step carries the invocation's


def test_a_duplicate_answer_records_nothing_twice(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _run_with_branch()
    _serve(monkeypatch, App_())
    branches.invoke_branch(run_id, STEP)
    first = _step(run_id)
    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None
    again = protocol_ops.Complete(STEP, '"other"')
    written = branch_answers.finish(
        run, 1, 1, again, invocation_id=ids.time_ordered_id(), started_at="x", deployment_id=None
    )
    assert written is False
    assert _step(run_id) == first  # the same output, one invocation's events
    # The branch message delivered again finds the step ended: no second invocation.
    assert branches.invoke_branch(run_id, STEP) is None


def test_a_late_answer_of_an_attempt_another_delivery_took_is_refused(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The first delivery's lease ran out and the next took the step (epoch 2, attempt 2):
    the first's answer, arriving now, writes nothing; the second's records the end."""
    run_id = _run_with_branch()
    lease_ms = leases.lease_ms(settings().invoke_timeout_seconds)
    now = clock.now_ms()
    take = steps_store.take_branch_lease
    assert take(run_id, STEP, now_ms=now, lease_ms=lease_ms, started_at="t1") is not None
    skip_clock.advance(timedelta(milliseconds=lease_ms + 1000))
    taken = take(run_id, STEP, now_ms=clock.now_ms(), lease_ms=lease_ms, started_at="t2")
    assert taken is not None and int(taken["attempt"]) == 2 and int(taken["branchEpoch"]) == 2
    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None
    late = protocol_ops.Complete(STEP, '"late"')
    kw: dict[str, Any] = {"invocation_id": ids.time_ordered_id(), "started_at": "t1"}
    assert not branch_answers.finish(run, 1, 1, late, deployment_id=None, **kw)
    assert _step(run_id)["status"] == "running" and "bOut" not in _step(run_id)
    mine = protocol_ops.Complete(STEP, '"mine"')
    kw = {"invocation_id": ids.time_ordered_id(), "started_at": "t2"}
    assert branch_answers.finish(run, 2, 2, mine, deployment_id=None, **kw)
    step = _step(run_id)
    assert step["status"] == "completed" and step["output"] == '"mine"'


def test_a_retryable_failure_in_the_answer_waits_for_its_retry_with_the_lease_released(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _run_with_branch()
    error = {"code": "user", "name": "RuntimeError", "message": "boom"}
    fail = {
        "op": "fail",
        "stepId": STEP,
        "error": error,
        "retryable": True,
        "attempt": 1,
        "retries": 3,
    }
    _serve(monkeypatch, App_([fail]))
    assert branches.invoke_branch(run_id, STEP) is None
    step = _step(run_id)
    assert step["status"] == "retrying" and step.get("wakeAt") and int(step["attempt"]) == 1
    assert int(step["branchLeaseUntil"]) == 0 and len(step["bOut"]) == 1
    retrying = [i for i in _event_items(run_id) if i["type"]["S"] == "step.retrying"]
    assert len(retrying) == 1


def test_an_answer_whose_ops_end_another_step_is_a_failed_delivery(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _run_with_branch()
    _serve(monkeypatch, App_([{"op": "complete", "stepId": "other#1", "output": 1}]))
    retry = branches.invoke_branch(run_id, STEP)
    assert retry is not None  # backs off; the step is not ended by it
    step = _step(run_id)
    assert step["status"] == "running" and int(step["branchFailures"]) == 1
    # The app answered: its step's body may have run, so the attempt the lease take started
    # counts (the next delivery starts attempt 2).
    assert int(step["attempt"]) == 1 and int(step["startEpoch"]) == 1


def _refused() -> NoReturn:
    """What `adapters.push` raises when no connection could be made."""
    raise push.AppNotReached("could not reach app: ConnectError")


def _through_push(monkeypatch: pytest.MonkeyPatch, post: Any) -> None:
    """The real `push.invoke_app`, its HTTP post replaced by `post`."""
    monkeypatch.setattr(branches, "invoke_app", push.invoke_app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    monkeypatch.setattr(push, "check_target", lambda url: SimpleNamespace(url=url, address=None))
    monkeypatch.setattr(push, "pinned_post", post)


def _attempts_seen(
    run_id: str, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock, failing: Any
) -> list[int]:
    """Deliver the branch until it ends: `failing` answers the first two requests (pushed
    through `adapters.push`), then the app completes the step; the attempts it was sent."""
    seen: list[int] = []
    answering = App_()

    def post(target: Any, *, content: bytes, headers: Any, timeout: float) -> httpx.Response:
        request = json.loads(content)
        seen.append(request["branch"]["attempt"])
        if len(seen) < 3:
            return failing()  # type: ignore[no-any-return]
        return httpx.Response(200, json=answering(_app("p"), request))

    _through_push(monkeypatch, post)
    _deliver_until_handled(run_id, skip_clock)
    return seen


def _deliver_until_handled(run_id: str, skip_clock: clock.SkipClock, tries: int = 5) -> None:
    """The branch message delivered again each time it asks to come back (up to `tries`)."""
    for _ in range(tries):
        retry = branches.invoke_branch(run_id, STEP)
        if retry is None:
            return
        skip_clock.advance(timedelta(seconds=retry.after_seconds))


def test_a_delivery_that_never_reached_the_app_gives_its_attempt_back(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """No connection could be made: the step's body never ran, and an outage uses up none
    of its retries."""
    run_id = _run_with_branch()

    def refused() -> NoReturn:
        raise httpx.ConnectError("connection refused")

    assert _attempts_seen(run_id, monkeypatch, skip_clock, refused) == [1, 1, 1]
    step = _step(run_id)
    assert step["status"] == "completed" and int(step["attempt"]) == 1


def test_a_5xx_after_the_request_went_out_counts_its_attempt(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The app got the request and failed (a 5xx, or a connection dropped mid-answer):
    the step's body may have run, so the next delivery starts the next attempt and the
    attempt number never repeats for two executions that may both have had effects."""
    run_id = _run_with_branch()
    answers = iter([httpx.Response(502), httpx.ReadError("connection reset")])

    def failing() -> httpx.Response:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert _attempts_seen(run_id, monkeypatch, skip_clock, failing) == [1, 2, 3]
    step = _step(run_id)
    assert step["status"] == "completed" and int(step["attempt"]) == 3


def test_an_aborted_answer_counts_the_attempt_its_lease_take_started(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `aborted` answer says a step call was refused as stale; it may be the step's end
    (`complete`, after its body ran), so the attempt counts: the next delivery starts the
    next one."""
    run_id = _run_with_branch()

    def aborts(app: App, request: dict[str, Any]) -> dict[str, Any]:
        return {"protocol": "1.5", "deploymentId": "d1", "outcome": "aborted", "reason": "x"}

    _serve(monkeypatch, aborts)
    assert branches.invoke_branch(run_id, STEP) is not None
    step = _step(run_id)
    assert step["status"] == "running" and int(step["attempt"]) == 1
    assert int(step["branchLeaseUntil"]) == 0  # released: the next delivery takes it now
    app = App_()
    _serve(monkeypatch, app)
    assert branches.invoke_branch(run_id, STEP) is None
    assert app.requests[0]["branch"]["attempt"] == 2
    assert int(_step(run_id)["attempt"]) == 2


def test_a_branch_whose_app_times_out_fails_its_step_at_once(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The engine started the step when it took the lease, so it cannot tell an app that
    never reached the step from one still in its body: its invocation had the whole limit,
    and the step fails `workflows.step_timed_out` at once (never run again beside a body
    that may still be running); the run is invoked to replay it."""
    run_id = _run_with_branch()
    calls: list[dict[str, Any]] = []

    def silent(app: App, request: dict[str, Any]) -> dict[str, Any]:
        calls.append(request)
        skip_clock.advance(timedelta(seconds=settings().invoke_timeout_seconds))
        raise push.AppTimedOut("app did not answer within the invoke timeout")

    _serve(monkeypatch, silent)
    assert branches.invoke_branch(run_id, STEP) is None
    step = _step(run_id)
    assert step["status"] == "failed" and step["error"]["code"] == "workflows.step_timed_out"
    assert len(calls) == 1 and int(step["branchLeaseUntil"]) == 0


def test_a_retried_delivery_starts_the_same_attempt_again(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """The app could not be reached twice, then answered: its step ran as attempt 1."""
    run_id = _run_with_branch()
    answering = App_()
    seen: list[int] = []

    def flaky(app: App, request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request["branch"]["attempt"])
        if len(seen) < 3:
            _refused()
        return answering(app, request)

    _serve(monkeypatch, flaky)
    _deliver_until_handled(run_id, skip_clock)
    assert seen == [1, 1, 1]
    step = _step(run_id)
    assert step["status"] == "completed" and int(step["attempt"]) == 1
    assert "branchFailures" not in step and int(step["branchEpoch"]) == 3


def _all_events(run_id: str) -> list[dict[str, Any]]:
    found, cursor = runs_store.list_events(run_id, limit=2, cursor=None)
    while cursor is not None:  # small pages: the event items are read a page at a time
        more, cursor = runs_store.list_events(run_id, limit=2, cursor=cursor)
        found += more
    return found


def test_a_retried_run_keeps_the_events_of_the_failed_branch_it_runs_again(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RetryRun deletes the failed step so it runs again; the events of the invocation whose
    answer failed it were on that step's item: they are written out as event items first,
    so the run's history loses nothing."""
    run_id = _run_with_branch()
    error = {"code": "user", "name": "RuntimeError", "message": "boom"}
    _serve(monkeypatch, App_([{"op": "fail", "stepId": STEP, "error": error}]))
    assert branches.invoke_branch(run_id, STEP) is None
    assert _step(run_id)["status"] == "failed" and len(_step(run_id)["bOut"]) == 1
    before = _all_events(run_id)
    branch_events = [e for e in before if e.get("stepId") == STEP]
    assert {e["type"] for e in branch_events} >= {"invocation.started", "invocation.branch"}
    run = runs_store.get_run(run_id)
    assert run is not None
    at = clock.iso(clock.now())
    failed = RunError("user", "RuntimeError", "boom")
    assert control.end_now(run, "failed", failed, at=at)
    ended = runs_store.get_run(run_id)
    assert ended is not None
    control.retry(ended, at=at)
    assert _step(run_id) == {}  # deleted: it runs again
    after = _all_events(run_id)
    ids_after = [e["id"] for e in after]
    assert len(ids_after) == len(set(ids_after))  # one event per ID
    kept = {e["id"]: e for e in after}
    for event in branch_events:
        assert kept.get(event["id"]) == event
    assert [e["type"] for e in after][-2:] == ["run.failed", "run.retried"]


def test_a_branch_end_asks_for_its_run_unless_an_invocation_is_owed_already(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outbox sees a parallel step end and asks for the run's next invocation. While
    that invocation is owed and has not begun, later ends (later stream batches) make no
    write: the read of the run shows it owed, and it will read them when it begins."""
    run_id = _run_with_branch()
    _serve(monkeypatch, App_())
    assert branches.invoke_branch(run_id, STEP) is None
    after = _step(run_id)
    ended = {
        "OldImage": ddb.to_item({**after, "status": "running"}),
        "NewImage": ddb.to_item(after),
    }
    writes: list[Any] = []
    transact = stream.run_writes.transact

    def counted(intents: Any) -> bool:
        writes.append(intents)
        return transact(intents)

    monkeypatch.setattr(stream.run_writes, "transact", counted)
    stream.handle_record({"eventName": "MODIFY", "dynamodb": ended})  # one batch
    asked = runs_store.get_run(run_id, with_steps=False)
    assert asked is not None and asked.invoke_seq == 3 and len(writes) == 1
    stream.handle_record({"eventName": "MODIFY", "dynamodb": ended})  # a later batch
    again = runs_store.get_run(run_id, with_steps=False)
    assert again is not None and again.version == asked.version and len(writes) == 1
    # Once that invocation holds the run, an end may come after its read: asked again.
    ws_put = {**ws.get(items.run_pk(run_id), items.RUN_SK), "leaseUntil": clock.now_ms() + 60_000}
    client("dynamodb").put_item(TableName=settings().runs_table, Item=ddb.to_item(ws_put))
    stream.handle_record({"eventName": "MODIFY", "dynamodb": ended})
    leased = runs_store.get_run(run_id, with_steps=False)
    assert leased is not None and leased.invoke_seq == 4 and len(writes) == 2
