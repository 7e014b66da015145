"""Parallel steps of a pull app end to end: each step of a gather runs as a branch task that
a worker polls, heartbeats and answers, as a push app's runs in a branch invocation."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import Context, Worker, WorkflowsClient, workflow

from tests.e2e.pull_workers import PullWorkers

# Pull workers poll, run and heartbeat in real time: no idle skipping.
pytestmark = [pytest.mark.e2e, pytest.mark.real_time]

# The pull lease of the tests that need none to run out by itself (the fixture's is 2 s).
SAFE_LEASE_SECONDS = 15
CALLS: Counter[str] = Counter()
GATE = threading.Event()


@workflow("fan")
async def fan(ctx: Context) -> Any:
    width = int(ctx.input["width"])
    first = await ctx.step.run("first", lambda: "one")

    def part(i: int) -> int:
        CALLS[f"part-{i}"] += 1
        return i * i

    parts = await asyncio.gather(
        *(ctx.step.run(f"part-{i}", lambda i=i: part(i)) for i in range(width))
    )
    return [first, sum(parts)]


def _stuck(i: int) -> int:
    CALLS[f"stuck-{i}"] += 1
    if i == 0 and CALLS["stuck-0"] == 1:
        GATE.wait(600)  # the first worker "dies" here (until the test wakes it)
    return i + 10


@workflow("fan-stuck")
async def fan_stuck(ctx: Context) -> Any:
    return await asyncio.gather(
        *(ctx.step.run(f"stuck-{i}", lambda i=i: _stuck(i)) for i in range(2))
    )


@workflow("fan-slow")
async def fan_slow(ctx: Context) -> Any:
    def slow(i: int) -> int:
        CALLS[f"slow-{i}"] += 1
        import time

        time.sleep(4)  # twice the lease: only heartbeats keep the branch task
        return i

    return await asyncio.gather(*(ctx.step.run(f"slow-{i}", lambda i=i: slow(i)) for i in range(2)))


WORKFLOWS = [fan, fan_stuck, fan_slow]


class DeadWorker(Worker):
    """Simulates a crash mid-branch: a branch task gets no heartbeat and no outcome (the run's
    main task, whose suspend launches the branches, is answered)."""

    def _heartbeat(self, task: dict[str, Any], done: threading.Event) -> None:
        if not task.get("branch"):
            super()._heartbeat(task, done)

    def _post_outcome(self, task: dict[str, Any], outcome: dict[str, Any]) -> None:
        if not task.get("branch"):
            super()._post_outcome(task, outcome)


@pytest.fixture()
def pull(engine: LocalRuntime, client: WorkflowsClient, monkeypatch) -> Iterator[PullWorkers]:
    CALLS.clear()
    GATE.clear()
    monkeypatch.setenv("EZGH_PULL_LEASE_SECONDS", "2")
    app = client.create_app("pulled-fan", "pull")
    workers = PullWorkers(engine, client, app["id"], WORKFLOWS)
    yield workers
    GATE.set()
    workers.stop()


@pytest.mark.parametrize("width", [3, 20])
def test_a_gather_runs_on_a_pull_worker(engine, client, pull, width, caplog, monkeypatch):
    # A lease no busy machine outlasts between heartbeats: each step runs once.
    monkeypatch.setenv("EZGH_PULL_LEASE_SECONDS", str(SAFE_LEASE_SECONDS))
    pull.worker(worker_id="w1", concurrency=8)
    pull.worker(worker_id="w2", concurrency=8, direct_queue=False)
    pull.synced()
    run = client.start_run(pull.app_id, "fan", {"width": width})
    done = client.wait_for_run(run["id"], timeout=180, interval=0.2)
    assert done["status"] == "completed", done
    assert done["output"] == ["one", sum(i * i for i in range(width))]
    assert all(CALLS[f"part-{i}"] == 1 for i in range(width)), CALLS
    parts = [s for s in done["steps"] if s["name"].startswith("part-")]
    assert len(parts) == width and all(s["status"] == "completed" for s in parts)
    assert "outcome refused" not in caplog.text  # every branch task's answer was taken


def test_a_worker_that_dies_mid_branch_hands_the_step_on(engine, client, pull, monkeypatch):
    # (The dead worker's step calls must come within its lease, however busy the machine.)
    monkeypatch.setenv("EZGH_PULL_LEASE_SECONDS", str(SAFE_LEASE_SECONDS))
    doomed = pull.worker(DeadWorker, worker_id="doomed", concurrency=4)
    pull.synced()
    run = client.start_run(pull.app_id, "fan-stuck", {})

    def statuses() -> dict[str, str]:
        return {s["name"]: s["status"] for s in client.get_run(run["id"])["steps"]}

    # stuck-1's end recorded (its step call, not just its body begun: a call still in flight
    # when the clock moves past its lease below is refused, and the step runs again), and
    # stuck-0 in its body, where its worker "dies".
    engine.wait_for(
        lambda: CALLS["stuck-0"] == 1 and statuses().get("stuck-1") == "completed", timeout=90
    )
    doomed.stop()  # a crashed process polls no more
    # The dead worker posted nothing: both branch leases end, and both tasks go out again.
    engine.clock.advance(timedelta(seconds=SAFE_LEASE_SECONDS + 2))
    pull.worker(worker_id="rescuer", concurrency=4)
    done = client.wait_for_run(run["id"], timeout=120, interval=0.2)
    assert done["status"] == "completed", done
    assert done["output"] == [10, 11]
    # stuck-1 ended by its step call (its outcome never came): it is not run again.
    assert CALLS["stuck-0"] == 2 and CALLS["stuck-1"] == 1
    stuck0 = next(s for s in done["steps"] if s["name"] == "stuck-0")
    assert stuck0["status"] == "completed" and stuck0["output"] == 10
    GATE.set()  # the dead worker wakes: its late step call is refused
    pull.join(doomed)  # its task ended: the late call was answered
    assert CALLS["stuck-0"] == 2
    assert client.get_run(run["id"])["output"] == [10, 11]


def test_heartbeats_keep_a_branch_task_past_its_lease(engine, client, pull):
    pull.worker(worker_id="steady", concurrency=4)
    pull.worker(worker_id="other", concurrency=4)
    pull.synced()
    run = client.start_run(pull.app_id, "fan-slow", {})
    done = client.wait_for_run(run["id"], timeout=60, interval=0.2)
    assert done["status"] == "completed", done
    assert done["output"] == [0, 1]
    assert CALLS["slow-0"] == 1 and CALLS["slow-1"] == 1
