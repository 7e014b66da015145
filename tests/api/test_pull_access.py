"""`POST .../apps/{app}/tasks/access`: an hour's credentials that can only receive
and delete one pull app's tasks, so its workers long-poll SQS directly instead of waiting
inside the api function."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ezgh_engine.adapters import aws, task_queues
from ezgh_engine.service import pull

from tests.api.conftest import Project


def _assume_role_calls() -> tuple[list[dict[str, Any]], Any]:
    seen: list[dict[str, Any]] = []

    def record(call: dict[str, Any]) -> None:
        if call["operation"] == "AssumeRole":
            seen.append(call["params"])

    return seen, aws.observe(record)


def test_access_names_the_apps_queue_and_narrows_the_session_to_it(project: Project) -> None:
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    seen, stop = _assume_role_calls()
    try:
        answer = project.call("POST", f"/apps/{app['slug']}/tasks/access")
    finally:
        stop()
    assert answer.status == 200, answer.body
    body = answer.body
    assert body["queueUrl"].endswith(f"/{task_queues.queue_name(app['id'])}")
    assert body["region"] == "us-east-1" and body["endpointUrl"].startswith("https://")
    assert body["waitSeconds"] == 20 and body["expiresInSeconds"] == pull.ACCESS_SECONDS == 3600
    creds = body["credentials"]
    assert {"accessKeyId", "secretAccessKey", "sessionToken", "expiresAt"} <= set(creds)
    assert creds["accessKeyId"] != "testing"  # a session of its own, not the engine's keys
    [params] = seen
    assert params["RoleArn"] == "arn:aws:iam::123456789012:role/ezgh-task-worker"
    assert params["DurationSeconds"] == 3600
    [statement] = json.loads(params["Policy"])["Statement"]
    assert statement == {
        "Effect": "Allow",
        "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
        "Resource": f"arn:aws:sqs:us-east-1:123456789012:{task_queues.queue_name(app['id'])}",
    }


def test_an_engine_without_a_worker_role_vends_nothing(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """409 (not a 5xx): the SDK then polls `tasks/poll` as before."""
    monkeypatch.delenv(pull.ENV_TASK_WORKER_ROLE)
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    answer = project.call("POST", f"/apps/{app['id']}/tasks/access")
    assert answer.status == 409 and answer.body["error"]["code"], answer.body


def test_a_push_app_has_no_task_queue(project: Project) -> None:
    app = project.call(
        "POST",
        "/apps",
        body={"name": "web", "kind": "push", "url": "https://app.example.com/api/workflows"},
    ).body
    answer = project.call("POST", f"/apps/{app['id']}/tasks/access")
    assert answer.status == 409, answer.body
    assert project.call("POST", "/apps/nope/tasks/access").status == 404


def test_a_heartbeat_for_an_answered_reason_is_refused_even_under_a_live_lease(
    aws_env: None,
) -> None:
    """The claim of a directly received task (its first heartbeat) must fail for a task
    whose reason was answered while its epoch still holds the lease for the next one."""
    from ezgh_engine import clock, config
    from ezgh_engine.adapters import invocations_store as inv
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.core import tokens
    from ezgh_engine.errors import StaleInvocation

    from tests.api.steps_helpers import stored_run, write_raw

    now = clock.iso(clock.now())
    run = stored_run()
    leased = inv.take_lease(run.id, 1, now_ms=clock.now_ms(), lease_ms=600_000)
    assert leased is not None
    claims = tokens.InvocationClaims(
        run.id, run.project_id, leased.epoch, 1, clock.now_ms() + 600_000
    )
    token = tokens.mint(config.settings().token_secret, claims)

    def task(seq: int) -> dict[str, Any]:
        claim = pull.TaskClaims(run.id, leased.epoch, seq, "inv-1", now)
        return {"taskId": pull.mint_task_id(claim)}

    assert pull.heartbeat(token, task(1))["leaseSeconds"] > 0
    # Reason 1 answered, reason 2 arrived; the same epoch keeps a live lease.
    write_raw(
        [
            {
                "Update": {
                    "TableName": config.settings().runs_table,
                    "Key": items.run_key(run.id),
                    "UpdateExpression": "SET handledSeq = :one, invokeSeq = :two",
                    "ExpressionAttributeValues": {":one": {"N": "1"}, ":two": {"N": "2"}},
                }
            }
        ]
    )
    with pytest.raises(StaleInvocation):
        pull.heartbeat(token, task(1))
    assert pull.heartbeat(token, task(2))["leaseSeconds"] > 0
