"""The code a deploy replaces (deploy_v2.py is the code that replaces it): one workflow per
kind of change, each with runs in flight in its three-day `cooldown` when the new code comes.
`ezgh workflows replay-check --module tests.e2e.deploy_v2:app` holds the new code against
those runs (tests/e2e/test_replay_check.py, tests/sdk/test_replayer.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ezgh_workflows import Context, PushApp, workflow

CALLS: Counter[str] = Counter()  # how often each step's work ran, old code and new together
RECIPIENTS = ["ana", "ben"]


def work(name: str, value: Any = None) -> Any:
    CALLS[name] += 1
    return value if value is not None else f"{name} done"


@workflow("newsletter")
async def newsletter(ctx: Context) -> Any:
    """Three `send` steps, counted by name (send#1, send#2, send#3)."""
    welcome = await ctx.step.run("send", lambda: work("send welcome", "welcome sent"))
    tips = await ctx.step.run("send", lambda: work("send tips", "tips sent"))
    survey = await ctx.step.run("send", lambda: work("send survey", "survey sent"))
    await ctx.step.sleep("cooldown", "3d")
    return {"welcome": welcome, "tips": tips, "survey": survey}


@workflow("profile")
async def profile(ctx: Context) -> Any:
    user = await ctx.step.run("load-user", lambda: work("load user", {"email": "a@x.io"}))
    await ctx.step.sleep("cooldown", "3d")
    return user


@workflow("reminder")
async def reminder(ctx: Context) -> Any:
    await ctx.step.run("remind", lambda: work("remind"))
    await ctx.step.sleep("cooldown", "3d")
    return "reminded"


@workflow("notify")
async def notify(ctx: Context) -> Any:
    """One `notify` step (the new code runs it once per recipient)."""
    sent = await ctx.step.run("notify", lambda: work("notify owner", "owner notified"))
    await ctx.step.sleep("cooldown", "3d")
    return [sent]


@workflow("digest")
async def digest(ctx: Context) -> Any:
    built = await ctx.step.run("build", lambda: work("build", "digest"))
    await ctx.step.sleep("cooldown", "3d")
    return await ctx.step.run("deliver", lambda: work("deliver", f"{built} delivered"))


@workflow("invites")
async def invites(ctx: Context) -> Any:
    """A step in a loop, counted by name (the new code gives it explicit IDs, done right)."""
    sent = [
        await ctx.step.run("invite", lambda r=r: work(f"invite {r}", f"invited {r}"))
        for r in RECIPIENTS
    ]
    await ctx.step.sleep("cooldown", "3d")
    return sent


@workflow("invites-wrong")
async def invites_wrong(ctx: Context) -> Any:
    """The same loop (the new code gives it explicit IDs without a patch: done wrong)."""
    sent = [
        await ctx.step.run("invite", lambda r=r: work(f"invite {r}", f"invited {r}"))
        for r in RECIPIENTS
    ]
    await ctx.step.sleep("cooldown", "3d")
    return sent


WORKFLOWS = [newsletter, profile, reminder, notify, digest, invites, invites_wrong]
app = PushApp(WORKFLOWS)
