"""A parallel step's item is made by its branch message's claim (service/launches.py,
`steps_store.take_branch_lease`): a launch writes no step, it sends each step's branch message
with the run attempt and the step's values, and the claim creates the step claimed and
started. A branch is then one write to start and one to end. What that must keep: a step
with no item yet is still the run's (`waiting` to every reader, kept when the run moves on,
found by repair), a message delivered twice runs its step once, and a stale message (of an
ended run, of an attempt a RetryRun replaced) runs nothing and leaves no live step.
On moto and on DynamoDB Local (`aws_env`).
"""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws, messages, runs_store
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import messages as wire
from ezgh_engine.core.messages import Retry
from ezgh_engine.core.models import App, Run, RunError
from ezgh_engine.service import branches, invocation_queue, repair, stream

from tests.api.steps_helpers import free_lease, lease_token, stored_run
from tests.api.test_branch_outcomes import _app
from tests.api.test_launches import _commit_seen, _parallel, _suspend

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


class Gather:
    """A run suspended on parallel steps, its launch's branch messages (not delivered), and
    an app that completes whatever step it is asked to run, counting its invocations."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, width: int = 3) -> None:
        self.sent: list[wire.Message] = []
        self.ran: list[str] = []
        self.during: Any = None  # called inside the app's invocation (a race)
        monkeypatch.setattr(messages, "start", self.sent.append)
        monkeypatch.setattr(branches, "invoke_app", self._invoke)
        monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
        self.run = stored_run(app_id="a")
        stream.handle_record(_commit_seen(self.run, lease_token(self.run), _parallel(width)))
        self.launched = self.branch_messages()
        self.sent.clear()

    def _invoke(self, app: App, request: dict[str, Any]) -> dict[str, Any]:
        step_id = str(request["branch"]["stepId"])
        self.ran.append(step_id)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return {
            "protocol": "1.5",
            "deploymentId": "d1",
            "outcome": "branch",
            "stepId": step_id,
            "ops": [{"op": "complete", "stepId": step_id, "output": step_id}],
        }

    def branch_messages(self) -> list[wire.Branch]:
        return [m for m in self.sent if isinstance(m, wire.Branch)]

    def message(self, step_id: str) -> wire.Branch:
        return next(m for m in self.launched if m.step_id == step_id)

    def step(self, step_id: str) -> dict[str, Any]:
        return ws.get(items.run_pk(self.run.id), items.STEP_PREFIX + step_id) or {}

    def read(self) -> Run:
        found = runs_store.get_run(self.run.id)
        assert found is not None
        return found


def deliver(message: wire.Message) -> Retry | None:
    """The invoker's handling of one queue message."""
    return invocation_queue.HANDLERS[type(message)](message)


def _step_writes(run_id: str) -> tuple[list[tuple[str, str]], Any]:
    """Record each write of a step item of the run: (operation, step ID)."""
    seen: list[tuple[str, str]] = []
    pk = items.run_pk(run_id)

    def record(service: str, operation: str, params: dict[str, Any]) -> None:
        if service != "dynamodb" or operation not in WRITES:
            return
        key = params.get("Key") or params.get("Item") or {}
        if key.get("pk", {}).get("S") == pk and key["sk"]["S"].startswith(items.STEP_PREFIX):
            seen.append((operation, key["sk"]["S"].removeprefix(items.STEP_PREFIX)))

    return seen, aws.intercept(record)


