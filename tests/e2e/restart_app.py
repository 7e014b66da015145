"""The push app `tests/e2e/test_dev_restart.py` serves in an `ezgh dev` subprocess.

It lives in that process, so what a test must read (a callback's URL, which step bodies
ran) goes to a file named by the run's input.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from ezgh_workflows import Context, PushApp, workflow


@workflow("nap")
async def nap(ctx: Context) -> Any:
    # Over the 64 KiB kept inline: stored as a payload (S3), which each later invocation
    # reads, so the restarts must keep it (and its key, `steps/before%231/...`).
    before = await ctx.step.run("before", lambda: "awake" * 14_000)
    await ctx.step.sleep("nap", ctx.input.get("for", "3d"))
    return await ctx.step.run("after", lambda: "rested" if len(before) == 70_000 else "lost")


@workflow("callback")
async def callback(ctx: Context) -> Any:
    cb = await ctx.step.create_callback("approve")
    await ctx.step.run("publish", lambda: Path(ctx.input["file"]).write_text(cb.url) and cb.url)
    return {"body": await cb.wait()}


@workflow("message")
async def message(ctx: Context) -> Any:
    got = await ctx.step.wait_for_message(
        "paid", queue_id=ctx.input["queue"], key=ctx.input["key"], timeout_seconds=86_400
    )
    return {"message": got}


def _note(log: Path, line: str) -> str:
    with log.open("a") as file:
        file.write(line + "\n")
    return line


def _block_until(log: Path, gate: Path) -> str:
    """Note the body's start, then block (in the SDK's worker thread) until `gate` exists:
    the first process is killed in here; after the restart the gate is open."""
    _note(log, "block")
    while not gate.exists():
        time.sleep(0.02)  # the app's own wait, not the test's synchronization
    return "unblocked"


@workflow("hold")
async def hold(ctx: Context) -> Any:
    log, gate = Path(ctx.input["log"]), Path(ctx.input["gate"])
    await ctx.step.run("once", lambda: _note(log, "once"))
    return await ctx.step.run("block", lambda: _block_until(log, gate))


@workflow("hold-branches")
async def hold_branches(ctx: Context) -> Any:
    """`hold`, with the blocked step in a branch invocation of its own (steps awaited
    together each run in one)."""
    log, gate = Path(ctx.input["log"]), Path(ctx.input["gate"])
    _once, blocked = await asyncio.gather(
        ctx.step.run("once", lambda: _note(log, "once")),
        ctx.step.run("block", lambda: _block_until(log, gate)),
    )
    return blocked


restarts = PushApp([nap, callback, message, hold, hold_branches])
