"""Run control end to end: step retries, cancellation during each kind of wait, run time limits
and RetryRun, long sleeps."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from tests.e2e.test_durable_runs import wait_ended, wait_status
from tests.e2e.workflows_app import CALLS, SEEN

pytestmark = pytest.mark.e2e


def _scheduler_timers(monkeypatch):
    """Route every timer through Scheduler, which follows the SkipClock."""
    from ezgh_engine import config

    monkeypatch.setenv(config.ENV_SQS_MAX_DELAY, "0")
    config.reset_settings()


def _pending(kind, status):
    return lambda r: any(s["kind"] == kind and s["status"] == status for s in r["steps"])


def test_retries_count_attempts_with_one_idempotency_key(engine, client, app_id, monkeypatch):
    _scheduler_timers(monkeypatch)
    run = client.start_run(app_id, "flaky", {"succeed_on": 3, "retries": 3})
    for attempt in (1, 2):  # skip each backoff once its attempt is recorded as failed
        wait_status(
            engine,
            client,
            run["id"],
            lambda r, n=attempt: any(
                s["status"] == "retrying" and s["attempt"] == n for s in r["steps"]
            ),
        )
        engine.clock.advance(timedelta(minutes=11))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    attempts = SEEN["flaky"]
    assert [a for a, _ in attempts] == [1, 2, 3]
    assert len({key for _, key in attempts}) == 1
    assert done["steps"][0]["attempt"] == 3
    types = [e["type"] for e in client.list_run_events(run["id"])["events"]]
    assert types.count("step.retrying") == 2


def test_last_attempt_fails_the_step(engine, client, app_id, monkeypatch):
    _scheduler_timers(monkeypatch)
    run = client.start_run(app_id, "flaky", {"succeed_on": 99, "retries": 1})
    wait_status(engine, client, run["id"], _pending("run", "retrying"))
    engine.clock.advance(timedelta(minutes=11))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "failed"
    assert done["error"]["name"] == "RuntimeError"
    assert [a for a, _ in SEEN["flaky"]] == [1, 2]


def test_non_retryable_error_fails_at_once(engine, client, app_id):
    run = client.start_run(app_id, "never-retry", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "failed"
    assert done["error"]["name"] == "NonRetryableError"
    assert CALLS["never-retry"] == 1


@pytest.mark.parametrize("kind", ["sleep", "callback", "child", "message"])
def test_cancelling_during_a_wait_runs_cleanup(engine, client, app_id, kind):
    if kind == "message":  # a wait on a queue that is not there fails at once
        created = httpx.post(
            f"{engine.api_prefix}/queues",
            json={"name": "q1"},
            headers={"Authorization": f"Bearer {engine.api_key}"},
        )
        assert created.status_code == 201, created.text
    run = client.start_run(app_id, "waiter", {"kind": kind, "queue": "q1", "key": "k1"})
    status = "sleeping" if kind == "sleep" else "waiting"
    wait_status(
        engine,
        client,
        run["id"],
        lambda r: any(s["name"] == "wait" and s["status"] == status for s in r["steps"]),
    )
    cancelling = client.cancel_run(run["id"])
    assert cancelling["status"] in ("cancelling", "cancelled")
    done = wait_ended(engine, client, run["id"], timeout=60)
    assert done["status"] == "cancelled", done
    steps = {s["name"]: s for s in done["steps"]}
    assert steps["wait"]["status"] == "cancelled"
    assert steps["cleanup"]["status"] == "completed"
    assert CALLS[f"cleanup-{kind}"] == 1
    assert SEEN[run["id"]] == ["cancelled"]
    if kind == "child":
        child = client.search_runs(workflow="sleepy-kid")["runs"][0]
        assert child["parentRunId"] == run["id"]
        assert wait_ended(engine, client, child["id"])["status"] == "cancelled"
    with pytest.raises(Exception) as info:
        client.cancel_run(run["id"])
    assert getattr(info.value, "status", None) == 409


def test_run_time_limit_then_retry_run(engine, client, app_id, monkeypatch):
    _scheduler_timers(monkeypatch)
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "dep-1")
    answer = httpx.post(
        f"{engine.api_prefix}/runs",
        headers={"Authorization": f"Bearer {engine.api_key}"},
        json={"appId": app_id, "workflow": "slow", "input": {}, "timeoutSeconds": 3600},
    )
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["id"]
    wait_status(engine, client, run_id, _pending("sleep", "sleeping"))
    engine.clock.advance(timedelta(hours=2))
    done = wait_ended(engine, client, run_id)
    assert done["status"] == "timedOut"
    assert done["error"]["code"] == "workflows.timed_out"
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "dep-2")
    client.retry_run(run_id)
    again = wait_ended(engine, client, run_id)
    assert again["status"] == "completed", again
    assert again["attempt"] == 2 and again["output"] == 2
    assert CALLS["slow-first-1"] == 1 and CALLS["slow-first-2"] == 0
    events = client.list_run_events(run_id)["events"]
    retried = [e for e in events if e["type"] == "run.retried"]
    assert retried and retried[0]["attempt"] == 2
    later = [e for e in events if e["type"] == "invocation.started" and e["attempt"] == 2]
    assert later and all(e["deploymentId"] == "dep-2" for e in later)


def test_time_limit_over_a_year_is_400(engine, app_id):
    answer = httpx.post(
        f"{engine.api_prefix}/runs",
        headers={"Authorization": f"Bearer {engine.api_key}"},
        json={"appId": app_id, "workflow": "slow", "timeoutSeconds": 366 * 86400},
    )
    assert answer.status_code == 400


def test_sleep_over_a_year_fails_the_step(engine, client, app_id):
    run = client.start_run(app_id, "too-long", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed"
    assert done["output"] == {"code": "workflows.sleep_too_long"}
    assert done["steps"][0]["status"] == "failed"


def _year_timers(run_id):
    """The run's one-year-limit schedules left in the engine's Scheduler group."""
    import json

    from ezgh_engine.adapters import aws
    from ezgh_engine.local.resources import SCHEDULER_GROUP

    scheduler = aws.client("scheduler")
    names = [
        s["Name"]
        for s in scheduler.list_schedules(GroupName=SCHEDULER_GROUP, MaxResults=100)["Schedules"]
    ]
    found = []
    for name in names:
        try:
            got = scheduler.get_schedule(GroupName=SCHEDULER_GROUP, Name=name)
        except scheduler.exceptions.ResourceNotFoundException:
            continue  # fired or deleted since the list
        body = json.loads(got["Target"]["Input"])
        if body.get("runId") == run_id and body.get("stepId") == "$deadline":
            found.append(body["wakeAt"])
    return found


def test_every_run_ends_by_its_one_year_limit(engine, client, app_id):
    """A run waiting on a callback without a timeout is never invoked again; it still ends
    `timedOut` at its one-year limit (the hourly sweep ends it), its wait with it. It holds
    no schedule of its own for it."""
    run = client.start_run(app_id, "waiter", {"kind": "callback"})
    wait_status(engine, client, run["id"], _pending("callback", "waiting"))
    assert _year_timers(run["id"]) == []
    engine.clock.advance(timedelta(days=365))
    engine.wait_for(lambda: True, 1)
    assert client.get_run(run["id"])["status"] == "running"  # not before its limit
    engine.clock.advance(timedelta(days=2))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "timedOut", done
    assert done["error"]["code"] == "workflows.timed_out"
    assert "one-year limit" in done["error"]["message"]
    # The end commits first; its pending steps are ended right after it.
    wait_status(engine, client, run["id"], _pending("callback", "cancelled"))


def test_a_run_holds_no_year_limit_schedule_of_its_own(engine, client, app_id):
    """No Scheduler call per run for its year limit (a burst of starts would be throttled at
    Scheduler's request quota): the group holds the stack's hourly sweep, and no timer of
    the run's."""
    run = client.start_run(app_id, "never-retry", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "failed"
    assert _year_timers(run["id"]) == []
    from ezgh_engine.adapters import aws
    from ezgh_engine.local.resources import SCHEDULER_GROUP
    from ezgh_engine.topology import YEAR_LIMIT_SWEEP

    names = [
        s["Name"]
        for s in aws.client("scheduler").list_schedules(GroupName=SCHEDULER_GROUP)["Schedules"]
    ]
    assert YEAR_LIMIT_SWEEP.name in names
