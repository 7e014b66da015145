"""Step calls on the fast path (protocol 1.3): a step's end and the next step's start are one
item write; resent calls, takeovers and ended runs still answer what is recorded."""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import aws, runs_store
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import run_items as items
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Run
from ezgh_engine.errors import StaleInvocation

from tests.api.steps_helpers import (
    WRITES,
    complete,
    free_lease,
    lease_token,
    start,
    steps_call,
    steps_of,
    stored_run,
    write_raw,
)


def test_an_end_and_the_next_start_are_one_write(aws_env: None) -> None:
    run = stored_run()
    token = lease_token(run)
    status, body, writes = steps_call(token, [start("a#1")])
    assert status == 200 and body["results"][0] == {
        "stepId": "a#1",
        "result": "started",
        "attempt": 1,
    }
    assert writes == ["UpdateItem"]
    status, body, writes = steps_call(token, [complete("a#1", {"n": 1}), start("b#1")])
    assert status == 200
    ended, started = body["results"]
    assert ended == {"stepId": "a#1", "result": "ok"}
    assert started["result"] == "started" and started["attempt"] == 1
    assert set(started["inline"]) == {"name", "order", "startedAt"}
    assert writes == ["UpdateItem"]  # one write for both ops, no lease transaction
    assert steps_of(run) == {"a#1": ("completed", 1), "b#1": ("running", 1)}

    status, body, writes = steps_call(token, [complete("b#1", 2, started["inline"])])
    assert status == 200 and body["results"] == [{"stepId": "b#1", "result": "ok"}]
    assert writes == ["PutItem"]
    assert steps_of(run) == {"a#1": ("completed", 1), "b#1": ("completed", 1)}
    events, _ = runs_store.list_events(run.id, limit=100, cursor=None)
    done = [(e["type"], e["stepId"], e.get("deploymentId")) for e in events]
    assert done == [("step.completed", "a#1", "dep-1"), ("step.completed", "b#1", "dep-1")]


def test_a_resent_call_answers_the_same_without_a_second_effect(aws_env: None) -> None:
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    ops = [complete("a#1", "x"), start("b#1")]
    first = steps_call(token, ops)[1]["results"]
    again = steps_call(token, ops)[1]["results"]
    assert again[0]["result"] == "recorded" and again[0]["step"]["output"] == "x"
    assert again[1]["result"] == "started" and again[1]["attempt"] == first[1]["attempt"] == 1
    # Started again without `inline` (the step has an item now): its end updates that item.
    status, body, _ = steps_call(token, [complete("b#1", "y")])
    assert status == 200 and body["results"][0]["result"] == "ok"
    assert steps_of(run) == {"a#1": ("completed", 1), "b#1": ("completed", 1)}


def test_a_step_started_inline_by_a_dead_invocation_runs_again_as_attempt_2(
    aws_env: None,
) -> None:
    run = stored_run()
    old = lease_token(run)
    steps_call(old, [start("a#1")])
    inline = steps_call(old, [complete("a#1", 1), start("b#1")])[1]["results"][1]["inline"]
    free_lease(run)  # the invocation died with b running; the run is invoked again
    new = lease_token(run, seq=2)
    status, body, _ = steps_call(new, [start("b#1", attempt=2)])
    assert status == 200 and body["results"][0]["attempt"] == 2
    assert steps_of(run)["b#1"] == ("running", 2)
    # The old invocation, still alive, cannot record the step the new one owns.
    status, body, _ = steps_call(old, [complete("b#1", "stale", inline)])
    assert status == 409 and body["error"]["code"] == "invalid_state"
    status, body, _ = steps_call(new, [complete("b#1", "fresh")])
    assert body["results"][0]["result"] == "ok"
    found = runs_store.get_run(run.id)
    assert found is not None
    assert [(s.id, s.output) for s in found.steps] == [("a#1", 1), ("b#1", "fresh")]


