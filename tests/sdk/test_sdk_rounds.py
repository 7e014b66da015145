"""Round boundaries do not depend on timing.

A round is the set of step calls the workflow issues before it blocks on all of them: however
many times its own code yields to the loop first, however slow a thread (a step body's, or a
plain ``def`` workflow's) is. Round membership decides which steps run as parallel branches
and which ends are held, so the first run and every replay must cut the same rounds.
"""

from __future__ import annotations

import asyncio
import threading
import time
import tokenize
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from ezgh_workflows import Context, workflow
from sdk_engine import Engine, invoke, make_app, run_to_end

pytestmark = pytest.mark.moto_only(
    "the SDK's own rounds; what the engine records and a replay reads back runs on both in test_sdk_replay.py"
)

NAMES = {tokenize.NAME, tokenize.OP}
SDK = Path(__file__).resolve().parents[2] / "sdk" / "ezgh_workflows" / "_internal"


async def _yield(times: int) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


@pytest.mark.parametrize("yields", [0, 1, 5, 50])
def test_steps_awaited_together_are_one_round_however_often_the_code_yields(
    engine: Engine, yields: int
) -> None:
    """A gather of a step and a plain coroutine that yields before its own step: both steps
    are one round (two parallel branches), whatever the number of yields."""

    async def then_b(ctx: Context) -> Any:
        await _yield(yields)
        return await ctx.step.run("b", lambda: "B")

    @workflow("pair")
    async def pair(ctx: Context) -> Any:
        return await asyncio.gather(ctx.step.run("a", lambda: "A"), then_b(ctx))

    app = make_app(engine, pair)
    first = invoke(app, engine, "pair")
    assert first["outcome"] == "suspended"
    assert [(w["stepId"], w.get("parallel")) for w in first["waits"]] == [
        ("a#1", True),
        ("b#1", True),
    ]
    assert engine.ops("start") == []  # neither ran inline
    outcome, _ = run_to_end(app, engine, "pair")
    assert outcome["output"] == ["A", "B"]


def test_nested_plain_coroutines_mixed_with_steps_are_one_round(engine: Engine) -> None:
    """Steps reached through layers of plain coroutines, each yielding, and a task the
    workflow created: all issued before the workflow blocks, so one round."""

    async def inner(ctx: Context, name: str) -> Any:
        await _yield(7)
        return await ctx.step.run(name, lambda: name.upper())

    async def outer(ctx: Context, name: str) -> Any:
        await _yield(3)
        return await inner(ctx, name)

    @workflow("mixed")
    async def mixed(ctx: Context) -> Any:
        task = asyncio.ensure_future(outer(ctx, "c"))
        a, b = await asyncio.gather(ctx.step.run("a", lambda: "A"), outer(ctx, "b"))
        return [a, b, await task]

    app = make_app(engine, mixed)
    first = invoke(app, engine, "mixed")
    assert [w["stepId"] for w in first["waits"]] == ["a#1", "c#1", "b#1"]
    assert all(w.get("parallel") for w in first["waits"])
    outcome, _ = run_to_end(app, engine, "mixed")
    assert outcome["output"] == ["A", "B", "C"]


def test_no_workflow_code_runs_while_a_step_body_yields(engine: Engine) -> None:
    """A step body that yields to the loop many times: the workflow's other code (a task it
    started) does not move meanwhile; the round was known before the body ran."""
    progress: list[int] = []
    seen: list[list[int]] = []

    async def body() -> str:
        before = list(progress)
        await _yield(100)
        seen.append([before == progress, len(progress)])  # type: ignore[list-item]
        return "A"

    async def side() -> None:
        for i in range(20):
            progress.append(i)
            await asyncio.sleep(0)

    @workflow("yielding-body")
    async def wf(ctx: Context) -> Any:
        task = asyncio.ensure_future(side())
        a = await ctx.step.run("a", body)
        await task
        return [a, len(progress)]

    outcome = invoke(make_app(engine, wf), engine, "yielding-body")
    assert outcome["output"] == ["A", 20]
    assert seen[0][0] is True, f"workflow code ran during the step body: {seen}"


