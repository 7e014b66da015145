"""The workflows whose invocations are recorded as golden exchanges.

Each is deterministic given its recorded step results: the same request, with the same step
call answers, makes the same step calls and the same answer, on the first run and on replay.
A step body that must fail once decides by its attempt (`step_context()`), not by a counter.
"""

from __future__ import annotations

from typing import Any

from ezgh_workflows import Context, NonRetryableError, PushApp, step_context, workflow


class CardDeclinedError(Exception):
    """A user error a workflow raises."""


def _flaky(value: Any) -> Any:
    """Fails on the first attempt, succeeds on the next."""
    if step_context().attempt == 1:
        raise RuntimeError("first attempt fails")
    return value


@workflow("golden-sequence")
async def sequence(ctx: Context) -> Any:
    user = await ctx.step.run("load-user", lambda: {"email": "a@example.invalid"})
    await ctx.step.run("welcome-email", lambda: "sent")
    return await ctx.step.run("follow-up", lambda: user["email"])


@workflow("golden-sleep")
async def sleep(ctx: Context) -> Any:
    first = await ctx.step.run("before", lambda: 1)
    await ctx.step.sleep("nap", "1h")
    second = await ctx.step.run("after", lambda: 2)
    return first + second


@workflow("golden-retry")
async def retry(ctx: Context) -> Any:
    return await ctx.step.run("flaky", lambda: _flaky("ok"), retries=2)


@workflow("golden-failure")
async def failure(ctx: Context) -> Any:
    await ctx.step.run("charge", lambda: "charged")
    raise CardDeclinedError("Card declined")


@workflow("golden-step-failure")
async def step_failure(ctx: Context) -> Any:
    def give_up() -> None:
        raise NonRetryableError("no point retrying")

    try:
        await ctx.step.run("give-up", give_up, retries=3)
    except Exception as exc:  # the workflow sees the step's failure as StepError
        return {"caught": type(exc).__name__}
    return {"caught": None}


@workflow("golden-values")
async def values(ctx: Context) -> Any:
    token = await ctx.step.uuid("token")
    await ctx.step.now("started")
    return await ctx.step.run("use", lambda: len(token))


@workflow("golden-gather")
async def gather(ctx: Context) -> Any:
    a, b = await ctx.step.all([ctx.step.run("a", lambda: "A"), ctx.step.run("b", lambda: "B")])
    return await ctx.step.run("join", lambda: a + b)


@workflow("golden-child")
async def child(ctx: Context) -> Any:
    result = await ctx.step.invoke("call-child", workflow="golden-sequence", input={})
    return {"child": result}


@workflow("golden-large")
async def large(ctx: Context) -> Any:
    """An input and a step result over 64 KiB, kept in S3: from protocol 1.5 the replay's
    request gives them as references, which the SDK reads."""
    big = await ctx.step.run("big", lambda: "x" * 70_000)
    await ctx.step.sleep("nap", "1h")
    return [len(ctx.input), len(big)]


WORKFLOWS = [sequence, sleep, retry, failure, step_failure, values, gather, child, large]

#: What each golden exchange starts (workflow name → input), in recording order.
SCENARIOS: dict[str, Any] = {
    "golden-sequence": {},
    "golden-sleep": {},
    "golden-retry": {},
    "golden-failure": {},
    "golden-step-failure": {},
    "golden-values": {},
    "golden-gather": {},
    "golden-child": {},
    "golden-large": "y" * 70_000,
}


def make_app(**kwargs: Any) -> PushApp:
    """A push app serving the golden workflows (kwargs go to `PushApp`)."""
    return PushApp(WORKFLOWS, **kwargs)
