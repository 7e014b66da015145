"""What the engine starts by itself acts for a key: a schedule's fire and a queue
subscription's delivery act for the key that created or last changed them, read again each
time, and start or deliver nothing once that key is revoked or may no longer do it
(docs/architecture.md, "API key permissions").

Fires go through `schedules.fire`, as the invoker hands it Scheduler's message; deliveries
through the deliver function's `deliver_record`, as SQS hands a message over.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import httpx
import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import (
    api_keys_store,
    aws,
    event_sources,
    push,
    queues_store,
    registry_store,
    task_queues,
)
from ezgh_engine.adapters import schedules_store as store
from ezgh_engine.core import messages as wire
from ezgh_engine.service import deliver, schedules

from tests.api.conftest import Project
from tests.api.test_app_scope import _record as resume_record
from tests.api.test_app_scope import _wait_for, step
from tests.api.test_run_scopes import pull_app, start

START, RESUME = "workflows.runs.start", "workflows.runs.resume"
SUBSCRIBE = "queues.subscriptions.create"


@pytest.fixture(autouse=True)
def _engine_around(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(
        config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
    )
    monkeypatch.setenv("EZGH_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    monkeypatch.setattr(deliver, "_backoff", lambda record, queue: None)  # no real receipt
    config.reset_settings()
    event_sources.LOCAL.clear()
    _forget()
    yield
    event_sources.LOCAL.clear()
    _forget()


def _forget() -> None:
    api_keys_store.forget_cached_keys()
    registry_store.forget_cached_apps()
    queues_store.forget_cached()


def _key(project: Project, *permissions: tuple[str, str]) -> dict[str, Any]:
    body = {"name": "k-" + ids.new_id()[:8],
            "permissions": [{"action": a, "resource": r} for a, r in permissions]}  # fmt: skip
    made = project.call("POST", "/apiKeys", body=body)
    assert made.status == 201, made.body
    return dict(made.body)


def _revoke(project: Project, key: dict[str, Any]) -> None:
    assert project.call("DELETE", f"/apiKeys/{key['id']}").status == 204


# --- schedules -----------------------------------------------------------------------------


def _schedule(project: Project, key: dict[str, Any], app: dict[str, Any]) -> dict[str, Any]:
    made = project.call("POST", "/schedules", key=key["key"], body={
        "appId": app["id"], "workflow": "nightly", "cron": "*/15 * * * *"})  # fmt: skip
    assert made.status == 201, made.body
    return dict(made.body)


def _fire(schedule: dict[str, Any], at: str) -> str | None:
    return schedules.fire(wire.Cron(schedule["id"], at))


def _runs_of(project: Project, schedule: dict[str, Any]) -> list[str]:
    runs = project.call("GET", "/runs").body["runs"]
    return sorted(r["id"] for r in runs if r.get("scheduleId") == schedule["id"])


def test_a_schedule_starts_runs_for_its_creator_and_none_once_it_is_revoked(
    project: Project,
) -> None:
    app = pull_app(project, "jobs", ["nightly"])
    creator = _key(project, (START, "jobs/nightly"))
    s = _schedule(project, creator, app)
    assert s["keyId"] == creator["id"] and s["lastError"] is None
    first = _fire(s, "2026-01-05T10:15:00Z")
    assert first is not None and _runs_of(project, s) == [first]
    _revoke(project, creator)
    assert _fire(s, "2026-01-05T10:30:00Z") is None
    assert _runs_of(project, s) == [first]
    shown = project.call("GET", f"/schedules/{s['id']}").body
    assert shown["lastError"]["message"] == (
        f"Run not started: 403 forbidden: the API key {creator['id']} schedule {s['id']} "
        "acts for is revoked"
    )
    assert shown["status"] == "active" and shown["lastError"]["at"].endswith("Z")
    # Changed by a key that may start the workflow: it acts for that key from now on, and
    # the error of the fire before is past.
    patched = project.call("PATCH", f"/schedules/{s['id']}", body={})
    assert patched.status == 200, patched.body
    assert patched.body["keyId"] != creator["id"] and patched.body["lastError"] is None
    again = _fire(s, "2026-01-05T10:45:00Z")
    assert again is not None and _runs_of(project, s) == sorted([first, again])


def test_a_schedule_whose_key_no_longer_holds_the_grant_starts_nothing(project: Project) -> None:
    """Revoking a key revokes what it minted: the schedule of a key minted by a revoked key
    starts nothing; and a key that holds no start on the workflow (as a key the schedule
    acts for could, were grants ever narrowed) starts nothing either."""
    app = pull_app(project, "jobs", ["nightly"])
    parent = _key(project, (START, "jobs/nightly"))
    child = project.call("POST", "/apiKeys", key=parent["key"], body={
        "name": "child", "permissions": [{"action": START, "resource": "jobs/nightly"}]}).body  # fmt: skip
    s = _schedule(project, child, app)
    _revoke(project, parent)
    assert _fire(s, "2026-01-05T10:15:00Z") is None
    assert "revoked" in project.call("GET", f"/schedules/{s['id']}").body["lastError"]["message"]
    reader = _key(project, ("workflows.runs.read", "jobs/nightly"))
    stored = store.get(s["id"])
    assert stored is not None
    store.save(stored, replace(stored, key_id=reader["id"]))
    assert _fire(s, "2026-01-05T10:30:00Z") is None
    error = project.call("GET", f"/schedules/{s['id']}").body["lastError"]["message"]
    assert error.endswith(f"may not {START} on jobs/nightly"), error
    assert _runs_of(project, s) == []


def test_a_fire_that_cannot_start_says_why_until_one_does(project: Project) -> None:
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    made = project.call("POST", "/schedules", body={
        "appId": app["id"], "workflow": "nightly", "cron": "*/15 * * * *"}).body  # fmt: skip
    assert _fire(made, "2026-01-05T10:15:00Z") is None
    error = project.call("GET", f"/schedules/{made['id']}").body["lastError"]
    assert error["message"] == "Run not started: app jobs has not synced yet"
    pull_app_workers = project.call("POST", f"/apps/{app['id']}/workers",
                                    body={"workerId": "w", "workflows": ["nightly"]})  # fmt: skip
    assert pull_app_workers.status == 200
    assert _fire(made, "2026-01-05T10:30:00Z") is not None
    assert project.call("GET", f"/schedules/{made['id']}").body["lastError"] is None


def test_a_schedule_from_before_keys_acts_until_it_is_changed(project: Project) -> None:
    """Made by an older engine (no `keyId`): it fires as it did; the first change records
    the changer's key, and from then on that key is checked."""
    app = pull_app(project, "jobs", ["nightly"])
    s = _schedule(project, {"key": project.api_key}, app)
    stored = store.get(s["id"])
    assert stored is not None
    store.save(stored, replace(stored, key_id=None))
    assert project.call("GET", f"/schedules/{s['id']}").body["keyId"] is None
    assert _fire(s, "2026-01-05T10:15:00Z") is not None
    changer = _key(project, (START, "jobs/nightly"))
    paused = project.call("POST", f"/schedules/{s['id']}/pause", key=changer["key"]).body
    assert paused["keyId"] == changer["id"]
    resumed = project.call("POST", f"/schedules/{s['id']}/resume", key=changer["key"]).body
    assert resumed["status"] == "active"
    _revoke(project, changer)
    assert _fire(s, "2026-01-05T10:30:00Z") is None


