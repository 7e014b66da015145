"""Durable waits end to end: callbacks, child runs, parallel steps and message waits."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from ezgh_engine.adapters.aws import client as aws_client
from ezgh_engine.config import settings

from tests.e2e.test_control import _scheduler_timers
from tests.e2e.test_durable_runs import wait_ended, wait_sleeping, wait_status
from tests.e2e.workflows_app import CALLS, SEEN

pytestmark = pytest.mark.e2e


def _url(engine, run_id):
    engine.wait_for(lambda: SEEN.get(run_id), 30)
    return SEEN[run_id][0]


def _waiting(name):
    return lambda r: any(s["name"] == name and s["status"] == "waiting" for s in r["steps"])


def test_callback_completes_once(engine, client, app_id):
    run = client.start_run(app_id, "approval", {})
    url = _url(engine, run["id"])
    assert url.startswith(engine.api_url + "/v1/callbacks/")
    assert len(url.rsplit("/", 1)[1]) >= 22  # >= 128 bits
    wait_status(engine, client, run["id"], _waiting("approve"))
    first = httpx.post(url, json={"ok": True})  # no API key
    assert first.status_code == 200, first.text
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed" and done["output"] == {"body": {"ok": True}}
    second = httpx.post(url, json={"ok": False})
    assert second.status_code == 409 and second.json()["error"]["code"] == "invalid_state"
    assert client.get_run(run["id"])["steps"][0]["output"] == {"ok": True}


def test_callback_posted_before_the_wait_is_kept(engine, client, app_id, monkeypatch):
    _scheduler_timers(monkeypatch)
    run = client.start_run(app_id, "approval", {"sleep_first": "1h"})
    url = _url(engine, run["id"])
    wait_sleeping(engine, client, run["id"])
    assert httpx.post(url, json=[1, 2, 3]).status_code == 200
    engine.clock.advance(timedelta(hours=2))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"] == {"body": [1, 2, 3]}


def test_callback_timeout_gives_none_and_then_409(engine, client, app_id, monkeypatch):
    _scheduler_timers(monkeypatch)
    run = client.start_run(app_id, "approval", {"timeout": 600})
    url = _url(engine, run["id"])
    wait_status(engine, client, run["id"], _waiting("approve"))
    engine.clock.advance(timedelta(minutes=20))
    done = wait_ended(engine, client, run["id"])
    assert done["output"] == {"body": None}
    assert httpx.post(url, json={}).status_code == 409


def test_unknown_or_forged_callback_is_404(engine):
    for token in ("nope", "A" * 43):
        answer = httpx.post(f"{engine.api_url}/v1/callbacks/{token}", json={})
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"


def test_child_run_output_and_single_child_on_redelivery(engine, client, app_id):
    run = client.start_run(app_id, "parent", {"child": "kid", "ci": {"n": 1}})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"] == {"child": {"got": {"n": 1}}}
    step = done["steps"][0]
    assert (step["kind"], step["status"]) == ("invoke", "completed")
    for seq in (1, 2, 1):  # the parent's invocations again: still one child
        aws_client("sqs").send_message(
            QueueUrl=settings().invocations_queue_url,
            MessageBody=json.dumps({"type": "invoke", "runId": run["id"], "seq": seq}),
        )
    engine.wait_idle()
    children = client.search_runs(workflow="kid")["runs"]
    assert len(children) == 1 and children[0]["parentRunId"] == run["id"]
    assert CALLS["kid"] == 1


def test_failed_child_raises_a_catchable_error(engine, client, app_id):
    run = client.start_run(app_id, "parent", {"child": "charge"})
    done = wait_ended(engine, client, run["id"], timeout=60)
    assert done["status"] == "completed", done
    assert done["output"]["name"] == "CardDeclinedError"
    assert "failed" in done["output"]["message"]
    assert done["steps"][0]["status"] == "failed"


def test_gather_runs_each_step_in_its_own_invocation(engine, client, app_id):
    run = client.start_run(app_id, "fan", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"] == "a+b"
    assert CALLS["fan-a"] == CALLS["fan-b"] == 1
    events = client.list_run_events(run["id"])["events"]
    branch_runs = {e["stepId"] for e in events if e["type"] == "invocation.branch"}
    assert branch_runs == {"a#1", "b#1"}


def test_a_failing_branch_raises_where_it_can_be_caught(engine, client, app_id):
    run = client.start_run(app_id, "fan", {"fail": ["b"]})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"] == {"caught": "branch b failed"}
    assert CALLS["fan-a"] == CALLS["fan-b"] == 1


def test_plain_def_all_and_race(engine, client, app_id):
    run = client.start_run(app_id, "fan-plain", {})
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"] == {"all": [1, 2], "race": "fast"}
    assert CALLS["fan-x"] == CALLS["fan-y"] == 1


def _queue(engine, name):
    """A queue of the engine's project (a wait on a queue that is not there fails at once)."""
    answer = httpx.post(
        f"{engine.api_prefix}/queues",
        json={"name": name},
        headers={"Authorization": f"Bearer {engine.api_key}"},
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _resume(engine: Any, app_id: str, queue: str, key: str, message: Any) -> int:
    """What a resume subscription of the app's `message-wait` workflow does."""
    from ezgh_engine.service.waits import resume_message_waiters

    target = {"app_id": app_id, "workflow": "message-wait"}
    return resume_message_waiters(engine.project_id, queue, key, message, **target)


def test_message_wait_resumed_by_resume_message_waiters(engine, client, app_id):
    queue = _queue(engine, "q-1")
    runs = [
        client.start_run(app_id, "message-wait", {"queue": queue, "key": "order:1"})
        for _ in range(2)
    ]
    for run in runs:
        wait_status(engine, client, run["id"], _waiting("paid"))
    message = {"messageId": "m1", "body": "{}", "attributes": {"k": "order:1"}}
    assert _resume(engine, app_id, queue, "order:2", message) == 0
    assert _resume(engine, app_id, queue, "order:1", message) == 2
    for run in runs:
        done = wait_ended(engine, client, run["id"])
        assert done["output"] == {"message": message}
    assert _resume(engine, app_id, queue, "order:1", message) == 0


def test_message_wait_timeout_gives_none(engine, client, app_id, monkeypatch):
    _scheduler_timers(monkeypatch)
    queue = _queue(engine, "q-2")
    run = client.start_run(app_id, "message-wait", {"queue": queue, "key": "k", "timeout": 60})
    wait_status(engine, client, run["id"], _waiting("paid"))
    engine.clock.advance(timedelta(minutes=5))
    done = wait_ended(engine, client, run["id"])
    assert done["output"] == {"message": None}
    assert _resume(engine, app_id, queue, "k", {"x": 1}) == 0
