"""Fan-out past DynamoDB's 100 items a transaction: a gather of parallel steps and one of 200
child runs complete, on moto and on DynamoDB Local. A suspend used to write all its new waits
in one transaction, refused past 100 items: the run stayed `running` for ever with no step.
Now the suspend commits alone and the outbox makes what it starts (service/launches).

The gather is 1,000 wide on DynamoDB Local (about 85 s on the shared 2-core machine: 13
engine requests and an SDK replay a branch) and 150 on moto, where each request costs about
9 ms in process and 1,000 would take minutes; 1,000 on moto runs end to end on the local
runtime in `python -m bench --fanouts 10,100,1000`, and launches at the handler level in
tests/api/test_launches.py. `EZGH_FANOUT_WIDTH` sets one width for both.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from ezgh_workflows import Context, workflow
from sdk_engine import Engine, make_app, run_to_end

WIDTHS = {"moto": 150, "ddblocal": 1000}
CHILDREN = 200


def test_a_gather_wider_than_a_transaction_completes(engine: Engine) -> None:
    wide_as = int(os.environ.get("EZGH_FANOUT_WIDTH", WIDTHS[engine.plant.backend]))
    ran: list[int] = []

    @workflow("wide")
    async def wide(ctx: Context) -> Any:
        outs = await asyncio.gather(
            *(ctx.step.run(f"p{i}", lambda i=i: ran.append(i) or i) for i in range(wide_as))
        )
        return sum(outs)

    outcome, mains = run_to_end(make_app(engine, wide), engine, "wide", limit=wide_as)
    assert outcome["output"] == sum(range(wide_as))
    assert sorted(ran) == list(range(wide_as))  # each step's body ran once
    steps = engine.steps
    assert len(steps) == wide_as and all(s["status"] == "completed" for s in steps.values())
    # Each branch invocation replays from the history before the gather (empty here) and
    # its own step, not from its siblings: its request does not grow with the gather.
    branches = [d.request for d in engine.deliveries if "branch" in d.request]
    assert len(branches) == wide_as
    assert max(len(r["steps"]) for r in branches) == 1
    assert max(len(json.dumps(r)) for r in branches) < 4_000
    assert mains <= 3  # the suspend, and the run woken once its branches ended (or twice)


def test_a_gather_of_two_hundred_child_runs_completes(engine: Engine) -> None:
    @workflow("child")
    async def child(ctx: Context) -> Any:
        return await ctx.step.run("double", lambda: ctx.input * 2)

    @workflow("parent")
    async def parent(ctx: Context) -> Any:
        outs = await asyncio.gather(
            *(ctx.step.invoke(f"c{i}", workflow="child", input=i) for i in range(CHILDREN))
        )
        return sum(outs)

    app = make_app(engine, parent, child)
    outcome, _ = run_to_end(app, engine, "parent", limit=CHILDREN * 4)
    assert outcome["output"] == 2 * sum(range(CHILDREN))
    steps = engine.steps
    assert len(steps) == CHILDREN
    children = {s["childRunId"] for s in steps.values()}
    assert len(children) == CHILDREN and all(engine.ended(c) for c in children)
