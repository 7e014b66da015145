"""A parallel step's branch invocation in one request and one write (docs/protocol.md
section 7): the branch lease take starts the step, the SDK sends no `start`, and the step's
end rides the `branch` answer, written with the lease's release and the invocation's events
in one conditional write. An SDK that still sends `start` and `complete` is served as before.

All against the engine in process (`sdk_engine`), on moto and on DynamoDB Local.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_workflows import Context, workflow
from ezgh_workflows._internal import protocol as sdk_protocol
from sdk_engine import Engine, make_app, run_to_end

WIDE = 20  # past the 16 at which branches replay from a copy of the history


def _events(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {"limit": "100", **({"cursor": cursor} if cursor else {})}
        page = engine.api("GET", f"/runs/{run_id}/events", query=query).body
        events += page["events"]
        cursor = page.get("nextCursor")
        if not cursor:
            return events


def _item(run_id: str, step_id: str) -> dict[str, Any]:
    return ws.get(items.run_pk(run_id), items.STEP_PREFIX + step_id) or {}


def _gather(width: int, ran: list[int]) -> Any:
    @workflow("wide")
    async def wide(ctx: Context) -> Any:
        outs = await asyncio.gather(
            *(ctx.step.run(f"p{i}", lambda i=i: ran.append(i) or i) for i in range(width))
        )
        return sum(outs)

    return wide


def test_a_branch_makes_no_step_call_and_its_answer_ends_its_step(engine: Engine) -> None:
    ran: list[int] = []
    outcome, _ = run_to_end(make_app(engine, _gather(WIDE, ran)), engine, "wide", limit=WIDE)
    assert outcome["output"] == sum(range(WIDE))
    assert sorted(ran) == list(range(WIDE))  # each body ran once
    assert engine.ops("start") == []  # the lease take started each step
    branches = [d for d in engine.deliveries if "branch" in d.request]
    assert len(branches) == WIDE
    for delivery in branches:
        step_id = delivery.request["branch"]["stepId"]
        assert delivery.request["branch"]["attempt"] == 1
        assert delivery.answer["outcome"] == "branch"
        assert [(op["op"], op["stepId"]) for op in delivery.answer["ops"]] == [
            ("complete", step_id)
        ]
    steps = engine.steps
    assert all(s["status"] == "completed" and int(s["attempt"]) == 1 for s in steps.values())
    run_id = str(engine.run_id)
    for step_id in steps:
        item = _item(run_id, step_id)
        assert int(item["branchLeaseUntil"]) == 0  # released by the same write
        assert len(item["bOut"]) == 1  # that invocation's events
    # Each branch invocation's events ride its step: started, its outcome, the step's end.
    events = _events(engine, run_id)
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for step_id in steps:
        mine = [e["type"] for e in events if e.get("stepId") == step_id]
        assert mine == ["invocation.started", "step.completed", "invocation.branch"], mine


def test_a_branch_retries_in_new_attempts_each_started_by_its_lease(engine: Engine) -> None:
    tries: dict[str, int] = {}

    def flaky(name: str) -> Any:
        tries[name] = tries.get(name, 0) + 1
        if tries[name] < 3:
            raise RuntimeError(f"{name} try {tries[name]}")
        return tries[name]

    @workflow("flaky")
    async def flaky_pair(ctx: Context) -> Any:
        a, b = await asyncio.gather(
            ctx.step.run("a", lambda: flaky("a"), retries=3),
            ctx.step.run("b", lambda: flaky("b"), retries=3),
        )
        return [a, b]

    outcome, _ = run_to_end(make_app(engine, flaky_pair), engine, "flaky", limit=40)
    assert outcome["output"] == [3, 3]
    assert engine.ops("start") == []
    fails = [d.answer["ops"][0] for d in engine.deliveries if "branch" in d.request][:4]
    assert all(op["op"] == "fail" and op["retryable"] for op in fails)
    attempts = sorted(
        (d.request["branch"]["stepId"], d.request["branch"]["attempt"])
        for d in engine.deliveries
        if "branch" in d.request
    )
    assert attempts == [("a#1", 1), ("a#1", 2), ("a#1", 3), ("b#1", 1), ("b#1", 2), ("b#1", 3)]
    assert {s["status"] for s in engine.steps.values()} == {"completed"}
    assert all(int(s["attempt"]) == 3 for s in engine.steps.values())


def test_an_sdk_that_sends_start_and_complete_is_served_as_before(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1.5 SDK from before the engine started a branch's step (it does not read
    `branch.attempt`): its `start` of the step the lease started answers `started` with that
    attempt and writes nothing, its `complete` ends the step, and the run completes."""
    monkeypatch.setattr(sdk_protocol, "_branch_attempt", lambda body: None)
    ran: list[int] = []
    outcome, _ = run_to_end(make_app(engine, _gather(WIDE, ran)), engine, "wide", limit=WIDE)
    assert outcome["output"] == sum(range(WIDE)) and sorted(ran) == list(range(WIDE))
    starts, completes = engine.ops("start"), engine.ops("complete")
    assert len(starts) == WIDE and len(completes) == WIDE
    branches = [d for d in engine.deliveries if "branch" in d.request]
    assert all("ops" not in d.answer for d in branches)  # the ends went by step calls
    started = [r for call in engine.results for r in call if r.get("result") == "started"]
    assert len(started) == WIDE and {r["attempt"] for r in started} == {1}
    steps = engine.steps
    assert all(s["status"] == "completed" and int(s["attempt"]) == 1 for s in steps.values())
    events = _events(engine, str(engine.run_id))
    for step_id in steps:
        mine = [e["type"] for e in events if e.get("stepId") == step_id]
        assert mine == ["invocation.started", "step.completed", "invocation.branch"], mine


def test_large_branch_results_ride_the_answer_or_a_step_call(engine: Engine) -> None:
    """A result over the 64 KiB kept in the step's item rides the answer and the invoker keeps
    it in S3 first; one over the 256 KiB an answer carries goes by a `complete` step call,
    and that answer carries no end."""
    mid, big = "m" * 100_000, "b" * 300_000

    @workflow("large")
    async def large(ctx: Context) -> Any:
        a, b = await asyncio.gather(ctx.step.run("a", lambda: mid), ctx.step.run("b", lambda: big))
        return [len(a), len(b)]

    outcome, _ = run_to_end(make_app(engine, large), engine, "large", limit=10)
    assert outcome["output"] == [100_000, 300_000]
    by_step = {d.request["branch"]["stepId"]: d for d in engine.deliveries if "branch" in d.request}
    assert [op["op"] for op in by_step["a#1"].answer["ops"]] == ["complete"]
    assert "ops" not in by_step["b#1"].answer
    # (The engine's record of ends: the answer's for a#1, the step call's for b#1.)
    assert sorted(op["stepId"] for op in engine.ops("complete")) == ["a#1", "b#1"]
    assert engine.ops("start") == []
    run_id = str(engine.run_id)
    assert _item(run_id, "a#1").get("outputRef") and _item(run_id, "b#1").get("outputRef")
