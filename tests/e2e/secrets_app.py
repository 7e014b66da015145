"""A push app for tests/e2e/test_dev_secrets.py: a run that waits on a callback and shows its
URL as a step's output (so a test in another process can post to it)."""

from __future__ import annotations

from typing import Any

from ezgh_workflows import Context, PushApp, workflow


@workflow("approval")
async def approval(ctx: Context) -> Any:
    callback = await ctx.step.create_callback("approve")
    await ctx.step.run("publish", lambda: callback.url)
    body = await callback.wait()
    done = await ctx.step.run("record", lambda: {"approved": body})
    return done


app = PushApp([approval])
