"""A pull app's parallel step is a branch task: queued by its `branch` message under the
step's own lease, claimed once however often SQS delivers it, kept by heartbeats on the
step (never the run), answered once, and delivered again when its worker dies.

Before, the `branch` message pushed the step's invocation to the app's URL: a pull app has
none, so the step failed to reach its app and the gather never completed."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, task_queues
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.errors import StaleInvocation, Unauthorized
from ezgh_engine.service import branches, pull, steps

from tests.api.conftest import Project
from tests.api.test_branch_outcomes import STEP, _branch_step


def _pull_run(project: Project) -> tuple[str, str]:
    """A pull app (its slug) and a run of it with one parallel step waiting for its branch."""
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    workers = {"workerId": "w", "workflows": ["a"], "protocol": "1.5"}
    assert project.call("POST", f"/apps/{app['id']}/workers", body=workers).status == 200
    run = project.call("POST", "/runs", body={"appId": app["id"], "workflow": "a"}).body
    _branch_step(run["id"])
    return app["slug"], run["id"]


def _step(run_id: str) -> dict[str, Any]:
    return ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}


def _run_lease(run_id: str) -> int:
    return int((ws.get(items.run_pk(run_id), "RUN") or {}).get("leaseUntil", 0))


def _poll(project: Project, slug: str) -> Any:
    answer = project.call("POST", f"/apps/{slug}/tasks/poll", body={"waitSeconds": 0})
    return answer.body if answer.status == 200 else None


def _queued(slug_or_id: str, project: Project) -> list[dict[str, Any]]:
    """Every task in the app's queue, received (and left invisible)."""
    app = project.call("GET", f"/apps/{slug_or_id}").body
    url = task_queues.ensure_queue(app["id"])
    got = aws.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in got.get("Messages", [])]


def _ran(token: str, attempt: int = 1) -> None:
    """The worker's step calls: start the step and complete it."""
    ops = [{"op": "start", "stepId": STEP, "name": "fan-0", "attempt": attempt}]
    assert steps.apply_ops(token, {"ops": ops})["results"][0]["result"] == "started"
    ops = [{"op": "complete", "stepId": STEP, "output": "done"}]
    assert steps.apply_ops(token, {"ops": ops})["results"][0]["result"] == "ok"


def _answer(task: dict[str, Any]) -> dict[str, Any]:
    outcome = {"protocol": "1.5", "deploymentId": None, "outcome": "branch", "stepId": STEP}
    return {**outcome, "taskId": task["taskId"]}


def test_a_branch_task_goes_to_the_queue_and_its_message_watches_it(project: Project) -> None:
    slug, run_id = _pull_run(project)
    run_lease = _run_lease(run_id)
    retry = branches.invoke_branch(run_id, STEP)
    assert retry is not None and retry.after_seconds == pull.pull_lease_seconds() + 1
    step = _step(run_id)
    # The lease take started it and the dispatch gave the attempt back: the worker's own
    # `start` counts it (a pull task stays on the shape with `start`).
    assert step["status"] == "running" and int(step["branchEpoch"]) == 1
    assert int(step["attempt"]) == 0 and int(step["startEpoch"]) == -1
    lease_end = clock.now_ms() + pull.pull_lease_seconds() * 1000
    assert int(step["branchLeaseUntil"]) <= lease_end  # the pull lease, not the invoke timeout
    task = _poll(project, slug)
    assert task is not None and task["branch"] == {"stepId": STEP}
    assert task["api"]["url"] == pull.settings().api_url  # heartbeats and outcome go there
    assert "answerWithinSeconds" not in task
    # The message comes back while the lease is held: it looks again later, no new task.
    again = branches.invoke_branch(run_id, STEP)
    assert again is not None and _poll(project, slug) is None
    assert _run_lease(run_id) == run_lease  # the run's lease is not the branch's


def test_a_branch_task_delivered_twice_runs_once_and_its_answer_applies_once(
    project: Project,
) -> None:
    slug, run_id = _pull_run(project)
    branches.invoke_branch(run_id, STEP)
    [task] = _queued(slug, project)
    url = task_queues.ensure_queue(project.call("GET", f"/apps/{slug}").body["id"])
    sqs = aws.client("sqs")
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(task))  # SQS's second copy
    token = task["api"]["token"]
    claim = {"taskId": task["taskId"], "claim": "worker-1/x"}
    assert pull.heartbeat(token, claim)["leaseSeconds"] > 0
    with pytest.raises(StaleInvocation):  # another receipt of the same task
        pull.heartbeat(token, {**claim, "claim": "worker-2/y"})
    assert _step(run_id)["tc"] == "1/worker-1/x"  # on the step, never on the run
    assert "tc" not in (ws.get(items.run_pk(run_id), "RUN") or {})
    _ran(token)
    assert pull.post_outcome(token, _answer(task)) == {"result": "ok"}
    with pytest.raises(StaleInvocation):  # the same outcome again
        pull.post_outcome(token, _answer(task))
    step = _step(run_id)
    assert step["status"] == "completed" and int(step["branchLeaseUntil"]) == 0
    with pytest.raises(StaleInvocation):  # the task is answered: no heartbeat holds it
        pull.heartbeat(token, {"taskId": task["taskId"]})
    assert branches.invoke_branch(run_id, STEP) is None  # the watch finds the step ended
    with pytest.raises(Unauthorized):  # a branch task's ID is not the run's main task's
        pull.heartbeat(
            token, {"taskId": pull.mint_task_id(pull.TaskClaims(run_id, 1, 1, "i", "t"))}
        )


