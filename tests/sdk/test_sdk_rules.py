"""SDK rules through a PushApp: explicit ids, duplicates, values, sizes, suspension."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from ezgh_workflows import Context, StepError, workflow
from sdk_engine import Engine, invoke, make_app, run_to_end

pytestmark = pytest.mark.moto_only(
    "the SDK's own rules; what the engine records and a replay reads back runs on both in test_sdk_replay.py"
)


def _run_steps(engine: Engine, body: Any, name: str = "wf") -> dict[str, Any]:
    return invoke(make_app(engine, workflow(name)(body)), engine, name)


def test_explicit_ids_are_used_as_is(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        return [await ctx.step.run("send", lambda u=u: u, id=f"send-{u}") for u in ("a", "b")]

    assert _run_steps(engine, wf)["output"] == ["a", "b"]
    assert [op["stepId"] for op in engine.ops("start")] == ["send-a", "send-b"]


def test_explicit_ids_do_not_shift_the_counter(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("send", lambda: 1, id="send:x.1")
        await ctx.step.run("send", lambda: 2)

    _run_steps(engine, wf)
    assert [op["stepId"] for op in engine.ops("start")] == ["send:x.1", "send#1"]


@pytest.mark.parametrize("bad", ["has#hash", "", "x" * 129, "sp ace", "é"])
def test_invalid_explicit_id_raises_value_error(engine: Engine, bad: str) -> None:
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("s", lambda: 1, id=bad)

    outcome = _run_steps(engine, wf)
    assert outcome["error"]["code"] == "user"
    assert outcome["error"]["name"] == "ValueError"
    assert engine.calls == []


def test_reused_explicit_id_is_a_duplicate(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("a", lambda: 1, id="same")
        await ctx.step.run("b", lambda: 2, id="same")

    outcome = _run_steps(engine, wf)
    assert outcome["error"]["code"] == "workflows.duplicate_step_name"
    assert outcome["error"]["name"] == "DuplicateStepNameError"


def test_same_name_pending_together_is_a_duplicate(engine: Engine) -> None:
    calls: list[int] = []

    async def wf(ctx: Context) -> Any:
        return await asyncio.gather(
            ctx.step.run("a", lambda: calls.append(1)), ctx.step.run("a", lambda: calls.append(2))
        )

    outcome = _run_steps(engine, wf)
    assert outcome["error"]["code"] == "workflows.duplicate_step_name"
    assert calls == []


def test_same_name_with_explicit_ids_may_be_pending_together(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        return await asyncio.gather(
            ctx.step.run("a", lambda: 1, id="a-1"), ctx.step.run("a", lambda: 2, id="a-2")
        )

    outcome, _ = run_to_end(make_app(engine, workflow("wf")(wf)), engine, "wf")
    assert outcome["output"] == [1, 2]


@pytest.mark.parametrize("name", ["", "x" * 257, "nul\x00", 5])
def test_invalid_step_names(engine: Engine, name: Any) -> None:
    async def wf(ctx: Context) -> Any:
        await ctx.step.run(name, lambda: 1)

    assert _run_steps(engine, wf)["error"]["name"] == "ValueError"


def test_step_name_limit_counts_utf8_bytes(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("é" * 128, lambda: 1)  # 256 bytes: fine
        await ctx.step.run("é" * 129, lambda: 1)  # 258 bytes: too long

    outcome = _run_steps(engine, wf)
    assert outcome["error"]["name"] == "ValueError"
    assert len(engine.ops("complete")) == 1


AWARE = datetime(2026, 10, 13, 18, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seen"),
    [
        ({"a": [1, 2.5, True, None, "s"]}, {"a": [1, 2.5, True, None, "s"]}),
        ((1, (2, 3)), [1, [2, 3]]),
        (AWARE, "2026-10-13T18:00:00+00:00"),
        (date(2026, 1, 2), "2026-01-02"),
        ({"when": AWARE}, {"when": "2026-10-13T18:00:00+00:00"}),
    ],
)
def test_results_pass_through_json(engine: Engine, value: Any, seen: Any) -> None:
    received: list[Any] = []

    async def wf(ctx: Context) -> None:
        received.append(await ctx.step.run("v", lambda: value))

    _run_steps(engine, wf)
    assert received == [seen]
    assert engine.ops("complete")[0]["output"] == seen


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 1, 1),
        Decimal("1.5"),
        {1, 2},
        b"bytes",
        float("nan"),
        float("inf"),
        object(),
        {1: "int key"},
        [1, {"x": {2, 3}}],
    ],
)
def test_invalid_results_fail_the_step(engine: Engine, value: Any) -> None:
    errors: list[StepError] = []

    async def wf(ctx: Context) -> None:
        try:
            await ctx.step.run("v", lambda: value)
        except StepError as exc:
            errors.append(exc)

    assert _run_steps(engine, wf)["outcome"] == "completed"
    assert [e.code for e in errors] == ["workflows.invalid_value"]
    assert errors[0].error_name == "InvalidValueError"
    assert engine.ops("fail")[0]["error"]["code"] == "workflows.invalid_value"
    assert engine.steps["v#1"]["attempt"] == 1  # not retried


def test_large_result_fails_with_output_too_large(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        fits = await ctx.step.run("fits", lambda: "x" * (1_048_576 - 2))
        await ctx.step.run("big", lambda: "x" * 1_048_576)
        return len(fits)

    outcome = _run_steps(engine, wf)
    assert outcome["error"]["code"] == "workflows.output_too_large"
    assert engine.ops("fail")[0]["stepId"] == "big#1"


def test_invalid_run_output_fails_the_run(engine: Engine) -> None:
    async def wf(ctx: Context) -> Any:
        return {"when": datetime(2026, 1, 1)}

    assert _run_steps(engine, wf)["error"]["code"] == "workflows.invalid_value"


def test_too_large_run_output_fails_the_run(engine: Engine) -> None:
    def wf(ctx: Context) -> Any:
        return "y" * 2_000_000

    assert _run_steps(engine, wf)["error"]["code"] == "workflows.output_too_large"


def test_sleep_suspends_with_waits(engine: Engine) -> None:
    cleanup: list[str] = []

    async def wf(ctx: Context) -> None:
        try:
            await ctx.step.sleep("cooldown", "3d")
        except Exception:
            cleanup.append("swallowed")  # must not happen: suspension is a BaseException
        finally:
            cleanup.append("finally")

    outcome = _run_steps(engine, wf)
    assert outcome == {
        "protocol": "1.5",
        "deploymentId": None,
        "outcome": "suspended",
        "waits": [{"stepId": "cooldown#1", "name": "cooldown", "kind": "sleep", "seconds": 259200}],
    }
    assert cleanup == ["finally"]
    # The engine invokes the run again when the sleep has ended (the fake invoked it while
    # it still slept): the replay goes past the sleep, and the cleanup runs once more.
    again = _run_steps(engine, wf)
    assert engine.steps["cooldown#1"]["status"] == "completed"
    assert again["outcome"] == "completed" and cleanup == ["finally", "finally"]


def test_sleep_until_and_parallel_sleeps(engine: Engine) -> None:
    when = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

    async def wf(ctx: Context) -> None:
        await asyncio.gather(
            ctx.step.sleep_until("until", min(when, datetime.now(UTC) + timedelta(days=1))),
            ctx.step.sleep("short", timedelta(minutes=1, seconds=30)),
            ctx.step.run("work", lambda: 1),
        )

    outcome = _run_steps(engine, wf)
    waits = outcome["waits"]
    assert [w["stepId"] for w in waits] == ["until#1", "short#1"]
    assert waits[0]["until"].endswith("Z") and "seconds" not in waits[0]
    assert waits[1]["seconds"] == 90
    assert engine.steps["work#1"]["status"] == "completed"  # ran before suspending


@pytest.mark.parametrize("duration", ["1y", "3 d", "", "-1s", -5, "1m1h", True, None])
def test_bad_sleep_durations(engine: Engine, duration: Any) -> None:
    async def wf(ctx: Context) -> None:
        await ctx.step.sleep("s", duration)

    assert _run_steps(engine, wf)["error"]["name"] == "ValueError"


def test_naive_sleep_until_is_refused(engine: Engine) -> None:
    def wf(ctx: Context) -> None:
        ctx.step.sleep_until("s", datetime(2030, 1, 1))

    assert _run_steps(engine, wf)["error"]["name"] == "ValueError"


def _sdk_threads() -> list[threading.Thread]:
    """Threads the SDK starts: invocations, workflows, and asyncio.to_thread workers."""
    return [t for t in threading.enumerate() if t.name.startswith(("ezgh", "asyncio_"))]


def _wait_for_no_sdk_threads() -> list[str]:
    """The SDK threads still alive after each was given a minute to end (they end at once;
    a short budget would fail on a slow machine, not on a thread that never ends)."""
    for thread in _sdk_threads():
        thread.join(60)
    return [t.name for t in _sdk_threads()]


def test_sync_workflow_suspends_and_its_thread_ends(engine: Engine) -> None:
    finished: list[str] = []

    def wf(ctx: Context) -> None:
        ctx.step.run("work", lambda: 1)  # a worker thread for the step function
        try:
            ctx.step.sleep("nap", 60)
        except Exception:
            finished.append("swallowed")
        finally:
            finished.append("finally")

    assert _run_steps(engine, wf)["outcome"] == "suspended"
    assert finished == ["finally"]
    assert _wait_for_no_sdk_threads() == []


def test_steps_after_suspension_raise_again(engine: Engine) -> None:
    later: list[str] = []

    async def wf(ctx: Context) -> None:
        try:
            await ctx.step.sleep("nap", 1)
        except BaseException:
            try:
                await ctx.step.run("after", lambda: later.append("ran"))
            except BaseException as exc:
                later.append(type(exc).__name__)

    assert _run_steps(engine, wf)["outcome"] == "suspended"
    assert later == ["SuspendInvocation"]


def test_conflict_aborts_the_invocation(engine: Engine) -> None:
    engine.conflict = True

    async def wf(ctx: Context) -> Any:
        return await ctx.step.run("a", lambda: 1)

    outcome = _run_steps(engine, wf)
    assert outcome["outcome"] == "aborted"
    assert "lease" in outcome["reason"]


def test_no_task_warnings(
    engine: Engine, recwarn: pytest.WarningsRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    async def wf(ctx: Context) -> None:
        await asyncio.gather(ctx.step.sleep("a", 1), ctx.step.sleep("b", 1))

    assert _run_steps(engine, wf)["outcome"] == "suspended"
    import gc

    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]
    assert "destroyed but it is pending" not in caplog.text
    assert "never retrieved" not in caplog.text