def test_a_revocation_elsewhere_is_seen_within_the_keys_memory(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fire reads its key as this environment read it at most `KEY_CACHE_SECONDS` ago: a
    revocation made here is seen at once, one made in another environment (its items
    deleted behind this one's back) once the memory is that old."""
    app = pull_app(project, "jobs", ["nightly"])
    creator = _key(project, (START, "jobs/nightly"))
    s = _schedule(project, creator, app)
    assert _fire(s, "2026-01-05T10:15:00Z") is not None  # the key is in memory now
    pointer = registry_store.get_item(f"APIKEYID#{creator['id']}", "APIKEYID")
    assert pointer is not None
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    for pk, sk in ((f"APIKEYID#{creator['id']}", "APIKEYID"),
                   (f"APIKEY#{pointer['hash']['S']}", "APIKEY")):  # fmt: skip
        ddb.delete_item(TableName=registry_store.table(), Key=registry_store.item_key(pk, sk))
    assert _fire(s, "2026-01-05T10:30:00Z") is not None  # within the seconds: stale
    now = clock.monotonic()
    monkeypatch.setattr(clock, "monotonic", lambda: now + api_keys_store.KEY_CACHE_SECONDS)
    assert _fire(s, "2026-01-05T10:45:00Z") is None
    # Here: a revocation through the store forgets at once.
    other = _key(project, (START, "jobs/nightly"))
    s2 = _schedule(project, other, app)
    assert _fire(s2, "2026-01-05T10:15:00Z") is not None
    _revoke(project, other)
    assert _fire(s2, "2026-01-05T10:30:00Z") is None


# --- subscriptions -------------------------------------------------------------------------


def _message(queue_id: str, n: int, attributes: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "messageId": f"msg-{n:04d}",
        "body": json.dumps({"n": n}),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1790000000000"},
        "messageAttributes": {
            k: {"stringValue": v, "dataType": "String"} for k, v in (attributes or {}).items()
        },
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:ezgh-q-{queue_id}",
    }


def _subscribe(project: Project, key: dict[str, Any], queue: str, target: dict[str, Any]) -> str:
    made = project.call("POST", "/subscriptions", key=key["key"],
                        body={"queueId": queue, "target": target})  # fmt: skip
    assert made.status == 201, made.body
    assert made.body["target"]["keyId"] == key["id"]
    return str(made.body["id"])


def _status(project: Project, sub: str) -> str:
    return str(project.call("GET", f"/subscriptions/{sub}").body["status"])


def _started(project: Project, queue: str, n: int) -> bool:
    from ezgh_engine.core.queues import start_run_id

    run_id = start_run_id(project.project_id, queue, f"msg-{n:04d}")
    return project.call("GET", f"/runs/{run_id}").status == 200


def test_a_start_subscription_delivers_for_its_creator_and_nothing_once_revoked(
    project: Project,
) -> None:
    app = pull_app(project, "billing", ["charge"])
    queue = project.call("POST", "/queues", body={"name": "orders"}).body["id"]
    creator = _key(project, (SUBSCRIBE, queue), (START, "billing/charge"))
    sub = _subscribe(project, creator, queue, {
        "kind": "workflow", "mode": "start", "appId": app["id"], "workflow": "charge"})  # fmt: skip
    assert deliver.deliver_record(_message(queue, 1)) is True and _started(project, queue, 1)
    _revoke(project, creator)
    assert deliver.deliver_record(_message(queue, 2)) is False  # retried, then dead-lettered
    assert not _started(project, queue, 2)
    shown = project.call("GET", f"/subscriptions/{sub}").body
    assert shown["status"] == (
        f"Run not started: 403 forbidden: the API key {creator['id']} subscription {sub} "
        "acts for is revoked"
    )
    assert shown["lastFailure"]["messageId"] == "msg-0002"
    # Its target changed by a key that may: delivered for that key.
    patched = project.call("PATCH", f"/subscriptions/{sub}", body={"maxConcurrency": 5})
    assert patched.status == 200 and patched.body["target"]["keyId"] != creator["id"]
    assert deliver.deliver_record(_message(queue, 2)) is True and _started(project, queue, 2)


def test_a_subscription_needs_its_queue_grant_at_each_delivery(project: Project) -> None:
    """What creating it needed, all of it: a key that may start the workflow but no longer
    subscribe to the queue delivers nothing."""
    app = pull_app(project, "billing", ["charge"])
    queue = project.call("POST", "/queues", body={"name": "orders"}).body["id"]
    creator = _key(project, (SUBSCRIBE, queue), (START, "billing/charge"))
    sub = _subscribe(project, creator, queue, {
        "kind": "workflow", "mode": "start", "appId": app["id"], "workflow": "charge"})  # fmt: skip
    starter = _key(project, (START, "billing/charge"))
    stored = queues_store.get_subscription(project.project_id, sub)
    assert stored is not None
    queues_store.save_subscription(
        replace(stored, target={**stored.target, "keyId": starter["id"]})
    )
    assert deliver.deliver_record(_message(queue, 1)) is False
    assert _status(project, sub).endswith(f"may not {SUBSCRIBE} on {queue}")
    assert not _started(project, queue, 1)


def test_a_resume_subscription_resumes_for_its_creator_and_nothing_once_revoked(
    project: Project,
) -> None:
    app = pull_app(project, "shop", ["order"])
    queue = project.call("POST", "/queues", body={"name": "payments"}).body["id"]
    runs = [start(project, app, "order") for _ in range(2)]
    for run_id in runs:
        _wait_for(run_id, queue, key=f"order:{run_id}")
    creator = _key(project, (SUBSCRIBE, queue), (RESUME, "shop/order"))
    sub = _subscribe(project, creator, queue, {
        "kind": "workflow", "mode": "resume", "appId": app["id"], "workflow": "order",
        "correlationAttribute": "orderKey"})  # fmt: skip
    assert deliver.deliver_record(resume_record(queue, "m-1", f"order:{runs[0]}")) is True
    assert step(runs[0], "paid#1").status == "completed"
    _revoke(project, creator)
    assert deliver.deliver_record(resume_record(queue, "m-2", f"order:{runs[1]}")) is False
    assert step(runs[1], "paid#1").status == "waiting"
    assert _status(project, sub).startswith("Run not resumed: 403 forbidden: the API key ")


def test_an_https_subscription_delivers_nothing_once_its_key_is_revoked(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    monkeypatch.setattr(push, "network_transport", lambda: httpx.MockTransport(handle))
    queue = project.call("POST", "/queues", body={"name": "orders"}).body["id"]
    creator = _key(project, (SUBSCRIBE, queue))
    sub = _subscribe(project, creator, queue,
                     {"kind": "https", "url": "https://hooks.example.com/in"})  # fmt: skip
    assert deliver.deliver_record(_message(queue, 1)) is True and len(sent) == 1
    _revoke(project, creator)
    assert deliver.deliver_record(_message(queue, 2)) is False and len(sent) == 1
    assert _status(project, sub).startswith("Not delivered: 403 forbidden: the API key ")


def test_a_subscription_from_before_keys_delivers_until_it_is_changed(project: Project) -> None:
    app = pull_app(project, "billing", ["charge"])
    queue = project.call("POST", "/queues", body={"name": "orders"}).body["id"]
    sub = _subscribe(project, {"key": project.api_key, "id": _admin_id(project)}, queue, {
        "kind": "workflow", "mode": "start", "appId": app["id"], "workflow": "charge"})  # fmt: skip
    stored = queues_store.get_subscription(project.project_id, sub)
    assert stored is not None
    old = {k: v for k, v in stored.target.items() if k != "keyId"}  # as an older engine wrote
    queues_store.save_subscription(replace(stored, target=old))
    assert deliver.deliver_record(_message(queue, 1)) is True and _started(project, queue, 1)
    changer = _key(project, (SUBSCRIBE, queue), (START, "billing/charge"))
    patched = project.call("PATCH", f"/subscriptions/{sub}", key=changer["key"], body={})
    assert patched.status == 200 and patched.body["target"]["keyId"] == changer["id"]
    _revoke(project, changer)
    assert deliver.deliver_record(_message(queue, 2)) is False
    assert not _started(project, queue, 2)


def _admin_id(project: Project) -> str:
    found = api_keys_store.find_api_key(project.api_key)
    assert found is not None
    return found.id


def test_a_target_records_the_callers_key_whatever_the_body_says(project: Project) -> None:
    """`keyId` is the engine's to write: a body naming another (broader) key is ignored."""
    app = pull_app(project, "billing", ["charge"])
    queue = project.call("POST", "/queues", body={"name": "orders"}).body["id"]
    narrow = _key(project, (SUBSCRIBE, queue), (START, "billing/charge"))
    made = project.call("POST", "/subscriptions", key=narrow["key"], body={
        "queueId": queue, "target": {"kind": "workflow", "mode": "start", "appId": app["id"],
                                     "workflow": "charge", "keyId": _admin_id(project)}})  # fmt: skip
    assert made.status == 201, made.body
    assert made.body["target"]["keyId"] == narrow["id"]
    target = {**made.body["target"], "keyId": _admin_id(project)}
    patched = project.call("PATCH", f"/subscriptions/{made.body['id']}", key=narrow["key"],
                           body={"target": target})  # fmt: skip
    assert patched.status == 200, patched.body
    assert patched.body["target"]["keyId"] == narrow["id"]


def test_a_flow_resume_subscription_resumes_nothing_once_its_key_is_revoked(
    project: Project,
) -> None:
    """A flow target in `resume` mode records its key too, and each delivery checks it."""
    queue = project.call("POST", "/queues", body={"name": "events"}).body["id"]
    assert project.call("POST", "/flows", body={"name": "listener"}).status == 201
    creator = _key(project, (SUBSCRIBE, queue), ("flows.jobs.start", "listener"))
    sub = _subscribe(project, creator, queue, {"kind": "flow", "mode": "resume",
                     "flowId": "listener", "correlationAttribute": "orderKey"})  # fmt: skip
    # Live: the key is not what stops it (no job waits: "no run to resume").
    assert deliver.deliver_record(resume_record(queue, "m-1", "order:1")) is False
    assert "403" not in _status(project, sub)
    _revoke(project, creator)
    assert deliver.deliver_record(resume_record(queue, "m-2", "order:1")) is False
    assert _status(project, sub).startswith("Job not resumed: 403 forbidden: the API key ")


# --- a polled pull task ----------------------------------------------------------------------


def _polled(project: Project, alpha: dict[str, Any], poller: str) -> tuple[str, dict[str, Any]]:
    """A run of alpha's `a` and its task, polled with `poller`."""
    from ezgh_engine.service import invoker

    run_id = start(project, alpha, "a")
    assert invoker.invoke(run_id, 1) is None  # its task is queued
    polled = project.call("POST", f"/apps/{alpha['id']}/tasks/poll", key=poller,
                          body={"waitSeconds": 0})  # fmt: skip
    assert polled.status == 200, polled.body
    return run_id, dict(polled.body)


def _answer_with_invoke(run_id: str, task: dict[str, Any]) -> Any:
    """The task's code invokes beta's `other`: the invoke step."""
    from ezgh_engine.service import pull

    wait = {"kind": "invoke", "name": "call", "stepId": "call#1", "workflow": "other",
            "app": "beta", "input": {}}  # fmt: skip
    answer = {"taskId": task["taskId"], "outcome": "suspended", "waits": [wait]}
    assert pull.post_outcome(task["api"]["token"], answer) == {"result": "ok"}
    _launch(run_id)
    return step(run_id, "call#1")


def _launch(run_id: str) -> None:
    """What the stream does once a suspend committed: start what its new waits wait on (a
    child run for an invoke that was allowed; a refused one ended before the commit)."""
    from ezgh_engine.adapters import runs_store
    from ezgh_engine.service import launches

    committed = runs_store.get_run(run_id)
    assert committed is not None
    launch = launches.missing(committed)
    if launch is not None:
        launches.launch(run_id, launch[0])


def test_a_polled_task_acts_for_the_key_that_polled_it(project: Project) -> None:
    """The app's recorded key (its last announce: the admin's) may start beta/other; a task
    polled by a key that may only poll alpha's tasks gets none of that."""
    from ezgh_engine.adapters import runs_store

    alpha, _ = pull_app(project, "alpha", ["a"]), pull_app(project, "beta", ["other"])
    poller = _key(project, ("workflows.apps.update", "alpha"))
    invoke = _answer_with_invoke(*_polled(project, alpha, poller["key"]))
    assert invoke.status == "failed" and invoke.error.code == "workflows.forbidden"
    assert invoke.error.message == (
        f"403 forbidden: the API key the task of app alpha was polled with ({poller['id']}) "
        f"may not {START} on beta/other"
    )
    # Polled by a key that may: started, acting for that key.
    starter = _key(project, ("workflows.apps.update", "alpha"), (START, "beta/other"))
    run_id, task = _polled(project, alpha, starter["key"])
    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None and run.task_key_id == starter["id"]
    assert _answer_with_invoke(run_id, task).status == "waiting"
    # Revoked while its task runs: what the task's code does next is refused.
    run_id, task = _polled(project, alpha, starter["key"])
    _revoke(project, starter)
    late = _answer_with_invoke(run_id, task)
    assert late.status == "failed" and late.error.message.endswith(f"({starter['id']}) is revoked")


def test_no_worker_may_claim_a_task_in_a_keys_name(project: Project) -> None:
    """A worker reading its queue directly names its own claim: never the key form, which
    would let it pick the key its task's code acts for."""
    from ezgh_engine.errors import ValidationError
    from ezgh_engine.service import invoker, pull

    alpha = pull_app(project, "alpha", ["a"])
    run_id = start(project, alpha, "a")
    assert invoker.invoke(run_id, 1) is None
    url = task_queues.ensure_queue(alpha["id"])
    [message] = aws.client("sqs").receive_message(QueueUrl=url)["Messages"]
    task = json.loads(message["Body"])
    claim = {"taskId": task["taskId"], "claim": f"key/{_admin_id(project)}/x"}
    with pytest.raises(ValidationError, match="may not begin with 'key/'"):
        pull.heartbeat(task["api"]["token"], claim)
    assert pull.heartbeat(task["api"]["token"], {**claim, "claim": "worker-1/x"})["leaseSeconds"]
