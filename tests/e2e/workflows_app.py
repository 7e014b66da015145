"""Workflows the end-to-end tests run, with counters that prove how often each step ran."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from ezgh_workflows import (
    Context,
    NonRetryableError,
    PushApp,
    RunCancelledError,
    StepError,
    step_context,
    workflow,
)

CALLS: Counter[str] = Counter()
_lock = threading.Lock()
GATES: dict[str, threading.Event] = {}


def count(name: str, value: Any = None) -> Any:
    with _lock:
        CALLS[name] += 1
    return value


def reset() -> None:
    with _lock:
        CALLS.clear()
        SEEN.clear()
    GATES.clear()


class CardDeclinedError(Exception):
    pass


@workflow("onboarding")
async def onboarding(ctx: Context) -> Any:
    def load_user() -> Any:
        # Where this step's own spans would join the run's trace (tests/e2e/test_observability).
        trace = step_context().trace
        assert trace is not None and ctx.trace is not None
        note("trace", {"run_id": ctx.run_id, "traceparent": trace.traceparent,
                       "same": trace == ctx.trace})  # fmt: skip
        return count("load-user", {"email": "a@x.io"})

    user = await ctx.step.run("load-user", load_user)
    await ctx.step.run("welcome-email", lambda: count("welcome-email", "sent"))
    await ctx.step.sleep("cooldown", ctx.input.get("cooldown", "3d"))
    return await ctx.step.run("follow-up", lambda: count("follow-up", user["email"]))


@workflow("sequence")
async def sequence(ctx: Context) -> Any:
    total = 0
    for i in range(ctx.input.get("n", 3)):
        total += await ctx.step.run("add", lambda i=i: count(f"add-{i}", i))
    return total


@workflow("plain")
def plain(ctx: Context) -> Any:
    first = ctx.step.run("first", lambda: count("plain-first", 1))
    when = ctx.step.now("when")
    ident = ctx.step.uuid("ident")
    return {"first": first, "when": when.isoformat(), "ident": ident}


@workflow("charge")
async def charge(ctx: Context) -> Any:
    def decline() -> None:
        count("charge")
        raise CardDeclinedError("Card declined")

    await ctx.step.run("charge", decline)


@workflow("catcher")
async def catcher(ctx: Context) -> Any:
    def boom() -> None:
        raise ValueError("nope")

    try:
        await ctx.step.run("boom", boom)
    except Exception as exc:  # a failed step raises in the workflow, where it can be caught
        return {"caught": type(exc).__name__, "message": getattr(exc, "message", str(exc))}
    return {"caught": None}


@workflow("big")
async def big(ctx: Context) -> Any:
    blob = await ctx.step.run("blob", lambda: "x" * ctx.input["size"])
    return {"blob": blob}


@workflow("gated")
async def gated(ctx: Context) -> Any:
    def wait_gate() -> str:
        count("gated")
        GATES.setdefault(ctx.run_id, threading.Event()).wait(10)
        return "done"

    return await ctx.step.run("slow", wait_gate)


# --- retries, waits, children, parallel steps, cancellation -------------------------------

SEEN: dict[str, list[Any]] = {}


def note(key: str, value: Any) -> None:
    with _lock:
        SEEN.setdefault(key, []).append(value)


@workflow("flaky")
async def flaky(ctx: Context) -> Any:
    def attempt() -> str:
        info = step_context()
        note("flaky", (info.attempt, info.idempotency_key))
        if info.attempt < ctx.input.get("succeed_on", 3):
            raise RuntimeError(f"attempt {info.attempt} failed")
        return "ok"

    return await ctx.step.run("call", attempt, retries=ctx.input.get("retries", 3))


@workflow("never-retry")
async def never_retry(ctx: Context) -> Any:
    def give_up() -> None:
        count("never-retry")
        raise NonRetryableError("no point")

    await ctx.step.run("give-up", give_up, retries=5)


@workflow("approval")
async def approval(ctx: Context) -> Any:
    cb = await ctx.step.create_callback("approve", timeout_seconds=ctx.input.get("timeout"))
    await ctx.step.run("publish", lambda: note(ctx.run_id, cb.url))
    if ctx.input.get("sleep_first"):
        await ctx.step.sleep("pause", ctx.input["sleep_first"])
    body = await cb.wait()
    return {"body": body}


@workflow("parent")
async def parent(ctx: Context) -> Any:
    try:
        out = await ctx.step.invoke("child", workflow=ctx.input["child"], input=ctx.input.get("ci"))
    except StepError as exc:
        return {"caught": exc.code, "name": exc.error_name, "message": exc.message}
    return {"child": out}


@workflow("kid")
async def kid(ctx: Context) -> Any:
    return await ctx.step.run("work", lambda: count("kid", {"got": ctx.input}))


@workflow("sleepy-kid")
async def sleepy_kid(ctx: Context) -> Any:
    await ctx.step.sleep("nap", "1d")
    return "rested"


@workflow("fan")
async def fan(ctx: Context) -> Any:
    def branch(name: str) -> Any:
        count(f"fan-{name}")
        if name in ctx.input.get("fail", []):
            raise ValueError(f"branch {name} failed")
        return name

    try:
        got = await asyncio.gather(
            ctx.step.run("a", lambda: branch("a"), retries=0),
            ctx.step.run("b", lambda: branch("b"), retries=0),
        )
    except StepError as exc:
        return {"caught": exc.message}
    return await ctx.step.run("join", lambda: "+".join(got))


@workflow("fan-plain")
def fan_plain(ctx: Context) -> Any:
    got = ctx.step.all(
        [
            lambda: ctx.step.run("x", lambda: count("fan-x", 1)),
            lambda: ctx.step.run("y", lambda: count("fan-y", 2)),
        ]
    )
    first = ctx.step.race(
        [
            lambda: ctx.step.run("fast", lambda: "fast"),
            lambda: ctx.step.sleep("slow", "1d"),
        ]
    )
    return {"all": got, "race": first}


@workflow("waiter")
async def waiter(ctx: Context) -> Any:
    kind = ctx.input["kind"]
    try:
        if kind == "sleep":
            await ctx.step.sleep("wait", "2d")
        elif kind == "callback":
            cb = await ctx.step.create_callback("wait")
            await cb.wait()
        elif kind == "child":
            await ctx.step.invoke("wait", workflow="sleepy-kid", input={})
        elif kind == "message":
            await ctx.step.wait_for_message(
                "wait", queue_id=ctx.input["queue"], key=ctx.input["key"], timeout_seconds=86_400
            )
    except RunCancelledError:
        note(ctx.run_id, "cancelled")
        raise
    finally:
        await ctx.step.run("cleanup", lambda: count(f"cleanup-{kind}", "clean"))
    return "not cancelled"


@workflow("message-wait")
async def message_wait(ctx: Context) -> Any:
    got = await ctx.step.wait_for_message(
        "paid",
        queue_id=ctx.input["queue"],
        key=ctx.input["key"],
        timeout_seconds=ctx.input.get("timeout", 3600),
    )
    return {"message": got}


@workflow("slow")
async def slow(ctx: Context) -> Any:
    await ctx.step.run("first", lambda: count(f"slow-first-{ctx.attempt}", 1))
    if ctx.attempt == 1:
        await ctx.step.sleep("long", "2d")
    return await ctx.step.run("last", lambda: ctx.attempt)


@workflow("too-long")
async def too_long(ctx: Context) -> Any:
    try:
        await ctx.step.sleep("forever", "400d")
    except StepError as exc:
        return {"code": exc.code}
    return {"code": None}


app = PushApp(
    [
        onboarding,
        sequence,
        plain,
        charge,
        catcher,
        big,
        gated,
        flaky,
        never_retry,
        approval,
        parent,
        kid,
        sleepy_kid,
        fan,
        fan_plain,
        waiter,
        message_wait,
        slow,
        too_long,
    ]
)


class FlakyApp:
    """The push app behind a switch that makes it answer 500, as an app that is down would."""

    def __init__(self, inner: PushApp) -> None:
        self.inner = inner
        self.failures_left = 0
        self.requests = 0

    @property
    def signing_key(self) -> str | None:
        return self.inner.signing_key

    @signing_key.setter
    def signing_key(self, value: str | None) -> None:
        self.inner.signing_key = value

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests += 1
            if self.failures_left > 0:
                self.failures_left -= 1
                await send({"type": "http.response.start", "status": 500, "headers": []})
                await send({"type": "http.response.body", "body": b"down"})
                return
        await self.inner(scope, receive, send)


served = FlakyApp(app)


# --- queues ------------------------------------------------------------------------------

QUEUE_INPUTS: list[Any] = []  # every input a queue-started run recorded, in the order recorded


@workflow("chargeCustomer")
async def charge_customer(ctx: Context) -> Any:
    def record() -> Any:
        count("chargeCustomer")
        with _lock:
            QUEUE_INPUTS.append(ctx.input)
        return ctx.input["messageId"]

    await ctx.step.run("record", record)
    return ctx.input


@workflow("sendToQueue")
async def send_to_queue_workflow(ctx: Context) -> Any:
    from ezgh_workflows import QueuesClient

    queues = QueuesClient()  # EZGH_* from the environment (the local runtime sets them)
    sent = await ctx.step.send_to_queue(
        "notify", queues, ctx.input["queueId"], ctx.input["messages"]
    )
    return sent


app._workflows.update({w.name: w for w in (charge_customer, send_to_queue_workflow)})
