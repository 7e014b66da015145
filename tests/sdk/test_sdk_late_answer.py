"""An invocation that outlives half the engine's wait sends its held step ends by a step call
before it answers (protocol section 11, `answerWithinSeconds`).

Before: the end of a workflow's last step rode the answer. When the engine had stopped
waiting (a step started late in the invocation keeps the lease so that its body may record
its end), nobody read that answer: the end was lost, and the next invocation ran the step a
second time (the controlled fault campaign's "long step s4 ran 2 times").
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from ezgh_workflows import Context, workflow
from ezgh_workflows._internal import clock
from sdk_engine import Engine, invoke, make_app, post

pytestmark = pytest.mark.moto_only(
    "the SDK's own late flush; the held ends it sends are written as tests/api/test_step_writes.py writes them, on both"
)


@pytest.fixture
def seconds(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The SDK's monotonic clock, moved by the step bodies below instead of sleeping."""
    now = [1000.0]
    monkeypatch.setattr(clock, "monotonic", lambda: now[0])
    return now


def _two_steps(seconds: list[float], last_step_takes: float) -> Any:
    @workflow("late")
    async def late(ctx: Context) -> str:
        await ctx.step.run("first", lambda: "one")

        def last() -> str:
            seconds[0] += last_step_takes
            return "two"

        return await ctx.step.run("last", last)

    return late


def _invoke(engine: Engine, wf: Any, within: float | None) -> dict[str, Any]:
    """The app's answer to the run's first invocation, the engine's request with its
    `answerWithinSeconds` set to `within` (absent with None)."""
    app = make_app(engine, wf)
    body = engine.invoke_body("late")
    body.pop("answerWithinSeconds", None)
    if within is not None:
        body["answerWithinSeconds"] = within
    answer = post(app, body)
    assert answer.status_code == 200, answer.text
    outcome: dict[str, Any] = answer.json()
    return outcome


def test_a_late_answer_records_the_held_end_by_a_step_call_first(
    engine: Engine, seconds: list[float]
) -> None:
    outcome = _invoke(engine, _two_steps(seconds, last_step_takes=4.0), within=6)
    assert outcome["outcome"] == "completed" and outcome["output"] == "two"
    assert "ops" not in outcome  # nothing left to ride an answer nobody may read
    [end] = engine.calls[-1]  # a call of its own, after the step's body
    assert (end["op"], end["stepId"], end["output"]) == ("complete", "last#1", "two")
    assert engine.steps["last#1"]["status"] == "completed"  # recorded by the engine


@pytest.mark.parametrize("within", [6.0, None])
def test_an_answer_in_good_time_still_carries_the_held_end(
    engine: Engine, seconds: list[float], within: float | None
) -> None:
    """Within half the wait, or when the engine did not say (a pull worker's task), the
    last step's end rides the answer: one call fewer."""
    outcome = _invoke(engine, _two_steps(seconds, last_step_takes=1.0), within=within)
    assert [op["stepId"] for op in outcome["ops"]] == ["last#1"]
    assert all(op["op"] != "complete" or op["stepId"] != "last#1" for c in engine.calls for op in c)
    assert engine.steps["last#1"]["status"] == "running"  # its end is the answer's


def test_a_late_flush_that_fails_leaves_the_held_end_to_the_answer(
    engine: Engine, seconds: list[float]
) -> None:
    """The late flush's step call cannot reach the engine (the steps API is a route of its
    own; the invoker may still be reading this answer on its connection): the held end is
    not dropped with the failed call but rides the answer, and the engine records it from
    there. The step's body ran once; before, the invocation failed (500), its end was lost
    and the next invocation ran the step again."""
    bodies: list[str] = []

    @workflow("late_flush")
    async def late_flush(ctx: Context) -> str:
        await ctx.step.run("first", lambda: "one")

        def last() -> str:
            bodies.append("last")
            seconds[0] += 10_000  # far past half of any engine's wait (the SDK's clock only)
            return "two"

        return await ctx.step.run("last", last)

    def unreachable_flush(ops: list[dict[str, Any]]) -> None:
        if [op.get("stepId") for op in ops] == ["last#1"]:
            raise httpx.ConnectError("the steps API is unreachable")

    app = make_app(engine, late_flush)
    engine.before_call = unreachable_flush
    outcome = invoke(app, engine, "late_flush")
    assert outcome["outcome"] == "completed" and outcome["output"] == "two"
    assert [op["stepId"] for op in outcome["ops"]] == ["last#1"]
    engine.before_call = None
    engine.pump(lambda: engine.ended(engine.runs["late_flush"]))
    assert engine.status == "completed"
    assert engine.steps["last#1"]["status"] == "completed"
    assert bodies == ["last"]
