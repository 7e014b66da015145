"""The test kit's own features (`ezgh_workflows.testing`): the clock it skips, mocked steps,
injected failures, child runs it runs or leaves to the test, what it refuses, the pytest
fixture, and that it imports nothing of the engine. What it shares with the engine (how runs
behave) is proved by test_behaviours.py, on both."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ezgh_workflows import (
    Context,
    NonRetryableError,
    QueuesClient,
    StepError,
    step_context,
    testing,
    workflow,
)
from ezgh_workflows.testing import (
    InvalidState,
    RunFailed,
    RunStuck,
    WorkflowEnvironment,
)

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@workflow("onboarding")
async def onboarding(ctx: Context) -> Any:
    user = await ctx.step.run("load-user", lambda: {"email": "real@example.com"})
    await ctx.step.run("welcome-email", lambda: "sent")
    await ctx.step.sleep("cooldown", "3d")
    return await ctx.step.run("follow-up", lambda: user["email"])


def test_a_three_day_sleep_is_skipped() -> None:
    env = WorkflowEnvironment([onboarding], start_time=START)
    run = env.start("onboarding", {"userId": "u_42"})
    assert run.status == "running" and env.now == START  # started: no time skipped
    assert [(s.id, s.status) for s in run.steps][-1] == ("cooldown#1", "sleeping")
    assert run.step("cooldown").wake_at == START + timedelta(days=3)
    assert run.result() == "real@example.com"
    assert env.now == START + timedelta(days=3)
    assert run.step("cooldown").ended_at == START + timedelta(days=3)
    assert run.invocations == 2  # one to the sleep, one after it


def test_skip_fires_what_falls_due_in_order() -> None:
    env = WorkflowEnvironment([onboarding], start_time=START)
    run = env.start("onboarding")
    env.skip("2d")
    assert run.status == "running" and env.now == START + timedelta(days=2)
    env.skip(timedelta(days=1))
    assert run.status == "completed" and run.output == "real@example.com"


def test_a_mocked_step_runs_the_mock_as_the_step() -> None:
    env = WorkflowEnvironment([onboarding])
    env.mock_step("load-user", returns={"email": "mock@example.com"})
    seen: list[int] = []

    def follow_up() -> str:
        seen.append(step_context().attempt)
        return "mocked follow-up"

    env.mock_step("follow-up", follow_up)
    run = env.start("onboarding")
    assert run.step("load-user").output == {"email": "mock@example.com"}
    assert run.result() == "mocked follow-up" and seen == [1]
    env.unmock_step("follow-up")
    assert env.start("onboarding").result() == "mock@example.com"
    with pytest.raises(TypeError):
        env.mock_step("x")


def test_a_mock_follows_the_value_rules_and_the_retries() -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        try:
            await ctx.step.run("fetch", lambda: "real", retries=2)
        except StepError as error:
            return error.code

    env = WorkflowEnvironment([wf])
    env.mock_step("fetch", lambda: datetime(2026, 1, 1))  # naive: not a JSON value
    run = env.start("wf")
    assert run.result() == "workflows.invalid_value"
    assert [a.status for a in run.attempts("fetch")] == ["failed"]  # never retried


def test_an_injected_failure_takes_the_retry_policy() -> None:
    @workflow("charge")
    async def charge(ctx: Context) -> Any:
        return await ctx.step.run("charge", lambda: step_context().attempt, retries=3)

    env = WorkflowEnvironment([charge], start_time=START)
    env.fail_attempt("charge", 1)
    env.fail_attempt("charge", 2, ConnectionError("gateway down"))
    run = env.start("charge")
    assert run.step("charge").status == "retrying"
    assert run.result() == 3
    attempts = run.attempts("charge")
    assert [(a.attempt, a.status) for a in attempts] == [
        (1, "retrying"),
        (2, "retrying"),
        (3, "completed"),
    ]
    assert attempts[1].error == {
        "code": "user",
        "name": "ConnectionError",
        "message": "gateway down",
    }
    assert attempts[1].started_at > START and env.now - START < timedelta(seconds=4)  # backoff


def test_a_failure_in_every_attempt_fails_the_run() -> None:
    env = WorkflowEnvironment([onboarding])
    env.fail_attempt("follow-up", None, NonRetryableError)
    run = env.start("onboarding")
    with pytest.raises(RunFailed) as failed:
        run.result()
    assert failed.value.status == "failed"
    assert failed.value.error == {"code": "user", "name": "NonRetryableError", "message": ""}
    assert run.step("follow-up").attempt == 1


def test_send_to_queue_is_mocked_by_its_name() -> None:
    queues = QueuesClient(
        api_key="k", organization_id="o", project_id="p", base_url="http://127.0.0.1:9"
    )

    @workflow("order")
    async def order(ctx: Context) -> Any:
        placed = await ctx.step.run("place", lambda: {"id": 7})
        return await ctx.step.send_to_queue("notify", queues, "q", [{"body": str(placed["id"])}])

    env = WorkflowEnvironment([order])
    sent: list[str] = []

    def notify() -> Any:
        sent.append(step_context().idempotency_key)
        return [{"messageId": "m-1"}]

    env.mock_step("notify", notify)
    assert env.execute("order") == [{"messageId": "m-1"}] and len(sent) == 1


def test_a_message_for_one_workflow_leaves_another_waiting() -> None:
    def waiter(name: str) -> Any:
        @workflow(name)
        async def wf(ctx: Context) -> Any:
            got = await ctx.step.wait_for_message(
                "paid", queue_id="q", key="k", timeout_seconds=3600
            )
            return None if got is None else got["body"]

        return wf

    env = WorkflowEnvironment([waiter("order"), waiter("audit")])
    order, audit = env.start("order"), env.start("audit")
    assert env.send_message("q", "k", "for orders", workflow="order") == 1
    assert (order.output, audit.status) == ("for orders", "running")
    assert env.send_message("q", "k", "for everyone") == 1
    assert audit.output == "for everyone"


def test_children_are_run_or_left_to_the_test() -> None:
    @workflow("kid")
    async def kid(ctx: Context) -> Any:
        return {"got": ctx.input}

    @workflow("parent")
    async def parent(ctx: Context) -> Any:
        try:
            return await ctx.step.invoke("child", workflow="kid", input=ctx.input)
        except StepError as error:
            return error.error_name

    env = WorkflowEnvironment([kid, parent])
    run = env.start("parent", 5)
    assert run.result() == {"got": 5}
    assert [c.workflow for c in run.children] == ["kid"]
    assert run.child("child").output == {"got": 5}

    manual = WorkflowEnvironment([kid, parent], run_children=False)
    run = manual.start("parent", 5)
    child = run.child("child")
    assert child.status == "running" and run.step("child").status == "waiting"
    with pytest.raises(RunStuck, match="test's to end"):
        run.wait()
    child.fail("no stock", name="StockError")
    assert run.result() == "StockError"
    with pytest.raises(InvalidState):
        child.complete(1)  # it ended


def test_a_child_of_a_workflow_not_registered_waits_for_the_test() -> None:
    @workflow("parent")
    async def parent(ctx: Context) -> Any:
        return await ctx.step.invoke("charge", workflow="billing", input={"cents": 100})

    env = WorkflowEnvironment([parent])
    run = env.start("parent")
    run.child("charge").complete({"charged": True})
    assert run.result() == {"charged": True}


def test_waiting_on_the_test_is_reported_not_waited_for() -> None:
    @workflow("approval")
    async def approval(ctx: Context) -> Any:
        callback = await ctx.step.create_callback("approve")
        return await callback.wait()

    env = WorkflowEnvironment([approval])
    run = env.start("approval")
    with pytest.raises(RunStuck, match="callback 'approve#1'"):
        run.wait()
    assert run.step("approve").url and run.step("approve").url.startswith("https://")
    run.complete_callback("approve", {"ok": True})
    assert run.output == {"ok": True}
    with pytest.raises(InvalidState):
        run.complete_callback("approve", {})


def test_waiting_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testing, "MAX_WAIT_INVOCATIONS", 40)  # each replays a longer history

    @workflow("sleeper")
    async def sleeper(ctx: Context) -> Any:
        await ctx.step.sleep("nap", "2h")

    @workflow("poller")
    async def poller(ctx: Context) -> Any:
        for i in range(1_000_000):  # a poll a minute, forever
            await ctx.step.sleep("poll", "1m")
            await ctx.step.run("check", lambda i=i: i)

    env = WorkflowEnvironment([sleeper, poller])
    with pytest.raises(RunStuck, match="not within"):
        env.start("sleeper").wait(within="1h")
    with pytest.raises(RunStuck, match="invocations"):
        env.start("poller").wait()


def test_the_one_year_limit_is_reached_by_skipping_only() -> None:
    @workflow("forever")
    async def forever(ctx: Context) -> Any:
        callback = await ctx.step.create_callback("never")
        return await callback.wait()

    env = WorkflowEnvironment([forever], start_time=START)
    run = env.start("forever")
    env.skip("365d")
    assert run.status == "running"
    env.skip("1d")
    assert run.status == "timedOut"
    assert run.error and "one-year limit" in run.error["message"]
    assert run.step("never").status == "cancelled"


def test_what_start_refuses() -> None:
    env = WorkflowEnvironment([onboarding])
    with pytest.raises(ValueError, match="not_found"):
        env.start("nope")
    with pytest.raises(ValueError, match="validation_error"):
        env.start("onboarding", {"at": datetime(2026, 1, 1)})
    with pytest.raises(ValueError, match="timeout_seconds"):
        env.start("onboarding", timeout_seconds=0)
    first = env.start("onboarding", {"n": 1}, run_key="signup-1")
    assert env.start("onboarding", {"n": 1}, run_key="signup-1").id == first.id
    with pytest.raises(ValueError, match="run_key_conflict"):
        env.start("onboarding", {"n": 2}, run_key="signup-1")
    with pytest.raises(ValueError, match="aware"):
        WorkflowEnvironment(start_time=datetime(2026, 1, 1))


def test_a_seed_makes_ids_and_uuids_repeatable() -> None:
    @workflow("ids")
    async def ids(ctx: Context) -> Any:
        return [ctx.run_id, await ctx.step.uuid("u"), (await ctx.step.now("t")).isoformat()]

    first = WorkflowEnvironment([ids], seed=3, start_time=START).execute("ids")
    assert first == WorkflowEnvironment([ids], seed=3, start_time=START).execute("ids")
    assert first[2] == START.isoformat()


def test_the_fixture(workflow_env: WorkflowEnvironment) -> None:
    run = workflow_env.start(onboarding)
    assert run.result() == "real@example.com"
    assert [r.id for r in workflow_env.runs] == [run.id]


def test_the_kit_imports_nothing_of_the_engine() -> None:
    """The SDK is installed alone (`pip install ./sdk`, only httpx): so is its test kit."""
    code = (
        "import sys, ezgh_workflows.testing, ezgh_workflows.pytest_plugin\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('ezgh_engine', 'boto3', 'botocore', 'moto', 'functions'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "sdk")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_pytest_loads_the_fixture_from_the_sdk() -> None:
    """An installed SDK declares its fixture to pytest (the ``pytest11`` entry point)."""
    declared = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]
    assert declared["entry-points"]["pytest11"] == {
        "ezgh_workflows": "ezgh_workflows.pytest_plugin"
    }


def test_patched_in_a_plain_def_workflow() -> None:
    @workflow("plain")
    def plain(ctx: Context[Any]) -> Any:
        taken = ctx.step.patched("v2")
        ctx.step.sleep("nap", "1h")
        return [taken, ctx.step.patched("v2")]

    env = WorkflowEnvironment([plain])
    run = env.start("plain")
    assert run.result() == [True, True]
    first = run.steps[0]
    assert (first.id, first.kind, first.output) == ("patched:v2", "value", True)

    @workflow("bad")
    async def bad(ctx: Context) -> Any:
        return await ctx.step.patched("not an id")

    with pytest.raises(RunFailed, match="invalid patch id"):
        env.start(bad).result()