def test_a_slow_step_thread_does_not_change_the_round(engine: Engine) -> None:
    """A synchronous step body in a thread, slow or fast: the workflow code that was
    still to run before the workflow blocked joins the round either way."""
    outcomes = []
    for delay in (0.0, 0.2):
        name = f"slow-body-{int(delay * 10)}"  # a run each

        async def then_b(ctx: Context) -> Any:
            await _yield(10)
            return await ctx.step.run("b", lambda: "B")

        @workflow(name)
        async def wf(ctx: Context, delay: float = delay) -> Any:
            task = asyncio.ensure_future(then_b(ctx))
            a = await ctx.step.run("a", lambda: time.sleep(delay) or "A")
            return [a, await task]

        app = make_app(engine, wf)
        first = invoke(app, engine, name)
        outcomes.append([(w["stepId"], w.get("parallel")) for w in first.get("waits", [])])
    assert outcomes[0] == outcomes[1] == [("a#1", True), ("b#1", True)]


def test_a_slow_plain_def_workflow_thread_is_waited_for_not_polled(engine: Engine) -> None:
    """A plain ``def`` workflow whose thread is slow between steps (after a race, its loser
    still pending): the driver waits until the thread blocks in its next step call."""

    @workflow("slow-thread")
    def wf(ctx: Context) -> Any:
        time.sleep(0.1)  # slow before its first step call
        first = ctx.step.race(
            [lambda: ctx.step.sleep("slow", "1d"), lambda: ctx.step.run("fast", lambda: 1)]
        )
        time.sleep(0.2)  # the loser is pending; the thread is busy with its own code
        second = ctx.step.run("after", lambda: 2)
        return [first, second]

    app = make_app(engine, wf)
    outcome = invoke(app, engine, "slow-thread")
    assert outcome["output"] == [1, 2]
    again = invoke(app, engine, "slow-thread")
    assert again["output"] == [1, 2]


def test_a_plain_def_workflow_thread_ending_slowly_in_finally(engine: Engine) -> None:
    """Suspending waits for the thread's ``finally`` however slow it is (within the drain)."""
    ended = threading.Event()

    @workflow("slow-finally")
    def wf(ctx: Context) -> None:
        try:
            ctx.step.sleep("nap", 60)
        finally:
            time.sleep(0.2)
            ended.set()

    assert invoke(make_app(engine, wf), engine, "slow-finally")["outcome"] == "suspended"
    assert ended.is_set()


def test_workflow_code_may_still_use_timers_and_threads(engine: Engine) -> None:
    """``asyncio.sleep`` and ``asyncio.to_thread`` in workflow code (not steps) still work:
    the round waits for them, as before."""

    @workflow("timers")
    async def wf(ctx: Context) -> Any:
        await asyncio.sleep(0.01)
        x = await asyncio.to_thread(lambda: 5)
        y = await asyncio.wait_for(ctx.step.run("a", lambda: x + 1), timeout=30)
        return [x, y]

    assert invoke(make_app(engine, wf), engine, "timers")["output"] == [5, 6]


def test_the_round_logic_has_no_sleep_or_poll() -> None:
    """The driver finds a round's end by running the workflow's loop until nothing is ready,
    not by waiting: no ``sleep`` call in the driver or the workflow loop."""
    for name in ("driver.py", "workflow_loop.py"):
        # Tokens, not ast: code, never comments or docstrings (ast.parse trips a CPython 3.11
        # recursion-depth bug when it runs after some pytest traceback formatting).
        with (SDK / name).open("rb") as source:
            tokens = [t for t in tokenize.tokenize(source.readline) if t.type in NAMES]
        sleeps = [
            b.start[0] for a, b in pairwise(tokens) if a.string == "." and b.string == "sleep"
        ]
        assert sleeps == [], f"{name} sleeps at lines {sleeps}"
