"""The step ops' planners, without a table: each op's decision from its typed
request, the invocation and what was drawn for it (`Fresh`), and from the step as re-read
after a refusal; the executor's batch composition; the lease checks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import ddb, run_writes
from ezgh_engine.adapters.intents import Intent
from ezgh_engine.core import retries, tokens
from ezgh_engine.core.models import RunError, Step
from ezgh_engine.core.protocol_rules import MAX_RETRIES, end_differs
from ezgh_engine.errors import Forbidden, ValidationError
from ezgh_engine.protocol import ops
from ezgh_engine.protocol.results import Ok, Recorded, RetryAt, Started
from ezgh_engine.service.step_ops import cancel, checks, end, executor, record, start
from ezgh_engine.service.step_ops.plan import Caller, Fresh, Plan

from tests.api.conftest import ENV

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MAIN = Caller(tokens.InvocationClaims("run-1", "proj-1", 3, 1, 10**13), "dep-1")
BRANCH = Caller(tokens.InvocationClaims("run-1", "proj-1", 7, 1, 10**13, "b#1"), "dep-1")
ERROR = {"code": "user", "name": "Boom", "message": "no"}


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The table names the builders address (no table is touched)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    config.reset_settings()
    yield
    config.reset_settings()


def fresh(n: int = 1, fraction: float = 0.5) -> Fresh:
    return Fresh(NOW, f"order-{n}", f"evt-{n}", fraction, 1_800_000_000)


def update(plan: Plan) -> dict[str, Any]:
    """The UpdateItem the write path makes of the plan's own step write."""
    assert plan.item is not None
    action = run_writes.request(plan.item)
    assert "Update" in action
    body: dict[str, Any] = action["Update"]
    return body


def values(body: dict[str, Any]) -> dict[str, Any]:
    return ddb.from_item(body.get("ExpressionAttributeValues", {}))


def put_item(intent: Intent) -> dict[str, Any]:
    """The item the write path puts for `intent`."""
    return ddb.from_item(run_writes.request(intent)["Put"]["Item"])


def step(status: Any, **fields: Any) -> Step:
    return Step(
        "a#1", "a", fields.pop("kind", "run"), status, fields.pop("attempt", 1), "o", **fields
    )


# --- start ---------------------------------------------------------------------------------


def test_a_new_first_attempt_is_set_exactly_and_may_ride_an_end() -> None:
    plan = start.plan(MAIN, fresh(), ops.Start("a#1", "a", 1), None, leased=False)
    assert plan.result == Started("a#1", 1)
    assert plan.rides == ops.InlineStart("a", "order-1", clock.iso(NOW))
    body = update(plan)
    assert body["ConditionExpression"] == "attribute_not_exists(pk)"
    assert values(body)[":attempt"] == 1 and values(body)[":epoch"] == 3


def test_a_later_attempt_needs_the_one_before_and_rides_nothing() -> None:
    plan = start.plan(MAIN, fresh(), ops.Start("a#1", "a", 2), None, leased=False)
    assert plan.result == Started("a#1", 2) and plan.rides is None
    body = update(plan)
    assert "attempt = :previous" in body["ConditionExpression"]
    assert values(body)[":previous"] == 1


@pytest.mark.parametrize(
    ("caller", "request_", "leased"),
    [
        (MAIN, ops.Start("a#1", "a"), True),  # no attempt given
        (MAIN, ops.Start("a#1", "a", 1), True),  # a refused batch, planned again
        (BRANCH, ops.Start("b#1", "b", 1), True),  # a branch's step: its branch epoch
    ],
)
def test_a_start_without_a_known_attempt_is_counted_and_read_back(
    caller: Caller, request_: ops.Start, leased: bool
) -> None:
    plan = start.plan(caller, fresh(), request_, None, leased=leased)
    assert plan.result is None and plan.rides is None
    assert "if_not_exists(attempt, :zero) + :one" in update(plan)["UpdateExpression"]


def test_a_refused_start_answers_the_running_attempt_or_what_is_recorded() -> None:
    plan = start.plan(MAIN, fresh(), ops.Start("a#1", "a", 1), None, leased=False)
    again = start.replan(plan, step("running", attempt=2), "t")
    assert again.result == Started("a#1", 2) and again.writes == []
    ended = start.replan(plan, step("completed"), "t")
    assert ended.result == Recorded("a#1") and ended.writes == []


# --- end: complete, fail, the retry budget --------------------------------------------------


