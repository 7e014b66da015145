"""Workflows the end-to-end tests run, with counters that prove how often each step ran."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from ezgh_workflows import Context, PushApp, workflow

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
    GATES.clear()


class CardDeclinedError(Exception):
    pass


@workflow("onboarding")
async def onboarding(ctx: Context) -> Any:
    user = await ctx.step.run("load-user", lambda: count("load-user", {"email": "a@x.io"}))
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


app = PushApp([onboarding, sequence, plain, charge, catcher, big, gated])


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