@pytest.mark.parametrize("ending", ["timedOut", "taken over"])
def test_no_step_starts_in_a_run_that_ended_or_moved_on(aws_env: None, ending: str) -> None:
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    if ending == "timedOut":
        from ezgh_engine.service import timers

        timers.time_out(run.id)
    else:
        free_lease(run)
        lease_token(run, seq=2)
    status, body, writes = steps_call(token, [complete("a#1", 1), start("b#1")])
    assert status == 409 and body["error"]["code"] == "invalid_state"
    assert writes == []
    assert "b#1" not in steps_of(run)


def test_a_step_running_inline_when_the_run_times_out_is_cancelled(aws_env: None) -> None:
    from ezgh_engine.service import timers

    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    inline = steps_call(token, [complete("a#1", 1), start("b#1")])[1]["results"][1]["inline"]
    assert timers.time_out(run.id)
    assert steps_of(run) == {"a#1": ("completed", 1), "b#1": ("cancelled", 1)}
    # The invocation still running it cannot record it any more.
    status, body, _ = steps_call(token, [complete("b#1", "late", inline)])
    assert status == 409 and body["error"]["code"] == "invalid_state"


# --- the ends an invocation's answer carries (protocol 1.3 `ops`) ---------------------------


def _answer(run: Run, token: str, answer: dict[str, Any]) -> None:
    from ezgh_engine.protocol import outcomes as rules
    from ezgh_engine.service import outcomes

    claims = tokens.verify(config.settings().token_secret, token, clock.now_ms())
    leased = runs_store.get_run(run.id)
    assert leased is not None
    outcomes.apply_answer(
        leased,
        leased.invoke_seq,
        rules.parse(answer, clock.now()),
        answer.get("ops"),
        claims=claims,
        invocation_id=ids.time_ordered_id(),
        started_at=clock.iso(clock.now()),
    )


def test_an_answer_records_its_held_ends_with_its_outcome(aws_env: None) -> None:
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    answer = {"outcome": "completed", "output": "done", "ops": [complete("a#1", "A")]}
    _answer(run, token, answer)
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "completed" and found.output == "done"
    assert [(s.id, s.status, s.output) for s in found.steps] == [("a#1", "completed", "A")]