def test_a_completion_updates_the_running_attempt_and_is_its_own_event() -> None:
    plan = end.plan(MAIN, fresh(), ops.Complete("a#1", '{"n":1}'), None, leased=False)
    assert plan.result == Ok("a#1") and plan.carries and plan.others == ()
    body = update(plan)
    assert "startEpoch = :epoch" in body["ConditionExpression"]
    assert values(body)[":output"] == '{"n":1}' and values(body)[":evtId"] == "evt-1"


def test_a_large_completion_writes_its_payload_path() -> None:
    plan = end.plan(MAIN, fresh(), ops.Complete("a#1", '"x"'), "steps/a/1.json", leased=False)
    assert values(update(plan))[":outputRef"] == "steps/a/1.json"
    assert ":output" not in values(update(plan))


def test_an_end_of_a_step_started_inline_puts_its_whole_item() -> None:
    inline = ops.InlineStart("a", "order-0", "2026-01-01T00:00:00.000Z")
    plan = end.plan(MAIN, fresh(), ops.Complete("a#1", "1", inline), None, leased=False)
    assert plan.item is not None
    item = put_item(plan.item)
    assert item["status"] == "completed" and item["order"] == "order-0"
    assert run_writes.request(plan.item)["Put"]["ConditionExpression"] == "attribute_not_exists(pk)"


def test_a_failure_without_retry_fails_the_step_with_an_event() -> None:
    request = ops.Fail("a#1", RunError.from_api(ERROR))
    plan = end.plan(MAIN, fresh(), request, None, leased=False)
    assert plan.result == Ok("a#1") and plan.carries
    assert values(update(plan))[":status"] == "failed"
    (event,) = plan.others
    assert put_item(event)["type"] == "step.failed" and put_item(event)["sk"] == "EVT#evt-1"


def test_a_retryable_failure_within_the_budget_waits_for_its_retry() -> None:
    request = ops.Fail("a#1", RunError.from_api(ERROR), True, attempt=2, retries=3)
    plan = end.plan(MAIN, fresh(fraction=0.25), request, None, leased=False)
    delay = retries.delay_seconds(2, 0.25)
    assert plan.result == RetryAt("a#1", clock.iso(NOW + timedelta(seconds=delay)))
    assert not plan.carries  # a start after it does not ride a step that is not ended
    assert values(update(plan))[":status"] == "retrying"
    assert put_item(plan.others[0])["type"] == "step.retrying"
    assert put_item(plan.others[0])["retryAt"] == plan.result.retry_at  # the backoff's end


@pytest.mark.parametrize(
    ("attempt", "allowed"), [(4, 3), (1, 0), (MAX_RETRIES + 1, MAX_RETRIES * 10)]
)
def test_a_failure_past_the_retry_budget_fails_the_step(attempt: int, allowed: int) -> None:
    request = ops.Fail("a#1", RunError.from_api(ERROR), True, attempt=attempt, retries=allowed)
    plan = end.plan(MAIN, fresh(), request, None, leased=False)
    assert plan.result == Ok("a#1")
    assert put_item(plan.others[0])["type"] == "step.failed"
    assert put_item(plan.others[0])["stepAttempt"] == attempt


def test_a_branch_step_ends_under_its_lease_and_releases_it_unless_it_retries() -> None:
    """(Its end asks for the run's next invocation through the outbox: service.stream.)"""
    done = update(end.plan(BRANCH, fresh(), ops.Complete("b#1", "1"), None, leased=True))
    assert "branchEpoch = :bepoch AND branchLeaseUntil >= :now" in done["ConditionExpression"]
    assert values(done)[":branchLeaseUntil"] == 0
    request = ops.Fail("b#1", RunError.from_api(ERROR), True, attempt=1, retries=2)
    retry = update(end.plan(BRANCH, fresh(), request, None, leased=True))
    assert "branchLeaseUntil" not in retry["UpdateExpression"]


def test_a_refused_retryable_failure_answers_its_retry_else_what_is_recorded() -> None:
    request = ops.Fail("a#1", RunError.from_api(ERROR), True, attempt=1, retries=2)
    plan = end.plan(MAIN, fresh(), request, None, leased=True)
    waiting = end.replan(plan, step("retrying", wake_at="later"), "now")
    assert waiting.result == RetryAt("a#1", "later") and waiting.writes == []
    assert end.replan(plan, step("retrying"), "now").result == RetryAt("a#1", "now")
    assert end.replan(plan, step("failed"), "now").result == Recorded("a#1")
    done = end.plan(MAIN, fresh(), ops.Complete("a#1", "1"), None, leased=True)
    assert end.replan(done, step("retrying"), "now").result == Recorded("a#1")


