"""Schedules end to end: EventBridge Scheduler `cron(...)` schedules fired by the local
Scheduler emulator on the engine's (skippable) clock, runs with derived IDs."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from botocore.exceptions import ClientError
from ezgh_engine import clock, ids
from ezgh_engine.adapters.aws import client as aws_client
from ezgh_engine.config import settings
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import ApiError, WorkflowsClient

from tests.clients import workflows_client

pytestmark = pytest.mark.e2e


def _runs(client: WorkflowsClient, app_id: str) -> list[dict]:
    return client.search_runs(app_id=app_id, limit=100)["runs"]


def _create(client: WorkflowsClient, **body) -> dict:
    return client.request("POST", "/schedules", json=body)


def _skip_to(engine: LocalRuntime, when_iso: str, extra_seconds: float = 1.0) -> None:
    delta = clock.parse_iso(when_iso) - clock.now() + timedelta(seconds=extra_seconds)
    if delta > timedelta(0):
        engine.clock.advance(delta)
    engine.scheduler.kick()


def test_a_schedule_fires_within_its_minute_once(engine, client, app_id):
    s = _create(client, appId=app_id, workflow="sequence", cron="*/5 * * * *", input={"n": 1})
    assert s["slug"].startswith("wfs_") and s["status"] == "active"
    assert s["timezone"] == "UTC" and s["cron"] == "*/5 * * * *"
    planned = s["nextRunAt"]
    assert clock.parse_iso(planned).minute % 5 == 0
    assert _runs(client, app_id) == []

    _skip_to(engine, planned)
    runs = engine.wait_for(lambda: _runs(client, app_id), timeout=15)
    assert len(runs) == 1
    run = runs[0]
    assert run["id"] == ids.derived_id("schedule", s["id"], planned)
    assert run["scheduleId"] == s["id"]
    assert "runKey" not in run
    done = client.wait_for_run(run["id"], timeout=30, interval=0.1)
    assert done["status"] == "completed" and done["input"] == {"n": 1}
    assert done["scheduleId"] == s["id"]

    # A duplicate fire (Scheduler retries, a second delivery) starts nothing new.
    aws_client("sqs").send_message(
        QueueUrl=settings().invocations_queue_url,
        MessageBody=json.dumps(
            {"type": "cron", "scheduleId": s["id"], "scheduledTime": planned.replace(".000Z", "Z")}
        ),
    )
    aws_client("sqs").send_message(
        QueueUrl=settings().invocations_queue_url,
        MessageBody=json.dumps({"type": "cron", "scheduleId": s["id"]}),
    )
    engine.wait_idle(timeout=20)
    assert [r["id"] for r in _runs(client, app_id)] == [run["id"]]

    # The next minute of the timetable fires again, with its own derived ID.
    after = client.request("GET", f"/schedules/{s['slug']}")
    assert clock.parse_iso(after["nextRunAt"]) > clock.parse_iso(planned)
    _skip_to(engine, after["nextRunAt"])
    runs = engine.wait_for(
        lambda: (lambda r: r if len(r) == 2 else None)(_runs(client, app_id)), timeout=15
    )
    assert ids.derived_id("schedule", s["id"], after["nextRunAt"]) in {r["id"] for r in runs}


def test_pause_stops_fires_and_resume_restarts_them(engine, client, app_id):
    s = _create(client, appId=app_id, workflow="sequence", cron="* * * * *", input={"n": 0})
    paused = client.request("POST", f"/schedules/{s['id']}/pause")
    assert paused["status"] == "paused" and paused["nextRunAt"] is None
    _skip_to(engine, s["nextRunAt"], extra_seconds=120)
    engine.wait_idle(timeout=20)
    assert _runs(client, app_id) == []

    resumed = client.request("POST", f"/schedules/{s['id']}/resume")
    assert resumed["status"] == "active"
    _skip_to(engine, resumed["nextRunAt"])
    runs = engine.wait_for(lambda: _runs(client, app_id), timeout=15)
    assert runs[0]["scheduleId"] == s["id"]


def test_crud_timezone_and_validation(engine, client, app_id):
    s = _create(
        client, appId=app_id, workflow="sequence", cron="30 9 * * 1-5", timezone="Europe/Paris"
    )
    assert s["timezone"] == "Europe/Paris"
    nxt = clock.parse_iso(s["nextRunAt"])
    assert nxt.minute == 30 and nxt.hour in (7, 8)  # 09:30 in Paris is 07:30 or 08:30 UTC
    # The Scheduler schedule uses AWS's 6-field form with its time zone.
    timer = aws_client("scheduler").get_schedule(
        GroupName=settings().scheduler_group, Name=f"c-{s['id']}"
    )
    assert timer["ScheduleExpression"] == "cron(30 9 ? * 2,3,4,5,6 *)"
    assert timer["ScheduleExpressionTimezone"] == "Europe/Paris"
    assert json.loads(timer["Target"]["Input"])["scheduleId"] == s["id"]

    listed = client.request("GET", "/schedules")["schedules"]
    assert [x["id"] for x in listed] == [s["id"]]
    assert client.request("GET", f"/schedules/{s['slug']}")["id"] == s["id"]

    updated = client.request(
        "PATCH", f"/schedules/{s['id']}", json={"cron": "0 0 1 * *", "input": {"n": 3}}
    )
    assert updated["cron"] == "0 0 1 * *" and updated["input"] == {"n": 3}
    timer = aws_client("scheduler").get_schedule(
        GroupName=settings().scheduler_group, Name=f"c-{s['id']}"
    )
    assert timer["ScheduleExpression"] == "cron(0 0 1 * ? *)"

    for body, field in (
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * *"}, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ):
        with pytest.raises(ApiError) as err:
            _create(client, appId=app_id, workflow="sequence", **body)
        assert err.value.status == 400 and err.value.code == "validation_error"
        assert err.value.message.startswith(field), err.value.message
    with pytest.raises(ApiError) as err:
        _create(client, appId=app_id, workflow="nope", cron="* * * * *")
    assert err.value.status == 404

    client.request("DELETE", f"/schedules/{s['id']}")
    with pytest.raises(ApiError) as err:
        client.request("GET", f"/schedules/{s['id']}")
    assert err.value.status == 404
    with pytest.raises(ClientError):
        aws_client("scheduler").get_schedule(
            GroupName=settings().scheduler_group, Name=f"c-{s['id']}"
        )


def test_schedule_permissions(engine, client, app_id):
    app_name = client.get_app(app_id)["name"]
    key = client.request(
        "POST",
        "/apiKeys",
        json={"name": "reader", "permissions": [{"action": "workflows.runs.read"}]},
    )["key"]
    reader = workflows_client(engine, key)
    with pytest.raises(ApiError) as err:
        _create(reader, appId=app_id, workflow="sequence", cron="* * * * *")
    assert err.value.status == 403 and err.value.code == "forbidden"
    scoped = client.request(
        "POST",
        "/apiKeys",
        json={
            "name": "scoped",
            "permissions": [{"action": "workflows.runs.start", "resource": f"{app_name}/sequence"}],
        },
    )["key"]
    starter = workflows_client(engine, scoped)
    s = _create(starter, appId=app_id, workflow="sequence", cron="* * * * *")
    with pytest.raises(ApiError) as err:
        _create(starter, appId=app_id, workflow="plain", cron="* * * * *")
    assert err.value.status == 403
    assert reader.request("GET", f"/schedules/{s['id']}")["id"] == s["id"]
    with pytest.raises(ApiError) as err:
        reader.request("POST", f"/schedules/{s['id']}/pause")
    assert err.value.status == 403
