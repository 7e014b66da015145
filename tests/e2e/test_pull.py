"""Pull apps end to end: workers announce, long-poll tasks, run them with the replay driver,
heartbeat, and a crashed worker's task goes to another worker when its lease ends."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import ApiError, Context, Worker, WorkflowsClient, workflow

from tests.e2e.pull_workers import PullWorkers

# Pull workers work, sleep and heartbeat their leases in real time: no idle skipping.
pytestmark = [pytest.mark.e2e, pytest.mark.real_time]

CALLS: Counter[str] = Counter()
GATE = threading.Event()


def _slow_step() -> str:
    CALLS["slow"] += 1
    if CALLS["slow"] == 1:
        GATE.wait(60)  # the first worker "dies" here
    return "done"


@workflow("crashy")
async def crashy(ctx: Context) -> Any:
    first = await ctx.step.run("first", lambda: CALLS.update(["first"]) or "one")
    slow = await ctx.step.run("slow", _slow_step)
    return [first, slow]


@workflow("long-step")
def long_step(ctx: Context) -> Any:
    def work() -> int:
        CALLS["long"] += 1
        time.sleep(float(ctx.input.get("seconds", 3)))
        return CALLS["long"]

    return ctx.step.run("work", work)


@workflow("quick")
async def quick(ctx: Context) -> Any:
    def work() -> int:
        time.sleep(0.3)
        return int(ctx.input["n"]) * 2

    return await ctx.step.run("double", work)


CHUNK = 1024 * 1024 - 2  # a string of 1 MiB encoded: the largest step result the docs allow


@workflow("eight-mib")
async def eight_mib(ctx: Context) -> Any:
    """Eight steps of 1 MiB, each followed by a sleep: each task after the first replays the
    values recorded before it (the last one all eight)."""
    values = []
    for i in range(int(ctx.input.get("steps", 8))):
        size = int(ctx.input.get("size", CHUNK))
        values.append(await ctx.step.run(f"chunk-{i}", lambda i=i, n=size: chr(97 + i) * n))
        await ctx.step.sleep(f"pause-{i}", 1)
    return [[value[0], len(value)] for value in values]


WORKFLOWS = [crashy, long_step, quick, eight_mib]


class DeadWorker(Worker):
    """Simulates a crash mid-step: no heartbeats, no outcome."""

    def _heartbeat(self, task: dict[str, Any], done: threading.Event) -> None:
        return

    def _post_outcome(self, task: dict[str, Any], outcome: dict[str, Any]) -> None:
        return


class CountingWorker(Worker):
    ran: Counter[str] = Counter()

    def _execute(self, task: dict[str, Any]) -> dict[str, Any] | None:
        CountingWorker.ran[self.worker_id] += 1
        return super()._execute(task)


@pytest.fixture()
def pull(engine: LocalRuntime, client: WorkflowsClient, monkeypatch) -> Iterator[PullWorkers]:
    CALLS.clear()
    GATE.clear()
    CountingWorker.ran.clear()
    monkeypatch.setenv("EZGH_PULL_LEASE_SECONDS", "2")
    app = client.create_app("pulled", "pull")
    workers = PullWorkers(engine, client, app["id"], WORKFLOWS)
    yield workers
    GATE.set()
    workers.stop()


def test_announce_syncs_the_app_and_poll_answers_204(engine, client, pull):
    assert client.get_app(pull.app_id)["status"] == "pending"
    with pytest.raises(ApiError) as err:
        client.start_run(pull.app_id, "quick", {"n": 1})
    assert err.value.code == "app_not_synced"
    app = client.request(
        "POST",
        f"/apps/{pull.app_id}/workers",
        json={"workerId": "w1", "workflows": ["quick", "crashy"]},
    )
    assert app["status"] == "synced" and app["workflows"] == ["quick", "crashy"]
    t0 = time.monotonic()
    answer = client._http.post(
        f"{engine.api_prefix}/apps/{pull.app_id}/tasks/poll",
        json={"waitSeconds": 1},
        headers={"Authorization": f"Bearer {engine.api_key}"},
    )
    assert answer.status_code == 204 and time.monotonic() - t0 >= 0.9


def test_a_worker_runs_runs_with_replay(engine, client, pull):
    pull.worker()
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    run = client.start_run(pull.app_id, "quick", {"n": 21})
    done = client.wait_for_run(run["id"], timeout=30, interval=0.1)
    assert done["status"] == "completed" and done["output"] == 42
    assert [s["name"] for s in done["steps"]] == ["double"]


def test_a_crashed_workers_task_is_finished_by_another_worker(engine, client, pull):
    doomed = pull.worker(DeadWorker, worker_id="doomed")
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    run = client.start_run(pull.app_id, "crashy", {})
    engine.wait_for(lambda: CALLS["slow"] == 1, timeout=20)
    doomed.stop()  # a crashed process polls no more (else it could take the task again)
    mid = client.get_run(run["id"])
    assert [(s["name"], s["status"]) for s in mid["steps"]] == [
        ("first", "completed"),
        ("slow", "running"),
    ]
    # The worker is gone (no heartbeat, no outcome). Skip past its lease.
    engine.clock.advance(timedelta(seconds=3))
    pull.worker(worker_id="rescuer")
    done = client.wait_for_run(run["id"], timeout=60, interval=0.1)
    assert done["status"] == "completed", done
    assert done["output"] == ["one", "done"]
    assert CALLS["first"] == 1  # recorded: not run again
    assert CALLS["slow"] == 2  # the dead worker's attempt, then the rescuer's
    slow = next(s for s in done["steps"] if s["name"] == "slow")
    assert slow["attempt"] == 2
    # The dead worker wakes up: its late step call is refused; the run stays as it was.
    GATE.set()
    time.sleep(1.0)  # (workers' long polls keep the engine busy: no wait_idle here)
    assert client.get_run(run["id"])["output"] == ["one", "done"]


def test_a_live_worker_keeps_its_task_past_the_lease(engine, client, pull):
    pull.worker(worker_id="steady")
    pull.worker(worker_id="other")
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    run = client.start_run(pull.app_id, "long-step", {"seconds": 5})  # lease is 2 s
    done = client.wait_for_run(run["id"], timeout=40, interval=0.1)
    assert done["status"] == "completed"
    assert CALLS["long"] == 1 and done["output"] == 1


def test_several_workers_share_the_load(engine, client, pull, monkeypatch):
    # A lease that ran out hands its task to another worker (right, and tested below): not
    # what this test counts, so no lease may run out however loaded the machine is.
    monkeypatch.setenv("EZGH_PULL_LEASE_SECONDS", "60")
    workers = [pull.worker(CountingWorker, worker_id=f"w{i}", concurrency=1) for i in range(3)]
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    runs = [client.start_run(pull.app_id, "quick", {"n": n}) for n in range(9)]
    for n, run in enumerate(runs):
        done = client.wait_for_run(run["id"], timeout=40, interval=0.1)
        assert done["status"] == "completed" and done["output"] == n * 2
    assert sum(CountingWorker.ran.values()) == 9
    assert len([w for w in workers if CountingWorker.ran[w.worker_id]]) >= 2


class TracingWorker(Worker):
    """Counts how it waited for tasks: on the queue directly, or on `tasks/poll`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ways: Counter[str] = Counter()

    def _receive(self, queue: Any) -> dict[str, Any] | None:
        self.ways["direct"] += 1
        return super()._receive(queue)

    def _poll_api(self) -> dict[str, Any] | None:
        self.ways["api"] += 1
        return super()._poll_api()

    def _execute(self, task: dict[str, Any]) -> dict[str, Any] | None:
        CountingWorker.ran[self.worker_id] += 1
        return super()._execute(task)


