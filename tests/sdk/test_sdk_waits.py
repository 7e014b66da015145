"""The SDK side of durable waits and run control, against the engine in process
(tests/sdk/sdk_engine.py): retries, cancellation, callbacks, parallel
branches, races, child and message waits, over-long sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ezgh_engine.service import waits as waits_service
from ezgh_workflows import (
    Context,
    NonRetryableError,
    RunCancelledError,
    StepError,
    step_context,
    workflow,
)
from sdk_engine import Engine, branches, invoke, make_app, run_to_end

pytestmark = pytest.mark.moto_only(
    "the SDK's side of waits; their engine side runs on both in tests/e2e/test_waits.py"
)


def test_retries_suspend_and_count_attempts(engine: Engine) -> None:
    seen: list[tuple[int, str]] = []

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def flaky() -> str:
            info = step_context()
            seen.append((info.attempt, info.idempotency_key))
            if info.attempt < 3:
                raise RuntimeError("again")
            return "ok"

        return await ctx.step.run("call", flaky, retries=5)

    outcome, invocations = run_to_end(make_app(engine, wf), engine, "wf")
    assert outcome["output"] == "ok"
    assert [a for a, _ in seen] == [1, 2, 3] and len({k for _, k in seen}) == 1
    assert invocations == 3
    fails = engine.ops("fail")
    assert [op["attempt"] for op in fails] == [1, 2] and all(op["retryable"] for op in fails)


def test_default_retries_is_three(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("boom", lambda: 1 / 0)

    outcome, _ = run_to_end(make_app(engine, wf), engine, "wf")
    assert outcome["outcome"] == "failed"
    assert len(engine.ops("start")) == 4


@pytest.mark.parametrize("fn", [lambda: _raise(NonRetryableError("no")), lambda: {1, 2}])
def test_never_retried(engine: Engine, fn: Any) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("s", fn, retries=5)

    outcome, invocations = run_to_end(make_app(engine, wf), engine, "wf")
    assert outcome["outcome"] == "failed" and invocations == 1
    assert "retryable" not in engine.ops("fail")[0]


def _raise(exc: Exception) -> None:
    raise exc


def test_cancelling_raises_once_and_cleanup_runs(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        try:
            await ctx.step.sleep("nap", "1d")
        except RunCancelledError:
            await ctx.step.run("cleanup", lambda: "clean")
            raise

    app = make_app(engine, wf)
    assert invoke(app, engine, "wf")["outcome"] == "suspended"
    engine.cancel()  # CancelRun: the run is invoked again, cancelling
    outcome = invoke(app, engine, "wf")
    assert outcome["outcome"] == "cancelled"
    assert engine.steps["nap#1"]["status"] == "cancelled"
    assert engine.steps["cleanup#1"]["status"] == "completed"


def test_callback_url_and_wait(engine: Engine) -> None:
    @workflow("wf")
    def wf(ctx: Context) -> Any:
        cb = ctx.step.create_callback("approve", timeout_seconds=60)
        ctx.step.run("send", lambda: cb.url)
        return cb.wait()

    app = make_app(engine, wf)
    outcome = invoke(app, engine, "wf")
    assert outcome["outcome"] == "suspended"
    assert outcome["waits"] == [{"stepId": "approve#1", "name": "approve", "kind": "callback"}]
    assert engine.steps["send#1"]["output"] == engine.steps["approve#1"]["url"]
    engine.complete_callback("approve#1", {"yes": 1})
    assert invoke(app, engine, "wf")["output"] == {"yes": 1}
    assert len(engine.ops("callback")) == 1


def test_gather_suspends_into_branches_then_race(engine: Engine) -> None:
    ran: list[str] = []

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        a, b = await ctx.step.all(
            [
                ctx.step.run("a", lambda: ran.append("a") or "A"),
                ctx.step.run("b", lambda: ran.append("b") or "B"),
            ]
        )
        first = await ctx.step.race([ctx.step.sleep("slow", "1d"), ctx.step.run("fast", lambda: 1)])
        return [a, b, first]

    app = make_app(engine, wf)
    outcome = invoke(app, engine, "wf")
    assert [w.get("parallel") for w in outcome["waits"]] == [True, True]
    assert ran == []
    for step_id in branches(engine):
        assert invoke(app, engine, "wf", branch=step_id)["outcome"] == "branch"
    assert sorted(ran) == ["a", "b"]
    assert invoke(app, engine, "wf")["output"] == ["A", "B", 1]


def test_failing_branch_is_catchable(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        try:
            await asyncio.gather(
                ctx.step.run("a", lambda: 1, retries=0), ctx.step.run("b", lambda: 1 / 0, retries=0)
            )
        except StepError as exc:
            return exc.error_name

    outcome, _ = run_to_end(make_app(engine, wf), engine, "wf")
    assert outcome["output"] == "ZeroDivisionError"


def test_invoke_names_another_app_of_the_project(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        return await ctx.step.invoke("charge", workflow="charge", input=[1], app="billing")

    (wait,) = invoke(make_app(engine, wf), engine, "wf")["waits"]
    assert wait == {
        "stepId": "charge#1",
        "name": "charge",
        "kind": "invoke",
        "workflow": "charge",
        "input": [1],
        "app": "billing",
    }

    @workflow("bad")
    async def bad(ctx: Context) -> Any:
        try:
            return await ctx.step.invoke("x", workflow="w", app="not an app/ref")
        except ValueError as err:
            return str(err)

    outcome, _ = run_to_end(make_app(engine, bad), engine, "bad")
    assert "invalid app" in outcome["output"]


def test_invoke_and_message_waits(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        child = await ctx.step.invoke("child", workflow="kid", input={"n": 1})
        msg = await ctx.step.wait_for_message("paid", queue_id="q", key="k:1", timeout_seconds=5)
        return [child, msg]

    @workflow("kid")
    async def kid(ctx: Context) -> Any:
        return "kid-out" if ctx.input == {"n": 1} else ctx.input

    queue = engine.api("POST", "/queues", body={"name": "q"})
    assert queue.status == 201, queue.body
    app = make_app(engine, wf, kid)
    assert invoke(app, engine, "wf")["waits"] == [
        {
            "stepId": "child#1",
            "name": "child",
            "kind": "invoke",
            "workflow": "kid",
            "input": {"n": 1},
        }
    ]
    waits = invoke(app, engine, "wf")["waits"]  # once the child run (the engine's) ended
    assert engine.steps["child#1"]["status"] == "completed"
    assert waits == [
        {
            "stepId": "paid#1",
            "name": "paid",
            "kind": "message",
            "queueId": "q",
            "key": "k:1",
            "timeoutSeconds": 5,
        }
    ]
    # What a `resume` subscription's delivery of a message with that key does:
    message = {"messageId": "m-1", "body": "paid", "attributes": {"order": "k:1"}}
    waits_service.resume_message_waiters(
        engine.project_id,
        queue.body["id"],
        "k:1",
        message,
        app_id=engine.plant.app_id,
        workflow="wf",
    )
    # The step's output is the message (the fake answered None).
    assert invoke(app, engine, "wf")["output"] == ["kid-out", message]


def test_bad_wait_arguments_raise_value_error(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.wait_for_message("m", queue_id="q", key="bad key", timeout_seconds=5)

    assert invoke(make_app(engine, wf), engine, "wf")["error"]["name"] == "ValueError"


def test_sleep_over_a_year_fails_the_step(engine: Engine) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        try:
            await ctx.step.sleep("long", 400 * 86400)
        except StepError as exc:
            return exc.code

    assert invoke(make_app(engine, wf), engine, "wf")["output"] == "workflows.sleep_too_long"
    assert engine.steps["long#1"]["status"] == "failed"
