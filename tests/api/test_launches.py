"""A suspend's new waits at any width, and what a crash between its writes leaves.

A suspend commits with one conditional write of the run item; what its new waits start (a
parallel step's branch invocation, a child run, a message waiter) is kept ahead in chunk
items and started by the outbox once it sees the commit (service/launches.py): a child run
and a message waiter get their items, a parallel step its branch message, which carries the
step's values (its claim creates the item: tests/api/test_branch_claims.py). So nothing a
suspend starts exists before its commit, however many waits it has (DynamoDB takes 100 items
a transaction: a gather of 99 or more parallel steps used to be refused, and its run stayed
`running` with no step), and a redelivered or retried commit makes nothing twice (a branch
message sent twice is claimed once).
"""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import aws, ddb, messages, run_writes, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import messages as wire
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Run
from ezgh_engine.core.run_errors import MAX_PENDING_STEPS
from ezgh_engine.errors import StaleInvocation
from ezgh_engine.service import stream, timers

from tests.api.steps_helpers import free_lease, lease_token, stored_run

WIDE = 120  # more than a transaction takes: one commit, a launch of 120 items


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[wire.Message]:
    """The messages handed to the invoker (`messages.start`), in order."""
    out: list[wire.Message] = []
    monkeypatch.setattr(messages, "start", out.append)
    return out


def _branches(sent: list[wire.Message]) -> list[str]:
    return [m.step_id for m in sent if isinstance(m, wire.Branch)]


class Crash(Exception):
    """The process died here."""


def _raw(run_id: str) -> dict[str, Any]:
    answer = aws.client("dynamodb").get_item(
        TableName=config.settings().runs_table, Key=items.run_key(run_id), ConsistentRead=True
    )
    return dict(answer["Item"])