def test_an_idle_worker_long_polls_its_queue_not_the_api(engine, client, pull):
    """An idle worker waits on SQS with the engine's vended credentials, and the
    task it receives there runs as one from `tasks/poll` would."""
    worker = pull.worker(TracingWorker, worker_id="direct")
    engine.wait_for(lambda: worker.ways["direct"] >= 2, timeout=20)  # two idle long polls
    run = client.start_run(pull.app_id, "quick", {"n": 4})
    done = client.wait_for_run(run["id"], timeout=30, interval=0.1)
    assert done["status"] == "completed" and done["output"] == 8
    assert worker.ways["api"] == 0 and worker.direct_queue


def test_a_worker_on_the_api_poll_still_runs_tasks(engine, client, pull):
    """The pull API of before (`tasks/poll`) is unchanged for workers that use it."""
    worker = pull.worker(TracingWorker, worker_id="legacy", direct_queue=False)
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    run = client.start_run(pull.app_id, "quick", {"n": 5})
    done = client.wait_for_run(run["id"], timeout=30, interval=0.1)
    assert done["status"] == "completed" and done["output"] == 10
    assert worker.ways["direct"] == 0 and worker.ways["api"] >= 1


def test_a_superseded_task_received_directly_is_dropped_by_its_claim(engine, client, pull):
    """A task whose lease ran out before any worker came is delivered again (epoch + 1);
    the first message is still in the queue. The direct path receives both: the stale
    one's claim (a first heartbeat) is refused, so the run's body runs once."""
    from ezgh_engine.adapters import aws, task_queues

    client.request(
        "POST", f"/apps/{pull.app_id}/workers", json={"workerId": "w0", "workflows": ["quick"]}
    )
    sqs = aws.client("sqs")
    url = sqs.get_queue_url(QueueName=task_queues.queue_name(pull.app_id))["QueueUrl"]

    def queued() -> int:
        attrs = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])

    run = client.start_run(pull.app_id, "quick", {"n": 6})
    engine.wait_for(lambda: queued() == 1, timeout=20)
    engine.clock.advance(timedelta(seconds=5))  # past the 2 s lease: the watch re-leases
    engine.wait_for(lambda: queued() == 2, timeout=30)
    worker = pull.worker(TracingWorker, worker_id="late", concurrency=1)
    done = client.wait_for_run(run["id"], timeout=30, interval=0.1)
    assert done["status"] == "completed" and done["output"] == 12
    engine.wait_for(lambda: queued() == 0 and worker.ways["direct"] >= 3, timeout=20)
    assert CountingWorker.ran["late"] == 1 and worker.ways["api"] == 0