def test_an_answer_repeating_a_recorded_end_is_applied(aws_env: None) -> None:
    """The end was recorded already with the same output (a resent call got through): the
    outcome's transaction is refused on that step, the ends are applied one by one and agree,
    and the outcome is written."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    steps_call(token, [complete("a#1", "A")])
    _answer(run, token, {"outcome": "completed", "output": 1, "ops": [complete("a#1", "A")]})
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "completed"


def test_an_answer_whose_end_another_invocation_recorded_otherwise_is_not_applied(
    aws_env: None,
) -> None:
    """The workflow went on with a value the run does not hold: its outcome must not be
    written; the invoker invokes the run again (OpsConflict), and replay uses the record."""
    from ezgh_engine.service import outcomes

    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    steps_call(token, [complete("a#1", "recorded")])
    with pytest.raises(outcomes.OpsConflict) as raised:
        _answer(run, token, {"outcome": "completed", "output": 1, "ops": [complete("a#1", "x")]})
    assert raised.value.step_ids == ["a#1"]
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "running"
    assert found.steps[0].output == "recorded"


def test_an_answer_with_malformed_ops_is_refused_before_anything_is_written(
    aws_env: None,
) -> None:
    from ezgh_engine.errors import ValidationError

    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    for ops in (
        [start("b#1")],  # an answer may only end steps
        [complete("a#1", 1), complete("a#1", 2)],  # twice the same step
        "not a list",
    ):
        with pytest.raises(ValidationError):
            _answer(run, token, {"outcome": "completed", "output": 1, "ops": ops})
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "running"
    assert [(s.id, s.status) for s in found.steps] == [("a#1", "running")]


def test_a_resent_retryable_fail_answers_retry_even_once_the_retry_is_due(
    aws_env: None,
) -> None:
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    fail = {
        "op": "fail",
        "stepId": "a#1",
        "error": {"code": "user", "name": "E", "message": "m"},
        "retryable": True,
        "attempt": 1,
        "retries": 3,
    }
    first = steps_call(token, [fail])[1]["results"][0]
    assert first["result"] == "retry"
    write_raw(  # the retry's timer fired: it is due (no wake time)
        [
            {
                "Update": {
                    "TableName": config.settings().runs_table,
                    "Key": items.step_key(run.id, "a#1"),
                    "UpdateExpression": "REMOVE wakeAt",
                }
            }
        ]
    )
    again = steps_call(token, [fail])[1]["results"][0]  # the SDK resends after a 5xx
    assert again["result"] == "retry"  # not `recorded` (a StepError the workflow could catch)


def test_a_mark_of_an_earlier_run_attempt_is_not_a_running_step(aws_env: None) -> None:
    """RetryRun deletes a failed step; the mark that started it (on the step before) must
    not bring it back as running in the new attempt."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    steps_call(token, [complete("a#1", 1), start("b#1")])
    assert steps_of(run)["b#1"] == ("running", 1)
    write_raw(
        [
            {
                "Update": {
                    "TableName": config.settings().runs_table,
                    "Key": items.run_key(run.id),
                    "UpdateExpression": "SET attempt = :two",
                    "ExpressionAttributeValues": {":two": {"N": "2"}},
                }
            }
        ]
    )
    assert "b#1" not in steps_of(run)


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "start", "stepId": "a#1", "name": "a", "attempt": 0}],
        [{"op": "start", "stepId": "a#1", "name": "a", "attempt": "1"}],
        [{"op": "start", "stepId": "a#1", "name": "a", "attempt": True}],
        [{"op": "complete", "stepId": "a#1", "output": 1, "inline": "yes"}],
        [{"op": "complete", "stepId": "a#1", "output": 1, "inline": {"name": "a"}}],
        [
            {
                "op": "complete",
                "stepId": "a#1",
                "output": 1,
                "inline": {"name": "a", "order": "x" * 65, "startedAt": "t"},
            }
        ],
    ],
    ids=["attempt-0", "attempt-str", "attempt-bool", "inline-str", "inline-part", "inline-long"],
)
def test_a_malformed_attempt_or_inline_is_a_validation_error_and_writes_nothing(
    aws_env: None, ops: list[dict[str, Any]]
) -> None:
    run = stored_run()
    token = lease_token(run)
    status, body, writes = steps_call(token, ops)
    assert status == 400 and body["error"]["code"] == "validation_error"
    assert writes == []
    assert steps_of(run) == {}


# --- an outcome's writes ahead of its commit ----------------------------------------------
# An end, or a suspend on sleeps, writes its other items first (the held ends, a new sleeping
# step, the previous outcome's event) and commits with one conditional write of the run item,
# which carries the outcome's own event (`lastOut`). A crash between the two is injected at
# the boto3 seam: the run item's commit is never sent.


class Crash(Exception):
    """The invocation's process died before its request left."""


def _crash_at_commit(run: Run) -> Any:
    """Fail the write that commits an outcome of `run` (the run item's update that sets its
    outcome event) as a crash would: nothing is sent. Answers the function that stops it."""

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        names = params.get("ExpressionAttributeNames", {}).values()
        if (
            service == "dynamodb"
            and operation == "UpdateItem"
            and params.get("Key") == items.run_key(run.id)
            and items.OUTCOME_ATTR in names
        ):
            raise Crash()

    return aws.intercept(hook)


def _events(run: Run) -> list[str]:
    page, _ = runs_store.list_events(run.id, limit=1000, cursor=None)
    return [str(e["type"]) for e in page]


def _sleep(step: str, seconds: int = 3600) -> dict[str, Any]:
    return {"stepId": step, "name": step.split("#")[0], "kind": "sleep", "seconds": seconds}


def _wake(run: Run, step: str = "s#1") -> None:
    """The sleep's timer fires: the step completes and the run asks for an invocation."""
    from ezgh_engine.adapters import steps_store

    marks = steps_store.event_marks(ids.time_ordered_id(), 1, None)
    at = clock.iso(clock.now())
    wake_at = steps_store.get_step(run.id, step).wake_at or ""
    assert inv.wake_sleep(run.id, step, wake_at=wake_at, ended_at=at, marks=marks) == "woke"


