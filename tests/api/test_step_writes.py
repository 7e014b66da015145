"""Step calls on the fast path (protocol 1.3): a step's end and the next step's start are one
item write; resent calls, takeovers and ended runs still answer what is recorded."""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Run

from tests.api.steps_helpers import (
    complete,
    free_lease,
    lease_token,
    start,
    steps_call,
    steps_of,
    stored_run,
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
    from ezgh_engine.core import outcomes as rules
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
    ws.transact(  # the retry's timer fired: it is due (no wake time)
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
    ws.transact(
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
