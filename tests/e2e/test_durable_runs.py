"""Durable runs end to end: the SDK's push app, the API, the stream, the invoker and timers,
all through the local runtime (the same handlers Lambda runs)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from ezgh_engine.adapters.aws import client as aws_client
from ezgh_engine.config import settings
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.topology import NOTIFICATIONS_QUEUE
from ezgh_workflows import WorkflowsClient

from tests.e2e.workflows_app import CALLS

pytestmark = pytest.mark.e2e
ENDED = {"completed", "failed", "cancelled", "timedOut"}


def wait_ended(engine: LocalRuntime, client: WorkflowsClient, run_id: str, timeout: float = 30):
    def ended():
        run = client.get_run(run_id)
        return run if run["status"] in ENDED else None

    return engine.wait_for(ended, timeout)


def wait_status(engine, client, run_id, predicate, timeout=30):
    return engine.wait_for(
        lambda: (lambda r: r if predicate(r) else None)(client.get_run(run_id)), timeout
    )


def wait_sleeping(engine, client, run_id, timeout=30):
    """The run, once one of its steps sleeps."""
    return wait_status(
        engine,
        client,
        run_id,
        lambda r: any(s["kind"] == "sleep" and s["status"] == "sleeping" for s in r["steps"]),
        timeout,
    )


def test_onboarding_sleeps_three_days_and_completes(engine, client, app_id):
    run = client.start_run(app_id, "onboarding", {"userId": "u_42"})
    assert run["status"] == "running"
    sleeping = wait_sleeping(engine, client, run["id"])
    assert [s["name"] for s in sleeping["steps"]] == ["load-user", "welcome-email", "cooldown"]
    assert sleeping["status"] == "running"
    engine.clock.advance(timedelta(days=3, seconds=1))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"] == "a@x.io"
    assert [(s["name"], s["kind"], s["status"]) for s in done["steps"]] == [
        ("load-user", "run", "completed"),
        ("welcome-email", "run", "completed"),
        ("cooldown", "sleep", "completed"),
        ("follow-up", "run", "completed"),
    ]
    # Each recorded step ran exactly once, although the workflow replayed twice.
    assert CALLS["load-user"] == CALLS["welcome-email"] == CALLS["follow-up"] == 1
    assert done["endedAt"] >= done["startedAt"]


def test_short_sleep_uses_the_queue_delay(engine, client, app_id):
    run = client.start_run(app_id, "onboarding", {"userId": "u", "cooldown": "2s"})
    done = wait_ended(engine, client, run["id"], timeout=30)
    assert done["status"] == "completed"


def test_events_list_every_invocation_and_step_with_deployment(engine, client, app_id, monkeypatch):
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "dep-123")
    run = client.start_run(app_id, "sequence", {"n": 2})
    wait_ended(engine, client, run["id"])
    events = client.list_run_events(run["id"])["events"]
    types = [e["type"] for e in events]
    assert types == [
        "run.started",
        "invocation.started",
        "step.completed",
        "step.completed",
        "invocation.completed",
        "run.completed",
    ]
    assert [e["stepId"] for e in events if e["type"] == "step.completed"] == ["add#1", "add#2"]
    for event in events:
        if event["type"].startswith(("step.", "invocation.")):
            assert event["deploymentId"] == "dep-123", event


def test_plain_def_workflow_with_now_and_uuid(engine, client, app_id):
    run = client.start_run(app_id, "plain", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"]["first"] == 1
    kinds = [(s["name"], s["kind"]) for s in done["steps"]]
    assert kinds == [("first", "run"), ("when", "value"), ("ident", "value")]


def test_failing_step_fails_the_run_with_the_users_error(engine, client, app_id):
    run = client.start_run(app_id, "charge", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "failed"
    assert done["error"]["code"] == "user"
    assert done["error"]["name"] == "CardDeclinedError"
    assert done["error"]["message"] == "Card declined"
    assert done["steps"][0]["status"] == "failed"


def test_failed_step_can_be_caught(engine, client, app_id):
    run = client.start_run(app_id, "catcher", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed"
    assert done["output"]["message"] == "nope"


def test_large_outputs_go_to_payloads(engine, client, app_id):
    size = 200 * 1024
    run = client.start_run(app_id, "big", {"size": size})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert "output" not in done and done["outputRef"] == "output"
    assert client.get_payload(run["id"], "output") == {"blob": "x" * size}
    step = done["steps"][0]
    assert "output" not in step
    assert client.get_payload(run["id"], step["outputRef"]) == "x" * size


def test_run_key_answers_the_same_run_or_conflicts(engine, client, app_id):
    first = client.start_run(app_id, "sequence", {"n": 1}, run_key="signup-42")
    again = client.start_run(app_id, "sequence", {"n": 1}, run_key="signup-42")
    assert again["id"] == first["id"]
    with pytest.raises(Exception) as info:
        client.start_run(app_id, "sequence", {"n": 2}, run_key="signup-42")
    assert getattr(info.value, "status", None) == 409
    assert getattr(info.value, "code", None) == "run_key_conflict"


def test_concurrent_starts_with_one_run_key_make_one_run(engine, client, app_id):
    from concurrent.futures import ThreadPoolExecutor

    def start(_):
        return client.start_run(app_id, "sequence", {"n": 1}, run_key="burst")["id"]

    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(start, range(16)))
    assert len(ids) == 1
    engine.wait_idle()
    runs = client.search_runs(runKey="burst")["runs"]
    assert [r["id"] for r in runs] == list(ids)
    assert CALLS["add-0"] == 1


def test_deleting_a_run_frees_its_key(engine, client, app_id):
    run = client.start_run(app_id, "sequence", {"n": 1}, run_key="k1")
    wait_ended(engine, client, run["id"])
    client.delete_run(run["id"])
    with pytest.raises(Exception) as info:
        client.get_run(run["id"])
    assert getattr(info.value, "status", None) == 404
    again = client.start_run(app_id, "sequence", {"n": 2}, run_key="k1")
    assert again["id"] != run["id"]


def test_a_duplicated_invocation_message_runs_no_step_twice(engine, client, app_id):
    run = client.start_run(app_id, "sequence", {"n": 3})
    done = wait_ended(engine, client, run["id"])
    assert done["output"] == 3
    sqs = aws_client("sqs")
    for seq in (1, 2, 1):
        sqs.send_message(
            QueueUrl=settings().invocations_queue_url,
            MessageBody=json.dumps({"type": "invoke", "runId": run["id"], "seq": seq}),
        )
    engine.wait_idle()
    assert [CALLS[f"add-{i}"] for i in range(3)] == [1, 1, 1]
    assert client.get_run(run["id"])["status"] == "completed"


def test_duplicate_message_during_a_running_step_is_held_off(engine, client, app_id):
    import threading

    from tests.e2e.workflows_app import GATES

    run = client.start_run(app_id, "gated", {})
    engine.wait_for(lambda: CALLS["gated"] == 1, 20)
    # The live invocation came as an asynchronous invoke: its event is in flight.
    assert _in_flight(_async_queue(engine)) == 1
    sqs = aws_client("sqs")
    sqs.send_message(
        QueueUrl=settings().invocations_queue_url,
        MessageBody=json.dumps({"type": "invoke", "runId": run["id"], "seq": 1}),
    )
    # The duplicate finds the run leased: it is held back until the lease would end.
    engine.wait_for(lambda: _in_flight() == 1, 10)
    GATES.setdefault(run["id"], threading.Event()).set()
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed"
    assert CALLS["gated"] == 1
    # Still held, or already back and dropped (the run has ended): never a second run of it.
    # The live invocation's event is deleted once its handler returns, which may be a
    # moment after the run reads completed (a loaded machine): wait for that, not a race.
    engine.wait_for(lambda: _in_flight(_async_queue(engine)) == 0, 20)
    assert CALLS["gated"] == 1


def _async_queue(engine) -> str:
    return engine.async_invokes.queue_urls["invoker"]


def _in_flight(queue_url: str | None = None) -> int:
    attrs = aws_client("sqs").get_queue_attributes(
        QueueUrl=queue_url or settings().invocations_queue_url,
        AttributeNames=["ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_search_filters_and_cursor(engine, client, app_id):
    ids = [client.start_run(app_id, "sequence", {"n": 1})["id"] for _ in range(5)]
    failed = client.start_run(app_id, "charge", {})["id"]
    engine.wait_idle()
    page = client.search_runs(workflow="sequence", limit=2)
    assert len(page["runs"]) == 2 and page["nextCursor"]
    seen = [r["id"] for r in page["runs"]]
    while page["nextCursor"]:
        page = client.search_runs(workflow="sequence", limit=2, cursor=page["nextCursor"])
        seen += [r["id"] for r in page["runs"]]
    assert seen == list(reversed(ids))  # newest first
    assert [r["id"] for r in client.search_runs(status="failed")["runs"]] == [failed]
    assert client.search_runs(appId=app_id, workflow="nope")["runs"] == []


def test_an_app_that_answers_500_does_not_lose_the_run(engine, client, app_id):
    from tests.e2e.workflows_app import served

    served.failures_left = 1
    run = client.start_run(app_id, "sequence", {"n": 2})
    done = wait_ended(engine, client, run["id"], timeout=40)
    assert done["status"] == "completed", done
    assert done["output"] == 1
    assert [CALLS["add-0"], CALLS["add-1"]] == [1, 1]


def test_an_unreachable_app_fails_the_run_after_its_budget(engine, client, app_id, monkeypatch):
    from ezgh_engine import config

    from tests.e2e.workflows_app import served

    monkeypatch.setenv(config.ENV_INVOKE_ATTEMPTS, "2")
    config.reset_settings()
    served.failures_left = 100
    run = client.start_run(app_id, "sequence", {"n": 1})
    done = wait_ended(engine, client, run["id"], timeout=40)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "workflows.app_unreachable"
    assert "could not be reached" in done["error"]["message"]
    assert CALLS["add-0"] == 0


def test_unknown_workflow_is_404(engine, client, app_id):
    with pytest.raises(Exception) as info:
        client.start_run(app_id, "nope", {})
    assert getattr(info.value, "status", None) == 404


def _invoke_messages_sent(records: list[dict], queue_url: str | None = None) -> int:
    """Invoke messages sent to the invocations queue (or to `queue_url`: the invoker's
    asynchronous event queue, where the local Lambda API puts what it accepts)."""
    return sum(
        1
        for r in records
        if r["operation"] == "SendMessage"
        and r["params"]["QueueUrl"] == (queue_url or settings().invocations_queue_url)
        and json.loads(r["params"]["MessageBody"]).get("type") == "invoke"
    )


def test_a_woken_sleep_invokes_at_once_with_one_invoke_message_per_run(engine, client, app_id):
    """The sleep's wake-up write takes the run's lease and the timer's handler invokes the
    app itself: the only invoke message of the run is its start's (docs/benchmarks.md), and
    that is an asynchronous invoke of the invoker, not an SQS message."""
    from ezgh_engine.adapters import aws

    seen: list[dict] = []
    stop = aws.observe(lambda r: seen.append(r) if r["service"] == "sqs" else None)
    try:
        run = client.start_run(app_id, "onboarding", {"cooldown": "1h"})
        wait_sleeping(engine, client, run["id"])
        engine.clock.advance(timedelta(hours=1, seconds=1))
        done = wait_ended(engine, client, run["id"])
    finally:
        stop()
    assert done["status"] == "completed" and done["output"] == "a@x.io"
    assert CALLS["follow-up"] == 1
    assert _invoke_messages_sent(seen) == 0
    assert _invoke_messages_sent(seen, engine.async_invokes.queue_urls["invoker"]) == 1


def test_a_woken_sleep_whose_app_is_down_is_invoked_again(engine, client, app_id):
    """The timer's message is not held for a retry (its step is awake: it would be dropped);
    the delivery comes back as an invoke message, and the run completes."""
    from tests.e2e.workflows_app import served

    run = client.start_run(app_id, "onboarding", {"cooldown": "1h"})
    wait_sleeping(engine, client, run["id"])
    engine.wait_idle()
    served.failures_left = 1
    engine.clock.advance(timedelta(hours=1, seconds=1))
    done = wait_ended(engine, client, run["id"], timeout=40)
    assert done["status"] == "completed", done
    assert served.failures_left == 0
    assert CALLS["follow-up"] == 1


def test_a_run_of_an_app_without_notifications_queues_no_notification(engine, client, app_id):
    """The invoker that ends the run knows its app: no notifications, no message for the
    notify function (tests/e2e/test_queues.py covers apps that have them)."""
    from ezgh_engine.adapters import aws

    assert engine.apps["e2e"].record.get("notifications") is None
    seen: list[dict] = []
    stop = aws.observe(lambda r: seen.append(r) if r["operation"] == "SendMessage" else None)
    try:
        run = client.start_run(app_id, "sequence", {"n": 1})
        done = wait_ended(engine, client, run["id"])
        engine.wait_idle()
    finally:
        stop()
    assert done["status"] == "completed"
    notifications = os.environ[NOTIFICATIONS_QUEUE.env_var]
    assert notifications not in {r["params"]["QueueUrl"] for r in seen}


def test_events_page_through_items_and_steps_in_order(engine, client, app_id):
    """`run.started` lives on the run item and `step.completed` on the steps (no event item
    of their own); pages of any size give every event once, in order."""
    run = client.start_run(app_id, "onboarding", {"cooldown": "1h"})
    wait_sleeping(engine, client, run["id"])
    engine.clock.advance(timedelta(hours=1, seconds=1))
    wait_ended(engine, client, run["id"])
    everything = client.list_run_events(run["id"])["events"]
    assert [e["type"] for e in everything] == [
        "run.started",
        "invocation.started",
        "step.completed",
        "step.completed",
        "invocation.suspended",
        "step.completed",  # the sleep, woken
        "invocation.started",
        "step.completed",
        "invocation.completed",
        "run.completed",
    ]
    assert everything[0]["workflow"] == "onboarding"
    ids = [e["id"] for e in everything]
    assert ids == sorted(ids)
    for size in (1, 2, 3):
        paged, cursor = [], None
        while True:
            page = client.list_run_events(run["id"], cursor=cursor, limit=size)
            paged += page["events"]
            cursor = page.get("nextCursor")
            if not cursor:
                break
        assert paged == everything, size


def test_a_failed_run_lists_its_invocation_and_its_end_with_the_error(engine, client, app_id):
    """An invocation's item also holds its start and the run's end (one write, three
    events): they list as before, in order, with the error."""
    run = client.start_run(app_id, "charge", {})
    done = wait_ended(engine, client, run["id"])
    events = client.list_run_events(run["id"])["events"]
    assert [e["type"] for e in events][-3:] == ["step.failed", "invocation.failed", "run.failed"]
    started = [e for e in events if e["type"] == "invocation.started"]
    answered = [e for e in events if e["type"].startswith("invocation.") and e not in started]
    assert [e["invocationId"] for e in started] == [e["invocationId"] for e in answered]
    assert answered[-1]["type"] == "invocation.failed"
    assert events[-1]["error"] == done["error"]
    assert not any(k in e for e in events for k in ("startedId", "startedAt", "runEnd"))