def test_heartbeats_extend_the_steps_lease_and_the_watch_follows(
    project: Project, skip_clock: clock.SkipClock
) -> None:
    slug, run_id = _pull_run(project)
    branches.invoke_branch(run_id, STEP)
    task = _poll(project, slug)
    token, beat = task["api"]["token"], {"taskId": task["taskId"]}
    run_lease = _run_lease(run_id)
    for _ in range(3):  # a long step: three leases long, heartbeating
        skip_clock.advance(timedelta(seconds=pull.pull_lease_seconds() * 0.9))
        before = int(_step(run_id)["branchLeaseUntil"])
        pull.heartbeat(token, beat)
        assert int(_step(run_id)["branchLeaseUntil"]) > before
        retry = branches.invoke_branch(run_id, STEP)  # the watch: still held, look later
        assert retry is not None and retry.after_seconds > 1
    assert int(_step(run_id)["branchEpoch"]) == 1 and _run_lease(run_id) == run_lease
    _ran(token)
    assert pull.post_outcome(token, _answer(task)) == {"result": "ok"}
    assert _step(run_id)["status"] == "completed"


def test_a_worker_that_dies_mid_branch_loses_its_task_to_the_next(
    project: Project, skip_clock: clock.SkipClock
) -> None:
    slug, run_id = _pull_run(project)
    branches.invoke_branch(run_id, STEP)
    dead = _poll(project, slug)
    ops = [{"op": "start", "stepId": STEP, "name": "fan-0", "attempt": 1}]
    assert steps.apply_ops(dead["api"]["token"], {"ops": ops})["results"][0]["result"] == "started"
    skip_clock.advance(timedelta(seconds=pull.pull_lease_seconds() + 1))  # no heartbeat came
    assert branches.invoke_branch(run_id, STEP) is not None  # delivered again
    step = _step(run_id)
    assert int(step["branchEpoch"]) == 2 and int(step["branchFailures"]) == 1
    rescuer = _poll(project, slug)
    assert rescuer is not None and rescuer["taskId"] != dead["taskId"]
    # The dead worker's late calls change nothing.
    late = [{"op": "complete", "stepId": STEP, "output": "late"}]
    with pytest.raises(StaleInvocation):
        steps.apply_ops(dead["api"]["token"], {"ops": late})
    with pytest.raises(StaleInvocation):
        pull.heartbeat(dead["api"]["token"], {"taskId": dead["taskId"]})
    with pytest.raises(StaleInvocation):
        pull.post_outcome(dead["api"]["token"], _answer(dead))
    token = rescuer["api"]["token"]
    _ran(token, attempt=2)
    assert pull.post_outcome(token, _answer(rescuer)) == {"result": "ok"}
    step = _step(run_id)
    assert step["status"] == "completed" and json.loads(step["output"]) == "done"
    assert int(step["attempt"]) == 2


def test_a_task_no_worker_took_counts_no_failure(
    project: Project, skip_clock: clock.SkipClock
) -> None:
    """A pull app's tasks wait for its workers: an unclaimed task's lease ending sends a
    new one (the old one is dropped when polled), and the step is not failed for it."""
    slug, run_id = _pull_run(project)
    for _ in range(pull.settings().invoke_max_attempts + 2):
        assert branches.invoke_branch(run_id, STEP) is not None
        skip_clock.advance(timedelta(seconds=pull.pull_lease_seconds() + 1))
    step = _step(run_id)
    assert step["status"] == "running" and int(step.get("branchFailures", 0)) == 0
    assert int(step["attempt"]) == 0  # no task a worker never took used up an attempt
    branches.invoke_branch(run_id, STEP)
    task = None
    while task is None:  # the stale copies are dropped; the live one is handed out
        answer = project.call("POST", f"/apps/{slug}/tasks/poll", body={"waitSeconds": 0})
        assert answer.status in (200, 204)
        task = answer.body if answer.status == 200 else None
    assert task["taskId"] and _step(run_id)["tc"].startswith(f"{_step(run_id)['branchEpoch']}/key/")


@pytest.fixture()
def three_attempts(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(config.ENV_INVOKE_ATTEMPTS, "3")
    config.reset_settings()
    yield
    monkeypatch.undo()
    config.reset_settings()


def test_workers_that_keep_dying_fail_the_step_after_the_delivery_budget(
    project: Project, skip_clock: clock.SkipClock, three_attempts: None
) -> None:
    slug, run_id = _pull_run(project)
    for _ in range(3):
        assert branches.invoke_branch(run_id, STEP) is not None
        assert _poll(project, slug) is not None  # claimed, then its worker dies
        skip_clock.advance(timedelta(seconds=pull.pull_lease_seconds() + 1))
    assert branches.invoke_branch(run_id, STEP) is None
    step = _step(run_id)
    assert step["status"] == "failed" and step["error"]["code"] == "workflows.app_unreachable"
    assert "3 times" in step["error"]["message"]