def test_a_held_end_recorded_with_another_outcome_differs() -> None:
    result = Recorded("a#1").to_wire_with({"status": "completed", "output": 2})
    assert end_differs({"op": "complete", "output": 1}, result)
    assert not end_differs({"op": "complete", "output": 2}, result)
    assert end_differs({"op": "fail", "error": ERROR}, result)
    assert not end_differs({"op": "complete", "output": 1}, Ok("a#1").to_wire())


# --- a batch: a start after an end rides it -------------------------------------------------


def _plans(*requests: ops.StepOp) -> list[Plan]:
    modules = {ops.Start: start, ops.Complete: end, ops.Fail: end, ops.Record: record}
    return [
        modules[type(r)].plan(MAIN, fresh(n), r, None, leased=False) for n, r in enumerate(requests)
    ]


def test_a_start_after_an_end_is_a_next_mark_on_the_end_s_item() -> None:
    plans = _plans(ops.Complete("a#1", "1"), ops.Start("b#1", "b", 1))
    writes, results = executor.compose(MAIN, plans)
    assert len(writes) == 1
    mark = values(run_writes.request(writes[0])["Update"])[":next"]
    assert mark["stepId"] == "b#1" and mark["attempt"] == 1 and mark["startEpoch"] == 3
    assert results == [
        Ok("a#1"),
        Started("b#1", 1, ops.InlineStart("b", "order-1", clock.iso(NOW))),
    ]


def test_the_mark_goes_on_the_ended_step_s_item_not_on_its_event() -> None:
    plans = _plans(ops.Fail("a#1", RunError.from_api(ERROR)), ops.Start("b#1", "b", 1))
    (item, event), _ = executor.compose(MAIN, plans)
    assert ":next" in values(run_writes.request(item)["Update"]) and "next" not in put_item(event)


def test_a_recorded_value_carries_a_start_in_its_put() -> None:
    plans = _plans(ops.Record("v#1", "v", "1"), ops.Start("b#1", "b", 1))
    (put,), _ = executor.compose(MAIN, plans)
    assert put_item(put)["next"]["stepId"] == "b#1"


@pytest.mark.parametrize(
    "first",
    [
        ops.Start("a#1", "a", 1),  # a start ends nothing
        ops.Fail("a#1", RunError.from_api(ERROR), True, attempt=1, retries=1),  # retrying
    ],
)
def test_a_start_rides_only_an_end(first: ops.StepOp) -> None:
    plans = _plans(first, ops.Start("b#1", "b", 1))
    writes, results = executor.compose(MAIN, plans)
    assert writes[-1] is plans[1].item and results[1] == Started("b#1", 1)


def test_a_batch_is_fast_only_for_a_main_invocation_s_known_ops_on_distinct_steps() -> None:
    known: list[ops.StepOp] = [ops.Complete("a#1", "1"), ops.Start("b#1", "b", 1)]
    assert executor.fast(MAIN, known)
    assert not executor.fast(MAIN, [*known, ops.Complete("a#1", "1")])
    assert not executor.fast(MAIN, [ops.Start("b#1", "b")])
    assert not executor.fast(MAIN, [ops.Callback("c#1", "c", None)])
    assert not executor.fast(BRANCH, [ops.Complete("b#1", "1")])


# --- cancel and reject ----------------------------------------------------------------------


def test_a_cancel_puts_a_new_step_ended_and_leaves_an_ended_one() -> None:
    request = ops.Cancel("s#1", "s", "sleep")
    new = cancel.plan(MAIN, fresh(), request, cancel.Existing(None), leased=True)
    assert new.item is not None and put_item(new.item)["status"] == "cancelled"
    assert put_item(new.others[0])["type"] == "step.cancelled"
    ended = step("completed")
    left = cancel.plan(MAIN, fresh(), request, cancel.Existing(ended), leased=True)
    assert left.writes == [] and left.result == Recorded("s#1") and left.recorded is ended


def test_a_cancel_of_a_pending_child_run_step_cancels_the_child_once_written() -> None:
    pending = step("waiting", kind="invoke", child_run_id="child-1")
    plan = cancel.plan(
        MAIN, fresh(), ops.Cancel("a#1", "a", "invoke"), cancel.Existing(pending), leased=True
    )
    assert plan.cancel_child == "child-1"
    assert values(update(plan))[":was"] == "waiting"


