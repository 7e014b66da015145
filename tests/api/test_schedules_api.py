"""Schedules and pull-app routes through the API handler (moto in process)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from ezgh_engine import config, ids
from ezgh_engine.adapters import schedules_store
from ezgh_engine.core import messages as wire
from ezgh_engine.service import schedules


@pytest.fixture(autouse=True)
def _scheduler_target(aws_env, monkeypatch):
    monkeypatch.setenv(
        config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
    )
    monkeypatch.setenv("EZGH_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    config.reset_settings()


def _pull_app(project, workflows=("nightly",)) -> dict:
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    answer = project.call(
        "POST", f"/apps/{app['id']}/workers", body={"workerId": "w1", "workflows": list(workflows)}
    )
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "synced" and answer.body["workflows"] == list(workflows)
    return app


def test_create_get_list_pause_resume_delete(project):
    app = _pull_app(project)
    created = project.call(
        "POST",
        "/schedules",
        body={
            "appId": app["slug"],
            "workflow": "nightly",
            "cron": "0 3 * * *",
            "timezone": "America/New_York",
            "input": {"full": True},
        },
    )
    assert created.status == 201, created.body
    s = created.body
    assert s["slug"].startswith("wfs_") and len(s["id"]) == 36
    assert s["appId"] == app["id"] and s["status"] == "active" and s["nextRunAt"].endswith("Z")
    assert project.call("GET", f"/schedules/{s['slug']}").body["id"] == s["id"]
    assert [x["id"] for x in project.call("GET", "/schedules").body["schedules"]] == [s["id"]]
    paused = project.call("POST", f"/schedules/{s['id']}/pause").body
    assert paused["status"] == "paused" and paused["nextRunAt"] is None
    assert project.call("POST", f"/schedules/{s['id']}/resume").body["status"] == "active"
    patched = project.call("PATCH", f"/schedules/{s['id']}", body={"timezone": None})
    assert patched.status == 200 and patched.body["timezone"] == "UTC"
    assert project.call("DELETE", f"/schedules/{s['id']}").status == 204
    assert project.call("GET", f"/schedules/{s['id']}").status == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "0 0 31 2 * *"}, "cron"),
        ({"cron": "0 0 1 * 1"}, "cron"),
        ({"cron": "* * * * *", "timezone": "Not/AZone"}, "timezone"),
        ({"cron": "* * * * *", "workflow": "bad name!"}, "workflow"),
    ],
)
def test_invalid_schedules_are_validation_errors_naming_the_field(project, body, field):
    app = _pull_app(project)
    answer = project.call(
        "POST", "/schedules", body={"appId": app["id"], "workflow": "nightly", **body}
    )
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    assert answer.body["error"]["message"].startswith(field), answer.body


def test_a_fire_starts_one_run_with_a_derived_id(project):
    app = _pull_app(project)
    s = project.call(
        "POST",
        "/schedules",
        body={"appId": app["id"], "workflow": "nightly", "cron": "*/15 * * * *", "input": [1]},
    ).body
    message = wire.Cron(s["id"], "2026-01-05T10:15:00Z")
    run_id = schedules.fire(message)
    assert run_id == ids.derived_id("schedule", s["id"], "2026-01-05T10:15:00.000Z")
    assert schedules.fire(message) is None  # duplicate fire: nothing new
    run = project.call("GET", f"/runs/{run_id}").body
    assert run["scheduleId"] == s["id"] and run["input"] == [1] and "runKey" not in run
    project.call("POST", f"/schedules/{s['id']}/pause")
    late = replace(message, scheduled_time="2026-01-05T10:30:00Z")
    assert schedules.fire(late) is None  # paused: nothing
    assert schedules_store.get(s["id"]).status == "paused"


def test_pull_routes_refuse_push_apps_and_weak_keys(project):
    app = _pull_app(project)
    reader = project.call(
        "POST", "/apiKeys", body={"name": "r", "permissions": [{"action": "workflows.runs.read"}]}
    ).body["key"]
    for path, body in (
        (f"/apps/{app['id']}/workers", {"workerId": "w", "workflows": []}),
        (f"/apps/{app['id']}/tasks/poll", {"waitSeconds": 0}),
    ):
        answer = project.call("POST", path, key=reader, body=body)
        assert answer.status == 403 and answer.body["error"]["code"] == "forbidden"
    empty = project.call("POST", f"/apps/{app['id']}/tasks/poll", body={"waitSeconds": 0})
    assert empty.status == 204
    bad = project.call("POST", f"/apps/{app['id']}/tasks/poll", body={"waitSeconds": 99})
    assert bad.status == 400
