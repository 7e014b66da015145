"""Workflow behaviours, each written once against a `Harness` (harnesses.py) and run on both
the SDK's test kit and the real engine (test_behaviours.py): step identity and counters,
duplicate names, the JSON value rules, retries and attempts, parallel steps and races,
cancellation, time limits, sleeps, callbacks, message waits, child runs, RetryRun, patch
markers. Step functions count their calls in plain lists: they run in this process on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ezgh_workflows import (
    Context,
    NonRetryableError,
    RunCancelledError,
    StepError,
    step_context,
    workflow,
)
from harnesses import Harness

BEHAVIOURS: dict[str, Callable[[Harness], None]] = {}
MIB = 1_048_576


def behaviour(fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
    BEHAVIOURS[fn.__name__] = fn
    return fn


def shape(run: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """A run's steps as (id, kind, status, attempt), in the order they started."""
    return [(s["id"], s["kind"], s["status"], s["attempt"]) for s in run["steps"]]


# -- identity --------------------------------------------------------------------------------


@behaviour
def counters_and_explicit_ids(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        total = 0
        for i in range(3):
            total += await ctx.step.run("add", lambda i=i: i)
        await ctx.step.run("add", lambda: 10, id="add-explicit")
        return total + await ctx.step.run("add", lambda: 100)

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["status"] == "completed" and run["output"] == 103
    assert [s[0] for s in shape(run)] == ["add#1", "add#2", "add#3", "add-explicit", "add#4"]


@behaviour
def an_explicit_id_used_twice_fails_the_run(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("a", lambda: 1, id="same")
        await ctx.step.run("b", lambda: 2, id="same")

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["status"] == "failed" and run["error"]["code"] == "workflows.duplicate_step_name"
    assert shape(run) == [("same", "run", "completed", 1)]


@behaviour
def steps_pending_together_need_distinct_names(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        return await asyncio.gather(ctx.step.run("a", lambda: 1), ctx.step.run("a", lambda: 2))

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["status"] == "failed" and run["error"]["code"] == "workflows.duplicate_step_name"


@behaviour
def a_changed_kind_fails_the_run_on_replay(h: Harness) -> None:
    code = {"version": 1}

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        if code["version"] == 1:
            await ctx.step.sleep("pause", "1h")
        else:
            await ctx.step.run("pause", lambda: 1)
        return "done"

    h.serve(wf)
    run_id = h.start("wf")
    assert shape(h.run(run_id)) == [("pause#1", "sleep", "sleeping", 1)]
    code["version"] = 2  # a deploy while the run sleeps
    run = h.wait(run_id)
    assert run["status"] == "failed" and run["error"]["code"] == "workflows.nondeterminism"


@behaviour
def a_step_calling_a_step_fails_the_run(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def outer() -> Any:
            return ctx.step.run("inner", lambda: 1)

        await ctx.step.run("outer", outer)

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["status"] == "failed" and run["error"]["code"] == "workflows.step_in_step"


@behaviour
def now_and_uuid_are_recorded_once(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        when = await ctx.step.now("when")
        ident = await ctx.step.uuid("ident")
        await ctx.step.sleep("nap", "1m")
        return {"when": when.isoformat(), "ident": ident}

    h.serve(wf)
    run = h.wait(h.start("wf"))
    steps = {s["id"]: s for s in run["steps"]}
    assert run["output"]["ident"] == steps["ident#1"]["output"]
    recorded = datetime.fromisoformat(steps["when#1"]["output"].replace("Z", "+00:00"))
    assert datetime.fromisoformat(run["output"]["when"]) == recorded
    assert shape(run) == [
        ("when#1", "value", "completed", 1),
        ("ident#1", "value", "completed", 1),
        ("nap#1", "sleep", "completed", 1),
    ]


@behaviour
def a_patch_marker_is_a_recorded_value_step(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        first = await ctx.step.patched("new-path")
        again = await ctx.step.patched("new-path")
        await ctx.step.sleep("nap", "1m")
        return [first, again, await ctx.step.patched("new-path")]

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == [True, True, True]
    assert shape(run)[0] == ("patched:new-path", "value", "completed", 1)
    assert run["steps"][0]["output"] is True


# -- values ----------------------------------------------------------------------------------


@behaviour
def step_results_follow_the_json_rules(h: Harness) -> None:
    aware = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        pair = await ctx.step.run("pair", lambda: (1, 2))
        when = await ctx.step.run("when", lambda: aware)
        codes = []
        for bad in (lambda: datetime(2026, 1, 1), lambda: {1, 2}, lambda: "x" * (MIB + 1)):
            try:
                await ctx.step.run("bad", bad, retries=5)
            except StepError as error:
                codes.append(error.code)
        return {"pair": pair, "when": when, "codes": codes}

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == {
        "pair": [1, 2],
        "when": aware.isoformat(),
        "codes": [
            "workflows.invalid_value",
            "workflows.invalid_value",
            "workflows.output_too_large",
        ],
    }
    bad = [s for s in shape(run) if s[0].startswith("bad#")]
    assert bad == [(f"bad#{i}", "run", "failed", 1) for i in (1, 2, 3)]  # never retried


@behaviour
def a_run_output_that_is_not_json_fails_the_run(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        return {1, 2}

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["status"] == "failed" and run["error"]["code"] == "workflows.invalid_value"


# -- retries ---------------------------------------------------------------------------------


@behaviour
def retries_count_attempts_with_one_idempotency_key(h: Harness) -> None:
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

    h.serve(wf)
    run_id = h.start("wf")
    assert shape(h.run(run_id)) == [("call#1", "run", "retrying", 1)]
    run = h.wait(run_id)
    assert run["output"] == "ok" and [a for a, _ in seen] == [1, 2, 3]
    assert len({key for _, key in seen}) == 1
    assert shape(run) == [("call#1", "run", "completed", 3)]


@behaviour
def a_step_out_of_retries_raises_step_error(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def always() -> None:
            raise ValueError("nope")

        try:
            await ctx.step.run("limited", always, retries=1)
        except StepError as error:
            return [error.code, error.error_name, error.message]

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == ["user", "ValueError", "nope"]
    assert shape(run) == [("limited#1", "run", "failed", 2)]


@behaviour
def default_retries_are_three_and_the_run_fails(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("boom", lambda: 1 / 0)

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["status"] == "failed"
    assert (run["error"]["code"], run["error"]["name"]) == ("user", "ZeroDivisionError")
    assert shape(run) == [("boom#1", "run", "failed", 4)]


@behaviour
def a_non_retryable_error_fails_at_once(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def refuse() -> None:
            raise NonRetryableError("card declined")

        try:
            await ctx.step.run("charge", refuse, retries=5)
        except StepError as error:
            return error.error_name

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == "NonRetryableError"
    assert shape(run) == [("charge#1", "run", "failed", 1)]


@behaviour
def retry_run_keeps_completed_steps(h: Harness) -> None:
    calls: list[str] = []
    fixed = {"now": False}

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def first() -> str:
            calls.append("first")
            return "a"

        def second() -> str:
            calls.append("second")
            if not fixed["now"]:
                raise RuntimeError("broken")
            return "b"

        return await ctx.step.run("first", first) + await ctx.step.run("second", second, retries=0)

    h.serve(wf)
    run_id = h.start("wf")
    assert h.wait(run_id)["status"] == "failed"
    fixed["now"] = True
    h.retry(run_id)
    run = h.wait(run_id)
    assert (run["status"], run["attempt"], run["output"]) == ("completed", 2, "ab")
    assert calls == ["first", "second", "second"]
    assert shape(run) == [("first#1", "run", "completed", 1), ("second#1", "run", "completed", 1)]


# -- parallel steps --------------------------------------------------------------------------


@behaviour
def steps_awaited_together_run_in_parallel(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        return await asyncio.gather(ctx.step.run("a", lambda: 1), ctx.step.run("b", lambda: 2))

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == [1, 2]
    assert shape(run) == [("a#1", "run", "completed", 1), ("b#1", "run", "completed", 1)]


@behaviour
def a_failed_parallel_step_raises_at_the_gather(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def bad() -> None:
            raise KeyError("k")

        try:
            await ctx.step.all([ctx.step.run("ok", lambda: 1), ctx.step.run("bad", bad, retries=0)])
        except StepError as error:
            return [error.step_id, error.error_name]

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == ["bad#1", "KeyError"]
    assert dict((s[0], s[2]) for s in shape(run)) == {"ok#1": "completed", "bad#1": "failed"}


@behaviour
def a_parallel_step_retries_in_its_branch(h: Harness) -> None:
    attempts: list[int] = []

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        def flaky() -> str:
            attempts.append(step_context().attempt)
            if step_context().attempt == 1:
                raise RuntimeError("once")
            return "b"

        return await asyncio.gather(ctx.step.run("a", lambda: "a"), ctx.step.run("b", flaky))

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == ["a", "b"] and attempts == [1, 2]
    assert shape(run) == [("a#1", "run", "completed", 1), ("b#1", "run", "completed", 2)]


@behaviour
def a_race_answers_the_first_to_end(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        return await ctx.step.race(
            [ctx.step.run("fast", lambda: "won"), ctx.step.sleep("slow", "1h")]
        )

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == "won"


# -- time ------------------------------------------------------------------------------------


@behaviour
def a_three_day_sleep(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        before = await ctx.step.now("before")
        await ctx.step.sleep("cooldown", "3d")
        after = await ctx.step.now("after")
        return int((after - before).total_seconds())  # whole seconds: the engine's take longer

    h.serve(wf)
    run_id = h.start("wf")
    assert shape(h.run(run_id))[-1] == ("cooldown#1", "sleep", "sleeping", 1)
    run = h.wait(run_id)
    assert 3 * 86_400 <= run["output"] < 3 * 86_400 + 60
    assert shape(run)[1] == ("cooldown#1", "sleep", "completed", 1)


@behaviour
def sleep_until_a_time(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        start = await ctx.step.now("start")
        await ctx.step.sleep_until("later", start + timedelta(hours=2))
        return int(((await ctx.step.now("end")) - start).total_seconds())

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert 7200 <= run["output"] < 7260


@behaviour
def a_sleep_over_a_year_fails_its_step(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        try:
            await ctx.step.sleep("forever", "400d")
        except StepError as error:
            return error.code

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == "workflows.sleep_too_long"
    assert shape(run) == [("forever#1", "sleep", "failed", 1)]


@behaviour
def a_run_past_its_time_limit_times_out(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.sleep("long", "1h")

    h.serve(wf)
    run = h.wait(h.start("wf", timeout_seconds=60))
    assert run["status"] == "timedOut" and run["error"]["code"] == "workflows.timed_out"
    assert shape(run) == [("long#1", "sleep", "cancelled", 1)]


# -- waits -----------------------------------------------------------------------------------


@behaviour
def a_callback_gives_its_body_once(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        callback = await ctx.step.create_callback("approve")
        return {"body": await callback.wait()}

    h.serve(wf)
    run_id = h.start("wf")
    assert shape(h.run(run_id)) == [("approve#1", "callback", "waiting", 1)]
    assert h.complete_callback(run_id, "approve#1", {"ok": True}) == 200
    run = h.wait(run_id)
    assert run["output"] == {"body": {"ok": True}}
    assert h.complete_callback(run_id, "approve#1", {"ok": False}) == 409


@behaviour
def a_callback_times_out_with_none(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        callback = await ctx.step.create_callback("approve", timeout_seconds=600)
        return {"body": await callback.wait()}

    h.serve(wf)
    run_id = h.start("wf")
    h.skip(601)
    assert h.run(run_id)["status"] == "completed"
    run = h.wait(run_id)
    assert run["output"] == {"body": None}
    assert h.complete_callback(run_id, "approve#1", {}) == 409


@behaviour
def a_message_resumes_its_waiting_run(h: Harness) -> None:
    queue = h.queue_id()

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        key = f"order:{ctx.input['order']}"
        paid = await ctx.step.wait_for_message(
            "paid", queue_id=queue, key=key, timeout_seconds=86_400
        )
        return None if paid is None else paid["body"]

    h.serve(wf)
    run_id = h.start("wf", {"order": 7})
    assert shape(h.run(run_id)) == [("paid#1", "message", "waiting", 1)]
    assert h.send_message(queue, "order:8", "not yours") == 0
    assert h.send_message(queue, "order:7", '{"amount":"19.99"}') == 1
    assert h.wait(run_id)["output"] == '{"amount":"19.99"}'


@behaviour
def a_message_wait_times_out_with_none(h: Harness) -> None:
    queue = h.queue_id()

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        paid = await ctx.step.wait_for_message("paid", queue_id=queue, key="k", timeout_seconds=60)
        if paid is None:
            return await ctx.step.run("cancel-order", lambda: "cancelled")
        return "paid"

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == "cancelled"
    assert shape(run)[0] == ("paid#1", "message", "completed", 1)


@behaviour
def a_child_run_gives_its_output_or_its_error(h: Harness) -> None:
    @workflow("kid")
    async def kid(ctx: Context) -> Any:
        await ctx.step.sleep("nap", "1h")
        if ctx.input.get("fail"):
            raise LookupError("no such thing")
        return {"got": ctx.input["n"]}

    @workflow("parent")
    async def parent(ctx: Context) -> Any:
        good = await ctx.step.invoke("good", workflow="kid", input={"n": 1})
        try:
            await ctx.step.invoke("bad", workflow="kid", input={"fail": True})
        except StepError as error:
            return {"good": good, "bad": [error.code, error.error_name]}

    h.serve(kid, parent)
    run = h.wait(h.start("parent"))
    assert run["output"] == {"good": {"got": 1}, "bad": ["user", "LookupError"]}
    assert [s[:3] for s in shape(run)] == [
        ("good#1", "invoke", "completed"),
        ("bad#1", "invoke", "failed"),
    ]


# -- cancellation ----------------------------------------------------------------------------


@behaviour
def cancelling_a_sleeping_run_lets_cleanup_run(h: Harness) -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        try:
            await ctx.step.sleep("long", "30d")
        except RunCancelledError:
            await ctx.step.run("cleanup", lambda: "cleaned")
            raise

    h.serve(wf)
    run_id = h.start("wf")
    h.cancel(run_id)
    run = h.wait(run_id)
    assert run["status"] == "cancelled"
    assert shape(run) == [("long#1", "sleep", "cancelled", 1), ("cleanup#1", "run", "completed", 1)]


@behaviour
def cancelling_a_parent_cancels_its_child(h: Harness) -> None:
    @workflow("kid")
    async def kid(ctx: Context) -> Any:
        await ctx.step.sleep("nap", "10d")

    @workflow("parent")
    async def parent(ctx: Context) -> Any:
        return await ctx.step.invoke("child", workflow="kid")

    h.serve(kid, parent)
    run_id = h.start("parent")
    child_id = h.run(run_id)["steps"][0]["childRunId"]
    assert h.run(child_id)["status"] == "running"
    h.cancel(run_id)
    assert h.wait(run_id)["status"] == "cancelled"
    assert h.wait(child_id)["status"] == "cancelled"
    assert shape(h.run(run_id)) == [("child#1", "invoke", "cancelled", 1)]


# -- plain def workflows ---------------------------------------------------------------------


@behaviour
def a_plain_def_workflow_blocks_on_its_steps(h: Harness) -> None:
    @workflow("wf")
    def wf(ctx: Context) -> Any:
        first = ctx.step.run("first", lambda: 1)
        ctx.step.sleep("nap", "1d")
        both = ctx.step.parallel(
            lambda: ctx.step.run("x", lambda: 2), lambda: ctx.step.run("y", lambda: 3)
        )
        return first + sum(both)

    h.serve(wf)
    run = h.wait(h.start("wf"))
    assert run["output"] == 6
    assert [s[0] for s in shape(run)] == ["first#1", "nap#1", "x#1", "y#1"]