# --- lease checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (None, checks.TAKEN_OVER),
        (("completed", 3, 10**13), checks.TAKEN_OVER),
        (("running", 4, 10**13), checks.TAKEN_OVER),  # a newer epoch took the run
        (("running", 3, 0), checks.ANSWERED),  # answered: the lease was released
        (("running", 3, 999), checks.ANSWERED),  # the lease ran out
        (("cancelling", 3, 1000), None),
        (("running", 2, 1000), None),  # an older epoch in the item: the write's own check
    ],
)
def test_a_main_invocation_writes_while_it_holds_a_live_run_s_lease(
    state: checks.RunState, reason: str | None
) -> None:
    assert checks.run_refusal(state, MAIN.claims, 1000) == reason


def test_a_branch_invocation_answers_to_its_step_s_lease_not_the_run_s() -> None:
    assert checks.run_refusal(("running", 3, 0), BRANCH.claims, 1000) is None
    # the run's epoch counts its main invocations, not the branch's deliveries
    assert checks.run_refusal(("running", 9, 10**13), BRANCH.claims, 1000) is None
    assert checks.run_refusal(("completed", 3, 0), BRANCH.claims, 1000) == checks.TAKEN_OVER
    assert checks.branch_refusal((7, 1000), BRANCH.claims, 1000) is None
    assert checks.branch_refusal((8, 5000), BRANCH.claims, 1000) == checks.BRANCH_ANSWERED
    assert checks.branch_refusal((7, 999), BRANCH.claims, 1000) == checks.BRANCH_ANSWERED


def test_an_answer_is_refused_only_when_taken_over_not_when_its_lease_ran_out() -> None:
    assert not checks.taken_over(("running", 3, 0), MAIN.claims)
    assert checks.taken_over(("running", 4, 0), MAIN.claims)
    assert checks.taken_over(("failed", 3, 0), MAIN.claims)


# --- the edge: ops parsed once ---------------------------------------------------------------


def test_a_branch_invocation_may_only_start_and_end_its_own_step() -> None:
    with pytest.raises(Forbidden):
        ops.parse_op({"op": "complete", "stepId": "a#1", "output": 1}, "b#1")
    with pytest.raises(Forbidden):
        ops.parse_op({"op": "record", "stepId": "b#1", "name": "b", "kind": "value"}, "b#1")
    # Its start's attempt is the store's to count: not read, so not refused.
    parsed = ops.parse_op({"op": "start", "stepId": "b#1", "name": "b", "attempt": "x"}, "b#1")
    assert parsed == ops.Start("b#1", "b")


def test_a_main_invocation_s_start_attempt_is_checked() -> None:
    with pytest.raises(ValidationError, match="attempt must be an integer >= 1"):
        ops.parse_op({"op": "start", "stepId": "a#1", "name": "a", "attempt": 0})
    assert ops.parse_op({"op": "start", "stepId": "a#1", "name": "a", "attempt": 2}) == (
        ops.Start("a#1", "a", 2)
    )


def test_an_answer_s_ops_are_parsed_once_into_wire_and_typed_ends() -> None:
    sent: list[dict[str, Any]] = [
        {"op": "complete", "stepId": "a#1", "output": [1]},
        {"op": "fail", "stepId": "b#1", "error": {"code": "x", "type": "E", "message": "m"}},
    ]
    parsed = ops.parse_answer_ops(sent)
    assert parsed.wire == tuple(sent)  # what `end_differs` compares a recorded step with
    assert [type(r) for r in parsed.requests] == [ops.Complete, ops.Fail]
    assert [r.step_id for r in parsed.requests] == ["a#1", "b#1"]
    start_op = {"op": "start", "stepId": "c#1", "name": "c"}
    bad: Any
    for bad, message in (
        ("not a list", "ops must be a list of at most 25"),
        ([start_op], "may only complete, fail or record"),
        ([sent[0], {**sent[0], "output": 2}], "must name distinct steps"),
    ):
        with pytest.raises(ValidationError, match=message):
            ops.parse_answer_ops(bad)
    # A branch invocation's answer carries no step ends: its own step's end is a step call.
    with pytest.raises(ValidationError, match="may only complete, fail or record"):
        ops.parse_answer_ops([sent[0]], "a#1")