def test_a_branch_is_one_write_to_claim_and_one_to_end(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch Puts no step; each branch's claim creates its item (started, attempt 1)
    and its answer's end is the second and last write of it."""
    run = stored_run()
    seen, stop = _step_writes(run.id)
    try:
        monkeypatch.setattr(messages, "start", lambda m: None)
        stream.handle_record(_commit_seen(run, lease_token(run), _parallel(3)))
        assert seen == []  # the launch wrote no step
    finally:
        stop()
    gather = Gather(monkeypatch)
    seen, stop = _step_writes(gather.run.id)
    try:
        for message in gather.launched:
            assert deliver(message) is None
    finally:
        stop()
    assert seen == [(op, s) for s in ("p0#1", "p1#1", "p2#1") for op in ["UpdateItem"] * 2]
    for step_id in ("p0#1", "p1#1", "p2#1"):
        step = gather.step(step_id)
        assert step["status"] == "completed" and int(step["attempt"]) == 1
        assert step["branch"] is True and int(step["runAttempt"]) == 1
        assert step["name"] == step_id[:-2] and step["kind"] == "run" and step["order"]
    assert gather.ran == ["p0#1", "p1#1", "p2#1"]


def test_get_run_shows_every_launched_step_waiting_before_any_claim(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gather = Gather(monkeypatch, width=5)
    steps = gather.read().steps
    assert [s.id for s in steps] == [f"p{i}#1" for i in range(5)]  # in launch order
    assert all(s.status == "waiting" and s.attempt == 0 for s in steps)
    view = [s.to_api() for s in steps]
    assert {v["status"] for v in view} == {"waiting"} and all(v["name"] for v in view)
    deliver(gather.message("p2#1"))
    steps = gather.read().steps
    assert [s.id for s in steps] == [f"p{i}#1" for i in range(5)]
    assert [s.status for s in steps] == ["waiting", "waiting", "completed", "waiting", "waiting"]


def test_a_branch_message_delivered_twice_runs_its_step_once(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delivered again while the first delivery runs the step (SQS or Lambda's event
    queue delivered it twice, or the launch was processed twice): held back by the claim,
    it comes back and finds the step ended."""
    gather = Gather(monkeypatch)
    message = gather.message("p0#1")
    held: list[Retry | None] = []
    gather.during = lambda: held.append(deliver(message))
    assert deliver(message) is None
    assert isinstance(held[0], Retry)  # the claim was taken: come back later
    assert deliver(message) is None  # it comes back: ended, dropped
    assert deliver(wire.Branch(gather.run.id, "p0#1")) is None  # the old shape too
    assert gather.ran == ["p0#1"]
    assert gather.step("p0#1")["status"] == "completed"


def test_a_message_for_an_ended_run_runs_nothing_and_leaves_no_live_step(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gather = Gather(monkeypatch)
    found = runs_store.get_run(gather.run.id, with_steps=False)
    assert found is not None
    # Ended by a write its cleanup has not followed yet: the claim creates the item, reads
    # the run and ends the step with it.
    assert control.end_now(found, "timedOut", RunError("t", "T", "t"), at=clock.iso(clock.now()))
    assert deliver(gather.message("p0#1")) is None
    assert gather.step("p0#1")["status"] == "cancelled"
    # The end's cleanup: the steps never claimed are recorded cancelled too.
    from ezgh_engine.service import waits

    waits.cancel_leftovers(gather.run.id)
    for step_id in ("p1#1", "p2#1"):
        assert deliver(gather.message(step_id)) is None
        assert gather.step(step_id)["status"] == "cancelled"
    assert gather.ran == []
    assert {s.status for s in gather.read().steps} == {"cancelled"}


def test_a_message_from_before_a_retry_run_creates_nothing(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run timed out with its branches unclaimed and was retried: the first attempt's
    late messages run nothing and leave no item; a new attempt's message then runs."""
    gather = Gather(monkeypatch)
    from ezgh_engine.service import timers

    assert timers.time_out(gather.run.id)
    ended = gather.read()
    control.retry(ended, at=clock.iso(clock.now()))
    retried = gather.read()
    assert retried.attempt == 2 and retried.steps == ()  # reset: none of the old attempt's
    assert deliver(gather.message("p0#1")) is None
    assert gather.step("p0#1") == {} and gather.ran == []
    assert gather.read().steps == ()
    # A claim an old message made that was never undone (its process died): the new
    # attempt's message for the step removes it once its lease ran out, then claims.
    stale = gather.message("p1#1")
    read = runs_store.get_branch_run
    monkeypatch.setattr(runs_store, "get_branch_run", _dies)
    with pytest.raises(Died):
        deliver(stale)
    monkeypatch.setattr(runs_store, "get_branch_run", read)
    assert gather.step("p1#1")["status"] == "running"
    assert [s.id for s in gather.read().steps] == []  # no step of this attempt's
    new = wire.Branch(gather.run.id, "p1#1", 2, stale.values)
    assert isinstance(deliver(new), Retry)  # held by the stale claim's lease
    _expire_lease(gather, "p1#1")
    assert isinstance(deliver(new), Retry)  # removed; it comes back
    assert gather.step("p1#1") == {}
    assert deliver(new) is None
    assert gather.step("p1#1")["status"] == "completed"
    assert int(gather.step("p1#1")["runAttempt"]) == 2 and gather.ran == ["p1#1"]


class Died(Exception):
    """The process died here."""


def _dies(*args: Any) -> Any:
    raise Died()


def _expire_lease(gather: Gather, step_id: str) -> None:
    update = ws.step_update(
        gather.run.id,
        step_id,
        sets={"branchLeaseUntil": 1},
        when="#status = :running",
        when_values={":running": "running"},
    )
    assert ws.transact([update])


def test_a_run_that_moves_on_keeps_its_unclaimed_steps(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sibling ends and the run's main invocation resumes and suspends again before the
    others were claimed: its outcome writes them as `waiting` items before its commit
    replaces the launch's name, so they stay the run's steps; their messages (the launch's,
    and the one the stream sends for each new item) run each once."""
    gather = Gather(monkeypatch)
    assert deliver(gather.message("p0#1")) is None
    free_lease(gather.run)
    token = lease_token(gather.run, seq=2)
    pending = [w for w in _parallel(3) if w["stepId"] != "p0#1"]
    before = ws.get(items.run_pk(gather.run.id), items.RUN_SK)
    _suspend(gather.run, token, pending)
    after = ws.get(items.run_pk(gather.run.id), items.RUN_SK)
    assert before is not None and after is not None
    assert "l" not in after["lastOut"]  # the launch is no longer the run's current one
    steps = {s.id: s for s in gather.read().steps}
    assert [steps[s].status for s in ("p0#1", "p1#1", "p2#1")] == [
        "completed",
        "waiting",
        "waiting",
    ]
    assert all(steps[s].launched is None for s in steps)  # items now
    for step_id in ("p1#1", "p2#1"):
        item = gather.step(step_id)
        assert item["status"] == "waiting" and int(item["runAttempt"]) == 1
        stream.handle_record({"eventName": "INSERT", "dynamodb": {"NewImage": _typed(item)}})
    again = gather.branch_messages()
    assert sorted(m.step_id for m in again) == ["p1#1", "p2#1"]  # one more each, old shape
    for message in [gather.message("p1#1"), *again, gather.message("p2#1")]:
        deliver(message)
    assert gather.ran == ["p0#1", "p1#1", "p2#1"]
    assert {s.status for s in gather.read().steps} == {"completed"}


def _typed(values: dict[str, Any]) -> dict[str, Any]:
    from ezgh_engine.adapters import ddb

    return ddb.to_item(values)


def test_repair_sends_a_lost_unclaimed_branch_again(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch's message of one step was lost: repair finds the step with no item and
    sends its message again (carrying its values), and that one runs it."""
    gather = Gather(monkeypatch)
    deliver(gather.message("p0#1"))
    deliver(gather.message("p2#1"))
    found = [a for a in repair.repair(older_than_seconds=0) if a.run_id == gather.run.id]
    [launch] = [a for a in found if a.kind == "launch"]
    assert launch.branches == frozenset({"p1#1"})
    assert not [a for a in found if a.kind == "branch"]
    repair.apply_action(launch)
    [resent] = gather.branch_messages()
    assert resent.step_id == "p1#1" and resent.creates
    assert deliver(resent) is None
    assert gather.ran == ["p0#1", "p2#1", "p1#1"]
    assert {s.status for s in gather.read().steps} == {"completed"}
    left = [a for a in repair.repair(older_than_seconds=0) if a.run_id == gather.run.id]
    assert not [a for a in left if a.kind in ("launch", "branch")]


def test_a_launch_handled_twice_runs_each_step_once(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit's stream record handled twice (a batch retried): every branch message
    goes twice, in the workflow's order both times, and each step runs once."""
    gather = Gather(monkeypatch)
    record = _commit_seen_again(gather)
    stream.handle_record(record)
    again = gather.branch_messages()
    assert (
        [m.step_id for m in again]
        == ["p0#1", "p1#1", "p2#1"]
        == [m.step_id for m in gather.launched]
    )
    for message in [*gather.launched, *again]:
        assert deliver(message) is None
    assert gather.ran == ["p0#1", "p1#1", "p2#1"]
    assert {s.status for s in gather.read().steps} == {"completed"}


def _commit_seen_again(gather: Gather) -> dict[str, Any]:
    """The stream record of the gather's commit, as it was first handed over."""
    raw = ws.get(items.run_pk(gather.run.id), items.RUN_SK)
    assert raw is not None
    return {"eventName": "MODIFY", "dynamodb": {"OldImage": {}, "NewImage": _typed(raw)}}