def _record(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The stream record of a run item's write, as Lambda's mapping hands it over."""
    return {"eventName": "MODIFY", "dynamodb": {"OldImage": old, "NewImage": new}}


def _parallel(n: int, prefix: str = "p") -> list[dict[str, Any]]:
    return [
        {"stepId": f"{prefix}{i}#1", "name": f"{prefix}{i}", "kind": "run", "parallel": True}
        for i in range(n)
    ]


def _suspend(run: Run, token: str, waits: list[dict[str, Any]], leased: Run | None = None) -> None:
    """The invocation holding `token` answers `suspended` on `waits` (`leased`: the run as
    it read it; by default as it is now)."""
    from ezgh_engine.protocol import outcomes as rules
    from ezgh_engine.service import outcomes

    claims = tokens.verify(config.settings().token_secret, token, clock.now_ms())
    leased = leased or runs_store.get_run(run.id)
    assert leased is not None
    answer = {"outcome": "suspended", "waits": waits}
    outcomes.apply_answer(
        leased,
        leased.invoke_seq,
        rules.parse(answer, clock.now()),
        None,
        claims=claims,
        invocation_id=ids.time_ordered_id(),
        started_at=clock.iso(clock.now()),
    )


def _commit_seen(run: Run, token: str, waits: list[dict[str, Any]]) -> dict[str, Any]:
    """Suspend on `waits`; the stream record of its commit (not handed over yet)."""
    before = _raw(run.id)
    _suspend(run, token, waits)
    return _record(before, _raw(run.id))


def _steps(run: Run) -> dict[str, dict[str, Any]]:
    return {
        str(v["stepId"]): v
        for v in ws.query_pk(items.run_pk(run.id))
        if str(v["sk"]).startswith(items.STEP_PREFIX)
    }


def test_a_wide_suspend_commits_alone_and_its_launch_sends_each_branch(
    aws_env: None, sent: list[wire.Message]
) -> None:
    """The launch writes no parallel step: it sends each one's branch message, in the order
    the workflow asked, carrying the run attempt and the step's values; until claimed, the
    run's readers show every one `waiting`."""
    run = stored_run()
    record = _commit_seen(run, lease_token(run), _parallel(WIDE))
    found = runs_store.get_run(run.id)
    assert found is not None and found.handled_seq == 1 and found.lease_until_ms == 0
    stream.handle_record(record)
    assert _steps(run) == {}  # no Put: each branch's claim makes its item
    assert _branches(sent) == [f"p{i}#1" for i in range(WIDE)]
    first = [m for m in sent if isinstance(m, wire.Branch)]
    assert all(m.attempt == 1 and dict(m.values)["name"] == m.step_id[:-2] for m in first)
    listed = runs_store.get_run(run.id)
    assert listed is not None and [s.id for s in listed.steps] == _branches(sent)
    assert all(s.status == "waiting" and s.branch and s.attempt == 0 for s in listed.steps)
    stream.handle_record(record)  # delivered again: the same messages again (claimed once)
    assert _branches(sent) == [f"p{i}#1" for i in range(WIDE)] * 2
    assert _steps(run) == {}


def test_a_suspend_whose_commit_failed_started_nothing_and_its_retry_once(
    aws_env: None, sent: list[wire.Message]
) -> None:
    run = stored_run()

    def crash_at_commit(service: str, operation: str, params: dict[str, Any]) -> None:
        names = params.get("ExpressionAttributeNames", {}).values()
        if operation == "UpdateItem" and items.OUTCOME_ATTR in names:
            raise Crash()

    stop = aws.intercept(crash_at_commit)
    try:
        with pytest.raises(Crash):
            _suspend(run, lease_token(run), _parallel(WIDE))
    finally:
        stop()
    found = runs_store.get_run(run.id)
    assert found is not None and found.handled_seq == 0 and found.last_outcome is None
    assert found.steps == ()  # no launch is the run's before a commit names it
    assert _steps(run) == {} and sent == []  # no branch, no message
    # The lease runs out; the next invocation replays to the same gather and suspends.
    free_lease(run)
    record = _commit_seen(run, lease_token(run, seq=2), _parallel(WIDE))
    stream.handle_record(record)
    assert len(_branches(sent)) == WIDE


def test_a_launch_cut_off_midway_is_finished_by_its_redelivery(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = stored_run()
    record = _commit_seen(run, lease_token(run), _parallel(WIDE))
    sent: list[str] = []

    def die_at_the_hundredth(message: wire.Message) -> None:
        if len(sent) == 99 and not isinstance(message, wire.Timer):
            sent.append("")
            raise Crash()  # after 99 of its 120 messages
        if isinstance(message, wire.Branch):
            sent.append(message.step_id)

    monkeypatch.setattr(messages, "start", die_at_the_hundredth)
    with pytest.raises(Crash):
        stream.handle_record(record)
    assert len(sent) == 100
    stream.handle_record(record)  # Lambda retries the batch from that record
    assert sent[100:] == [f"p{i}#1" for i in range(WIDE)]  # all of them: each claimed once


def test_a_launch_after_its_run_ended_starts_nothing(
    aws_env: None, sent: list[wire.Message]
) -> None:
    """The run timed out before its launch came: no branch message; the end's cleanup
    recorded the launched steps `cancelled`, as it ends any pending step."""
    run = stored_run()
    record = _commit_seen(run, lease_token(run), _parallel(3))
    assert timers.time_out(run.id)
    stream.handle_record(record)
    assert _branches(sent) == []
    steps = _steps(run)
    assert sorted(steps) == ["p0#1", "p1#1", "p2#1"]
    assert all(v["status"] == "cancelled" for v in steps.values())


def test_a_stale_invocation_cannot_commit_a_launch_nor_start_it(
    aws_env: None, sent: list[wire.Message]
) -> None:
    """A newer invocation took the run over: the stale one's suspend is refused at its
    commit, and the launch it wrote ahead is never made (no commit names it)."""
    run = stored_run()
    stale = lease_token(run)
    as_read = runs_store.get_run(run.id)
    free_lease(run)
    lease_token(run, seq=2)
    before = _raw(run.id)
    with pytest.raises(StaleInvocation):
        _suspend(run, stale, _parallel(WIDE), as_read)
    assert _raw(run.id) == before
    assert _steps(run) == {} and sent == []


def test_a_child_launch_whose_step_was_recorded_otherwise_starts_no_child(
    aws_env: None,
) -> None:
    """The step of a child wait was ended meanwhile (a cancelling run's replay cancelled it
    before the launch came): the launch leaves it, and makes no child run for it."""
    run = stored_run()
    wait = {"stepId": "sub#1", "name": "sub", "kind": "invoke", "workflow": "w", "input": 1}
    record = _commit_seen(run, lease_token(run), [wait])
    cancelled = {"name": "sub", "kind": "invoke", "status": "cancelled", "order": "0"}
    assert ws.transact([ws.step_put(run.id, "sub#1", cancelled)])
    stream.handle_record(record)
    assert _steps(run)["sub#1"]["status"] == "cancelled"
    child = runs_store.get_run(ids.derived_id(run.id, "sub#1"), with_steps=False)
    assert child is None


def test_launches_are_kept_in_chunks_no_item_past_its_limit(aws_env: None) -> None:
    """Child runs with 60 KB inputs: 3.6 MB of launches, kept in chunk items none of which
    passes an item's limit, each child made once."""
    run = stored_run()
    big = "x" * 60_000
    waits = [
        {"stepId": f"c{i}#1", "name": f"c{i}", "kind": "invoke", "workflow": "w", "input": big}
        for i in range(60)
    ]
    record = _commit_seen(run, lease_token(run), waits)
    chunks = [v for v in ws.query_pk(items.run_pk(run.id)) if str(v["sk"]).startswith("LAUNCH#")]
    assert len(chunks) > 1
    raw = [ddb.to_item(c) for c in chunks]
    assert all(ddb.item_bytes(c) <= run_writes.MAX_ITEM_BYTES for c in raw)
    stream.handle_record(record)
    steps = _steps(run)
    assert len(steps) == 60
    children = [runs_store.get_run(str(s["childRunId"]), with_steps=False) for s in steps.values()]
    assert all(c is not None and c.input == big for c in children)


def test_a_suspend_past_the_pending_limit_fails_the_run_at_once(aws_env: None) -> None:
    """More steps pending at once than a run may have: the run fails now, saying why,
    never a suspend too wide to start (nor a run left waiting)."""
    run = stored_run()
    _suspend(run, lease_token(run), _parallel(MAX_PENDING_STEPS + 1))
    found = runs_store.get_run(run.id)
    assert found is not None and found.status == "failed" and found.error is not None
    assert found.error.code == "workflows.too_many_pending_steps"
    assert f"{MAX_PENDING_STEPS:,}" in found.error.message
    assert _steps(run) == {}


def test_repair_makes_a_launch_the_stream_gave_up_on(
    aws_env: None, sent: list[wire.Message]
) -> None:
    """The commit's stream record was never handled (its batch given up on): `ezgh ops
    repair` finds the committed launch's parallel steps unclaimed and sends their branch
    messages again, until each has been claimed."""
    from ezgh_engine.adapters import steps_store
    from ezgh_engine.service import repair

    run = stored_run()
    _commit_seen(run, lease_token(run), _parallel(3))
    found = [a for a in repair.repair(older_than_seconds=0) if a.kind == "launch"]
    assert [(a.run_id, sorted(a.branches)) for a in found] == [(run.id, ["p0#1", "p1#1", "p2#1"])]
    for action in found:  # (its year limit's schedule is also owed: no stream ran here)
        repair.apply_action(action)
    assert _branches(sent) == ["p0#1", "p1#1", "p2#1"] and _steps(run) == {}
    branch = next(m for m in sent if isinstance(m, wire.Branch))
    assert branch.creates  # the message a launch sends: its claim makes the item
    now = clock.now_ms()
    assert steps_store.take_branch_lease(
        run.id,
        "p0#1",
        now_ms=now,
        lease_ms=60_000,
        started_at=clock.iso(clock.now()),
        creates=(1, dict(branch.values)),
    )
    again = [a for a in repair.repair(older_than_seconds=0) if a.kind == "launch"]
    assert [sorted(a.branches) for a in again] == [["p1#1", "p2#1"]]  # the claimed one: not


def test_a_thousand_parallel_steps_launch_once_each(
    aws_env: None, sent: list[wire.Message]
) -> None:
    """A gather of 1,000: its suspend commits alone, and its launch sends 1,000 branch
    messages, each naming the history copy its branch invocation replays from (empty here:
    no step before the gather)."""
    run = stored_run()
    stream.handle_record(_commit_seen(run, lease_token(run), _parallel(1000)))
    branches = [m for m in sent if isinstance(m, wire.Branch)]
    assert len({m.step_id for m in branches}) == 1000 and _steps(run) == {}
    assert all(dict(m.values)["hist"] and dict(m.values)["histChunks"] == 0 for m in branches)