@pytest.fixture()
def task_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every task a worker receives from its queue (as SQS counts it)."""
    from ezgh_workflows._internal import task_queue

    sizes: list[int] = []
    receive = task_queue.TaskQueue.receive

    def noted(self: Any, wait_seconds: int) -> tuple[str, str] | None:
        got = receive(self, wait_seconds)
        if got is not None:
            sizes.append(len(got[0].encode()))
        return got

    monkeypatch.setattr(task_queue.TaskQueue, "receive", noted)
    return sizes


def test_eight_outputs_of_a_mib_complete_through_a_pull_worker(engine, client, pull, task_sizes):
    """Protocol 1.5: each task is one SQS message within its 256 KiB, however large the
    history (the values recorded before travel as references the worker reads)."""
    pull.worker(worker_id="big")
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    run = client.start_run(pull.app_id, "eight-mib", {})
    done = client.wait_for_run(run["id"], timeout=120, interval=0.2)
    assert done["status"] == "completed", done
    assert done["output"] == [[chr(97 + i), CHUNK] for i in range(8)]
    assert len(task_sizes) >= 9 and max(task_sizes) <= 256 * 1024, task_sizes


class OldWorker(Worker):
    """A worker on an SDK before 1.5: its announce says no protocol."""

    def _announce(self) -> None:
        self.app = self._api.request(
            "POST",
            f"/apps/{self.app_id}/workers",
            json={"workerId": self.worker_id, "workflows": list(self._workflows)},
        )


def test_a_task_too_large_for_an_old_worker_fails_the_run_clearly(engine, client, pull):
    """A worker that did not say 1.5 gets every value inline, as before; a task past SQS's
    message size cannot be sent, and the run fails saying so at once."""
    pull.worker(OldWorker, worker_id="old")
    engine.wait_for(lambda: client.get_app(pull.app_id)["status"] == "synced", timeout=10)
    run = client.start_run(pull.app_id, "eight-mib", {"steps": 1, "size": 300_000})
    done = client.wait_for_run(run["id"], timeout=60, interval=0.2)
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "workflows.request_too_large"
    assert [s["status"] for s in done["steps"]] == ["completed", "completed"]
