"""A pull task that SQS delivers twice runs on one worker only (at most one live invocation
per run).

SQS standard queues deliver a message at least once: the same task may reach two workers
(or one worker twice) before either deletes it. Both copies carry the same epoch, so the
lease alone let both run: `poll` handed out each copy, and a directly received task's first
heartbeat (its claim) answered 200 to every worker, so two workers ran the invocation side
by side, each step's body twice. Now the first claim of a task marks the run item with the
claim, conditionally, and another claim of the same task is refused (204 from `poll`, 409
from the heartbeat); the same claim sent again (a retry whose answer was lost) still holds.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws, task_queues
from ezgh_engine.errors import StaleInvocation, ValidationError
from ezgh_engine.service import invoker, pull

from tests.api.conftest import Project


def _dispatched(project: Project) -> tuple[str, str, dict[str, Any]]:
    """A pull app's run, invoked: its task in the app's queue, received once (the body)
    and visible again with a second copy beside it, as SQS may deliver it twice."""
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    workers = {"workerId": "w", "workflows": ["a"]}
    assert project.call("POST", f"/apps/{app['id']}/workers", body=workers).status == 200
    run = project.call("POST", "/runs", body={"appId": app["id"], "workflow": "a"}).body
    assert invoker.invoke(run["id"], 1) is None  # the task is queued
    url = task_queues.ensure_queue(app["id"])
    sqs = aws.client("sqs")
    [message] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    sqs.send_message(QueueUrl=url, MessageBody=message["Body"])
    return app["slug"], run["id"], json.loads(message["Body"])


def test_a_task_delivered_twice_is_handed_out_by_poll_once(project: Project) -> None:
    slug, _, _ = _dispatched(project)
    poll = {"waitSeconds": 0}
    first = project.call("POST", f"/apps/{slug}/tasks/poll", body=poll)
    assert first.status == 200, first.body
    second = project.call("POST", f"/apps/{slug}/tasks/poll", body=poll)
    assert second.status == 204, second.body  # the copy was dropped, not handed out
    renewed = pull.heartbeat(first.body["api"]["token"], {"taskId": first.body["taskId"]})
    assert renewed["leaseSeconds"] > 0  # the worker that has it keeps it


def test_a_directly_received_task_is_claimed_by_one_worker(project: Project) -> None:
    _, _, task = _dispatched(project)
    token, body = task["api"]["token"], {"taskId": task["taskId"]}
    assert pull.heartbeat(token, {**body, "claim": "worker-1/x"})["leaseSeconds"] > 0
    assert pull.heartbeat(token, {**body, "claim": "worker-1/x"})["leaseSeconds"] > 0  # resent
    with pytest.raises(StaleInvocation):
        pull.heartbeat(token, {**body, "claim": "worker-2/y"})
    assert pull.heartbeat(token, body)["leaseSeconds"] > 0  # the claimant's heartbeats go on
    with pytest.raises(ValidationError):
        pull.heartbeat(token, {**body, "claim": 7})


def test_a_new_invocations_task_is_claimed_afresh(
    project: Project, skip_clock: clock.SkipClock
) -> None:
    """The claim is per task: once the claimant's lease ran out, the next epoch's task is
    handed out (the two copies of the old one are dropped as superseded)."""
    slug, run_id, task = _dispatched(project)
    claim = {"taskId": task["taskId"], "claim": "worker-1/x"}
    assert pull.heartbeat(task["api"]["token"], claim)["leaseSeconds"] > 0
    skip_clock.advance(timedelta(seconds=pull.pull_lease_seconds() + 1))
    assert invoker.invoke(run_id, 1) is None  # the worker died: its task goes out again
    polls = [project.call("POST", f"/apps/{slug}/tasks/poll", body={"waitSeconds": 0})]
    while polls[-1].status == 204 and len(polls) < 4:  # one message a poll without waiting
        polls.append(project.call("POST", f"/apps/{slug}/tasks/poll", body={"waitSeconds": 0}))
    assert polls[-1].status == 200, [p.status for p in polls]
    assert polls[-1].body["taskId"] != task["taskId"]