def _assert_completed_once(run: Run) -> None:
    """The run ended `done` once: `a#1` ran once, and the crashed end left no event of its
    own beside the retry's."""
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "completed" and found.output == "done"
    assert [(s.id, s.status, s.attempt) for s in found.steps] == [("a#1", "completed", 1)]
    assert _events(run) == [
        "step.completed",
        "invocation.started",
        "invocation.completed",
        "run.completed",
    ]


def _writes_of(run: Run, token: str, answer: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    stop = aws.observe(
        lambda r: seen.append(r["operation"]) if r["service"] == "dynamodb" else None
    )
    try:
        _answer(run, token, answer)
    finally:
        stop()
    return [o for o in seen if o in WRITES]


def test_a_suspend_and_an_end_commit_without_a_transaction(aws_env: None) -> None:
    """Each item alone: the held end, the new sleep, then the run item; at the end the
    suspend's event goes out as its own item before the run item takes the end's."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    answer = {"outcome": "suspended", "waits": [_sleep("s#1")], "ops": [complete("a#1", 1)]}
    assert _writes_of(run, token, answer) == ["UpdateItem", "PutItem", "UpdateItem"]
    _wake(run)
    token = lease_token(run, seq=2)
    steps_call(token, [start("b#1")])
    answer = {"outcome": "completed", "output": "done", "ops": [complete("b#1", 2)]}
    assert _writes_of(run, token, answer) == ["UpdateItem", "PutItem", "UpdateItem"]
    assert _events(run) == [
        "invocation.started",
        "step.completed",
        "invocation.suspended",
        "step.completed",
        "invocation.started",
        "step.completed",
        "invocation.completed",
        "run.completed",
    ]


def test_a_crash_before_an_end_commits_leaves_no_phantom_event_and_the_retry_ends_once(
    aws_env: None,
) -> None:
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    answer = {"outcome": "completed", "output": "done", "ops": [complete("a#1", "A")]}
    stop = _crash_at_commit(run)
    try:
        with pytest.raises(Crash):
            _answer(run, token, answer)
    finally:
        stop()
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "running" and found.handled_seq == 0
    # The held end went ahead: a step this epoch ran, recorded as step calls record it.
    assert [(s.id, s.status, s.output) for s in found.steps] == [("a#1", "completed", "A")]
    assert _events(run) == ["step.completed"]  # no invocation's outcome, no run end
    # The lease runs out; the next invocation replays and answers the same.
    free_lease(run)
    token = lease_token(run, seq=2)
    _answer(run, token, answer)
    _assert_completed_once(run)


def test_a_crash_after_the_previous_outcome_went_out_lists_it_once(aws_env: None) -> None:
    """The end wrote the suspend's event item, then died before its commit: the run item
    still carries that event too; it is one event, and the retry's end adds its own once."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    suspended = {"outcome": "suspended", "waits": [_sleep("s#1")], "ops": [complete("a#1", 1)]}
    _answer(run, token, suspended)
    _wake(run)
    token = lease_token(run, seq=2)
    steps_call(token, [start("b#1")])
    ended = {"outcome": "completed", "output": "done", "ops": [complete("b#1", 2)]}
    stop = _crash_at_commit(run)
    try:
        with pytest.raises(Crash):
            _answer(run, token, ended)
    finally:
        stop()
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "running" and found.handled_seq == 1
    assert [e for e in _events(run) if e != "invocation.started"] == [
        "step.completed",
        "invocation.suspended",
        "step.completed",
        "step.completed",  # b#1's end went ahead
    ]
    free_lease(run)
    token = lease_token(run, seq=3)
    _answer(run, token, ended)
    types = _events(run)
    assert types.count("invocation.suspended") == 1 and types.count("run.completed") == 1
    assert types.count("invocation.completed") == 1 and types.count("invocation.started") == 2
    assert types.count("step.completed") == 3


def test_a_suspend_retried_after_a_crash_rewrites_the_same_sleep(aws_env: None) -> None:
    """The sleep's item went ahead, the commit did not; the same answer applied again (as a
    retried delivery of the same outcome would) finds its sleep written and commits once."""
    from ezgh_engine.protocol import outcomes as rules
    from ezgh_engine.service import outcomes

    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    answer = {"outcome": "suspended", "waits": [_sleep("s#1")], "ops": [complete("a#1", 1)]}
    claims = tokens.verify(config.settings().token_secret, token, clock.now_ms())
    leased = runs_store.get_run(run.id)  # as the invocation read it, before its answer
    assert leased is not None
    invocation = ids.time_ordered_id()

    def apply() -> None:
        outcomes.apply_answer(
            leased,
            1,
            rules.parse(answer, clock.now()),
            answer["ops"],
            claims=claims,
            invocation_id=invocation,
            started_at=clock.iso(clock.now()),
        )

    stop = _crash_at_commit(run)
    try:
        with pytest.raises(Crash):
            apply()
    finally:
        stop()
    assert steps_of(run) == {"a#1": ("completed", 1), "s#1": ("sleeping", 1)}
    assert _events(run) == ["step.completed"]
    apply()
    found = runs_store.get_run(run.id)
    assert found is not None and found.handled_seq == 1 and found.lease_until_ms == 0
    assert steps_of(run) == {"a#1": ("completed", 1), "s#1": ("sleeping", 1)}
    assert _events(run) == ["invocation.started", "step.completed", "invocation.suspended"]
    # Applied once: the same answer again is refused and lists nothing new.
    with pytest.raises(StaleInvocation):
        _answer(run, token, answer)
    assert _events(run) == ["invocation.started", "step.completed", "invocation.suspended"]


def test_an_invoker_that_dies_before_its_commit_ends_the_run_once_when_redelivered(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """Through the invoker: the app runs a step and answers `completed`; the invoker dies
    before the run item's write. Its message comes back: held while the dead lease lives,
    then a new epoch replays (the step is recorded) and ends the run, with one outcome."""
    from datetime import timedelta
    from types import SimpleNamespace

    from ezgh_engine.service import invoker

    run = stored_run()
    sent: list[list[str]] = []

    def invoke_app(app: Any, request: dict[str, Any]) -> Any:
        recorded = [s["id"] for s in request["steps"]]
        sent.append(recorded)
        if recorded:  # replay: the step's end is recorded
            return {"protocol": "1.4", "outcome": "completed", "output": "done"}
        steps_call(request["api"]["token"], [start("a#1")])
        return {"protocol": "1.4", "outcome": "completed", "output": "done",
                "ops": [complete("a#1", "A")]}  # fmt: skip

    app = SimpleNamespace(kind="push", name="app", notifications=None, protocol="1.5")
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: app)
    monkeypatch.setattr(invoker, "invoke_app", invoke_app)
    stop = _crash_at_commit(run)
    try:
        with pytest.raises(Crash):
            invoker.invoke(run.id, 1)
    finally:
        stop()
    assert _events(run) == ["step.completed"]
    assert invoker.invoke(run.id, 1) is not None  # the dead invocation's lease still lives
    skip_clock.advance(timedelta(hours=1))
    assert invoker.invoke(run.id, 1) is None
    assert sent == [[], ["a#1"]]
    _assert_completed_once(run)


def test_an_answer_of_an_invocation_taken_over_writes_no_step_end(aws_env: None) -> None:
    """Its lease ran out and a newer epoch holds the run: the answer's held end is not
    written ahead (the run is read first, as for a step call), and the outcome is refused."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    stale = runs_store.get_run(run.id)  # as the old invocation read it
    free_lease(run)
    lease_token(run, seq=2)
    claims = tokens.verify(config.settings().token_secret, token, clock.now_ms())
    from ezgh_engine.protocol import outcomes as rules
    from ezgh_engine.service import outcomes

    answer = {"outcome": "completed", "output": "done", "ops": [complete("a#1", "A")]}
    assert stale is not None
    with pytest.raises(StaleInvocation):
        outcomes.apply_answer(
            stale,
            1,
            rules.parse(answer, clock.now()),
            answer["ops"],
            claims=claims,
            invocation_id=ids.time_ordered_id(),
            started_at=clock.iso(clock.now()),
        )
    assert steps_of(run) == {"a#1": ("running", 1)}
    assert _events(run) == []
