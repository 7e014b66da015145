"""The workflows the bench runs, and the app's own timestamps of each step it ran."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import Any

from ezgh_workflows import Context, PushApp, workflow

# run id -> perf_counter() at each first execution of a step body (replays do not run them).
STAMPS: dict[str, list[float]] = defaultdict(list)
_lock = threading.Lock()


def _stamp(run_id: str, i: int) -> dict[str, int]:
    with _lock:
        STAMPS[run_id].append(time.perf_counter())
    return {"i": i}


@workflow("bench")
async def bench(ctx: Context) -> Any:
    """`n` sequential run steps; one sleep of `sleep` before step `sleepAfter` (default n//2;
    `sleepAfter` = n puts it after the last); no sleep when `sleep` is absent. Each step
    body takes `stepMs` milliseconds (0 by default), waiting as an app's step would."""
    n = int(ctx.input["n"])
    step_seconds = float(ctx.input.get("stepMs", 0)) / 1000
    sleep = ctx.input.get("sleep")
    sleep_after = int(ctx.input.get("sleepAfter", n // 2))
    done = 0
    for i in range(n):
        if sleep and i == sleep_after:
            await ctx.step.sleep("pause", sleep)
        out = await ctx.step.run("s", _body(ctx.run_id, i, step_seconds))
        done += 1 if out["i"] == i else 0
    if sleep and sleep_after >= n:
        await ctx.step.sleep("pause", sleep)
    return {"steps": done}


def _body(run_id: str, i: int, seconds: float) -> Any:
    async def body() -> dict[str, int]:
        if seconds:
            await asyncio.sleep(seconds)
        return _stamp(run_id, i)

    return body


@workflow("fan")
async def fan(ctx: Context) -> Any:
    """`n` parallel run steps awaited together (one gather): each runs in a branch
    invocation of its own (docs/protocol.md, "Parallel steps")."""
    n = int(ctx.input["n"])
    outs = await asyncio.gather(*(ctx.step.run(f"b{i}", lambda i=i: i) for i in range(n)))
    return {"steps": sum(1 for i, out in enumerate(outs) if out == i)}


@workflow("history")
async def history(ctx: Context) -> Any:
    """A long history without running it: a sleep (`seed`) during which the bench writes
    `n` completed `s` steps into the run (`Engine.run_seeded`), the `n` steps (replayed,
    never run: they are recorded), a sleep (`pause`), one more step. What the invocation
    after `pause` costs is the cost of an invocation with `n` steps recorded before it."""
    n = int(ctx.input["n"])
    await ctx.step.sleep("seed", "1h")
    done = 0
    for i in range(n):
        out = await ctx.step.run("s", _body(ctx.run_id, i, 0))
        done += 1 if out["i"] == i else 0
    await ctx.step.sleep("pause", "1h")
    out = await ctx.step.run("s", _body(ctx.run_id, n, 0))
    done += 1 if out["i"] == n else 0
    return {"steps": done}


app = PushApp([bench, fan, history])
