"""EZGH Queues end to end through the local runtime: subscriptions driven by the same
`deliver` handler Lambda runs (local pollers instead of event source mappings), and
run-result notifications through the stream, the `notifications` queue and `notify`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from ezgh_engine import ids
from ezgh_engine.adapters import aws, registry_store
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import QueuesClient, WorkflowsClient

from tests.e2e import workflows_app
from tests.e2e.workflows_app import CALLS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.moto_only(
        "its notification and dead-letter tests wait on SQS timings DynamoDB Local's slower stream polling made miss; tests/api/test_queues.py covers the queue store on both"
    ),
]
ENDED = {"completed", "failed", "cancelled", "timedOut"}


class Api:
    """Plain HTTP calls to the local engine's API."""

    def __init__(self, engine: LocalRuntime) -> None:
        self.engine = engine
        self.http = httpx.Client(
            base_url=engine.api_prefix,
            headers={"Authorization": f"Bearer {engine.api_key}"},
            timeout=30,
        )

    def __call__(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.http.request(method, path, **kwargs)
        assert answer.status_code < 300, (answer.status_code, answer.text)
        return answer.json() if answer.content else None

    def queue(self, name: str, **extra: Any) -> dict[str, Any]:
        return dict(self("POST", "/queues", json={"name": name, **extra}))

    def subscribe(self, queue: str, target: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return dict(
            self("POST", "/subscriptions", json={"queueId": queue, "target": target, **extra})
        )

    def send(self, queue: str, *messages: dict[str, Any]) -> list[dict[str, Any]]:
        return list(
            self("POST", f"/queues/{queue}/messages", json={"messages": list(messages)})["messages"]
        )


@pytest.fixture()
def api(engine: LocalRuntime) -> Any:
    workflows_app.QUEUE_INPUTS.clear()
    client = Api(engine)
    yield client
    client.http.close()


def _url(queue: dict[str, Any], dlq: bool = False) -> str:
    suffix = ("-dlq" if dlq else "") + (".fifo" if queue["fifo"] else "")
    return str(
        aws.client("sqs").get_queue_url(QueueName=f"ezgh-q-{queue['id']}{suffix}")["QueueUrl"]
    )


def _drain(queue: dict[str, Any], dlq: bool = False) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while True:
        batch = (
            aws.client("sqs")
            .receive_message(
                QueueUrl=_url(queue, dlq),
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                VisibilityTimeout=120,
            )
            .get("Messages", [])
        )
        if not batch:
            return got
        got.extend(batch)
        for message in batch:  # deleted, so a FIFO group's next message can be received
            aws.client("sqs").delete_message(
                QueueUrl=_url(queue, dlq), ReceiptHandle=message["ReceiptHandle"]
            )


def _runs(client: WorkflowsClient, workflow: str) -> list[dict[str, Any]]:
    return list(client.search_runs(workflow=workflow, limit=100)["runs"])


def _start_target(app_id: str, workflow: str = "chargeCustomer") -> dict[str, Any]:
    return {"kind": "workflow", "mode": "start", "appId": app_id, "workflow": workflow}


# --- start a run per message ---------------------------------------------------------------


def test_each_message_starts_one_run_with_the_message_as_input(engine, api, client, app_id):
    queue = api.queue("orders")
    api.subscribe("orders", _start_target(app_id), maxConcurrency=10)
    (sent,) = api.send("orders", {"body": '{"orderId":1042}', "attributes": {"source": "web"}})
    run_id = ids.derived_id("queue-start", engine.project_id, queue["id"], sent["messageId"])
    run = engine.wait_for(lambda: (r := _get(client, run_id)) and r["status"] in ENDED and r)
    assert run["status"] == "completed", run
    message = run["input"]
    assert set(message) == {"messageId", "body", "attributes", "sentAt", "queueId"}
    assert message["messageId"] == sent["messageId"]
    assert message["body"] == '{"orderId":1042}'
    assert message["attributes"] == {"source": "web"}
    assert message["queueId"] == queue["id"]
    assert message["sentAt"].endswith("Z") and message["sentAt"][:4].isdigit()
    assert run["output"] == message
    assert CALLS["chargeCustomer"] == 1


def test_a_redelivered_message_reaches_the_same_run(engine, api, client, app_id):
    from functions.deliver.handler import handler as deliver

    queue = api.queue("orders")
    api.subscribe("orders", _start_target(app_id))
    (sent,) = api.send("orders", {"body": "once"})
    engine.wait_for(lambda: CALLS["chargeCustomer"] == 1)
    engine.wait_idle(timeout=30)
    # SQS delivers at least once: the same message again (as the event source would).
    record = {
        "messageId": sent["messageId"],
        "receiptHandle": "gone",
        "body": "once",
        "attributes": {"SentTimestamp": "1790000000000", "ApproximateReceiveCount": "2"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:ezgh-q-{queue['id']}",
    }
    for _ in range(2):
        assert deliver({"Records": [record]}, None) == {"batchItemFailures": []}
    engine.wait_idle(timeout=30)
    runs = _runs(client, "chargeCustomer")
    assert len(runs) == 1
    assert runs[0]["id"] == ids.derived_id(
        "queue-start", engine.project_id, queue["id"], sent["messageId"]
    )
    assert CALLS["chargeCustomer"] == 1  # the step ran once: one run, one start


def test_fifo_group_runs_start_in_order(engine, api, client, app_id):
    queue = api.queue("ledger", fifo=True)
    api.subscribe("ledger", _start_target(app_id), maxConcurrency=5)
    bodies = [f"m{i}" for i in range(5)]
    sent = api.send("ledger", *({"body": b, "groupId": "acct-9"} for b in bodies))
    assert all(m.get("seq") for m in sent)
    engine.wait_for(lambda: CALLS["chargeCustomer"] == 5, timeout=60)
    runs = sorted(
        _runs(client, "chargeCustomer"), key=lambda r: (r["createdAt"], r["input"]["seq"])
    )
    assert [r["input"]["body"] for r in runs] == bodies
    first = runs[0]["input"]
    assert first["groupId"] == "acct-9" and first["seq"] == sent[0]["seq"]
    assert set(first) == {"messageId", "body", "attributes", "sentAt", "queueId", "groupId", "seq"}
    assert queue["fifo"] is True


def test_starts_wait_until_the_app_has_synced(engine, api, client):
    queue = api.queue("late", visibilityTimeoutSeconds=1, maxReceiveCount=50)
    app = api("POST", "/apps", json={"name": "late-app", "kind": "pull"})
    sub = api.subscribe("late", _start_target(app["id"]))
    (sent,) = api.send("late", {"body": "early"})
    failed = engine.wait_for(
        lambda: (s := api("GET", f"/subscriptions/{sub['id']}"))["status"] != "ok" and s, timeout=30
    )
    assert (
        "not synced" in failed["status"] and failed["lastFailure"]["messageId"] == sent["messageId"]
    )
    assert _runs(client, "chargeCustomer") == []
    stored = registry_store.get_app(engine.project_id, app["id"])
    assert stored is not None
    registry_store.update_app_after_sync(stored, ["chargeCustomer"])  # its workers announced
    run_id = ids.derived_id("queue-start", engine.project_id, queue["id"], sent["messageId"])
    run = engine.wait_for(lambda: _get(client, run_id), timeout=30)
    assert run["input"]["body"] == "early" and run["appId"] == app["id"]
    engine.wait_for(lambda: _drain(queue) == [], timeout=10)


# --- resume mode ---------------------------------------------------------------------------


def test_message_without_correlation_goes_to_the_dlq_with_status(engine, api, app_id):
    queue = api.queue("payments", visibilityTimeoutSeconds=1, maxReceiveCount=2)
    sub = api.subscribe(
        "payments",
        {
            "kind": "workflow",
            "mode": "resume",
            "appId": app_id,
            "workflow": "chargeCustomer",
            "correlationAttribute": "orderKey",
        },
    )
    api.send(
        "payments", {"body": "no key"}, {"body": "bad key", "attributes": {"orderKey": "has space"}}
    )
    status = engine.wait_for(
        lambda: (s := api("GET", f"/subscriptions/{sub['id']}"))["status"] != "ok" and s, timeout=20
    )
    assert status["status"] == "No run to resume (message)"
    # Gathered across drains: the two may reach the DLQ at different receives, and a drain
    # hides what it got for two minutes.
    dead: list[dict[str, Any]] = []
    engine.wait_for(lambda: dead.extend(_drain(queue, dlq=True)) or len(dead) >= 2, timeout=40)
    assert sorted(m["Body"] for m in dead) == ["bad key", "no key"]
    assert all(int(m["Attributes"]["ApproximateReceiveCount"]) >= 2 for m in dead)
    # Redrive sends dead letters back to the queue.
    api("POST", f"/subscriptions/{sub['id']}/pause")
    for message in dead:
        aws.client("sqs").send_message(QueueUrl=_url(queue, dlq=True), MessageBody=message["Body"])
    moved = api("POST", f"/queues/{queue['id']}/redrive")
    assert moved == {"moved": 2, "remaining": 0}
    back: list[str] = []  # (a message the pausing poller had just taken shows up a second later)
    engine.wait_for(
        lambda: back.extend(m["Body"] for m in _drain(queue)) or len(back) >= 2, timeout=10
    )
    assert sorted(back) == ["bad key", "no key"]


def _waits_ready() -> bool:
    try:
        from ezgh_engine.service.waits import resume_message_waiters  # noqa: F401
    except ImportError:
        return False
    return True


needs_waits = pytest.mark.skipif(
    not _waits_ready(),
    reason="ezgh_engine.service.waits.resume_message_waiters has not landed yet",
)


@needs_waits
def test_no_waiter_means_retries_then_dlq(engine, api, app_id):
    queue = api.queue("replies", visibilityTimeoutSeconds=1, maxReceiveCount=2)
    sub = api.subscribe(
        "replies",
        {
            "kind": "workflow",
            "mode": "resume",
            "appId": app_id,
            "workflow": "chargeCustomer",
            "correlationAttribute": "orderKey",
        },
    )
    api.send("replies", {"body": "nobody", "attributes": {"orderKey": "order:1"}})
    dead = engine.wait_for(lambda: _drain(queue, dlq=True), timeout=40)
    assert [m["Body"] for m in dead] == ["nobody"]
    assert api("GET", f"/subscriptions/{sub['id']}")["status"] == "No run to resume (message)"


@needs_waits
def test_the_status_clears_once_a_redelivery_resumes_a_run(engine, api, client, app_id):
    """`No run to resume (message)` is the status while nobody waits; once a run waits and
    the redelivered message resumes it, the subscription reads `ok` again, and its
    `lastFailure` still says what happened."""
    queue = api.queue("late-replies", visibilityTimeoutSeconds=1, maxReceiveCount=50)
    sub = api.subscribe(
        "late-replies",
        {
            "kind": "workflow",
            "mode": "resume",
            "appId": app_id,
            "workflow": "message-wait",
            "correlationAttribute": "orderKey",
        },
    )
    (sent,) = api.send("late-replies", {"body": "paid", "attributes": {"orderKey": "order:7"}})
    failing = engine.wait_for(
        lambda: (s := api("GET", f"/subscriptions/{sub['id']}"))["status"] != "ok" and s,
        timeout=30,
    )
    assert failing["status"] == "No run to resume (message)"
    run = client.start_run(app_id, "message-wait", {"queue": queue["id"], "key": "order:7"})
    done = client.wait_for_run(run["id"], timeout=60, interval=0.1)
    assert done["status"] == "completed" and done["output"]["message"]["body"] == "paid"
    now = api("GET", f"/subscriptions/{sub['id']}")
    assert now["status"] == "ok", now
    assert now["lastFailure"]["message"] == "No run to resume (message)"
    assert now["lastFailure"]["messageId"] == sent["messageId"]
    listed = api("GET", "/subscriptions")["subscriptions"]
    assert [s["status"] for s in listed if s["id"] == sub["id"]] == ["ok"]


# --- https targets ---------------------------------------------------------------------------


class _Endpoint(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    fail_first = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.fail_first > 0:
            cls.fail_first -= 1
            self.send_response(503)
        else:
            cls.received.append(body)
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_https_target_gets_the_message_and_non_2xx_is_retried(engine, api):
    _Endpoint.received, _Endpoint.fail_first = [], 1
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        queue = api.queue("hooks", visibilityTimeoutSeconds=1)
        sub = api.subscribe(
            "hooks", {"kind": "https", "url": f"http://127.0.0.1:{server.server_port}/in"}
        )
        (sent,) = api.send("hooks", {"body": "ping", "attributes": {"a": "b"}})
        engine.wait_for(lambda: _Endpoint.received, timeout=30)
        (got,) = _Endpoint.received
        assert got["messageId"] == sent["messageId"] and got["body"] == "ping"
        assert got["attributes"] == {"a": "b"} and got["queueId"] == queue["id"]
        # The retry succeeded: the status is `ok` again, the failure is kept as the last one.
        status = api("GET", f"/subscriptions/{sub['id']}")
        assert status["status"] == "ok" and "503" in status["lastFailure"]["message"]
        engine.wait_for(lambda: _drain(queue) == [], timeout=10)
    finally:
        server.shutdown()


# --- send from a workflow ---------------------------------------------------------------------


def test_send_to_queue_step_sends_once_with_the_wfq_key(engine, api, client, app_id):
    from ezgh_workflows._internal.step_context import idempotency_key

    queue = api.queue("out", fifo=True)
    messages = [{"body": "a", "groupId": "g"}, {"body": "b", "groupId": "g", "dedupId": "mine"}]
    run = client.start_run(app_id, "sendToQueue", {"queueId": queue["id"], "messages": messages})
    done = engine.wait_for(
        lambda: (r := _get(client, run["id"])) and r["status"] in ENDED and r, timeout=30
    )
    assert done["status"] == "completed", done
    (step,) = [s for s in done["steps"] if s["name"] == "notify"]
    assert step["kind"] == "run" and step["status"] == "completed"
    assert done["output"] == step["output"] and len(step["output"]) == 2
    stored = _drain(queue)
    assert [m["Body"] for m in stored] == ["a", "b"]
    digest = idempotency_key(run["id"], step["id"])
    assert [m["Attributes"]["MessageDeduplicationId"] for m in stored] == [f"{digest}:0", "mine"]
    # Sent under an Idempotency-Key: each message's ID is the engine's own (the same on any
    # copy a resend after a crash stores), carried as its `ezgh.messageId` attribute.
    own = [m["MessageAttributes"]["ezgh.messageId"]["StringValue"] for m in stored]
    assert own == [m["messageId"] for m in step["output"]]
    # An attempt that sends again (after a crash) gets the first answer: no second copy.
    queues = QueuesClient(
        api_key=engine.api_key,
        organization_id=engine.org_id,
        project_id=engine.project_id,
        base_url=engine.api_url,
    )
    again = queues.send(
        queue["id"],
        [{"body": "a", "groupId": "g", "dedupId": f"{digest}:0"}, messages[1]],
        idempotency_key=f"wfq_{digest}",
    )
    assert again["messages"] == step["output"]
    assert _drain(queue) == []


def test_send_to_queue_4xx_fails_the_step_without_retries(engine, client, app_id):
    run = client.start_run(
        app_id, "sendToQueue", {"queueId": ids.new_id(), "messages": [{"body": "x"}]}
    )
    done = engine.wait_for(
        lambda: (r := _get(client, run["id"])) and r["status"] in ENDED and r, timeout=30
    )
    assert done["status"] == "failed"
    (step,) = [s for s in done["steps"] if s["name"] == "notify"]
    assert step["status"] == "failed" and step["attempt"] == 1
    assert step["error"]["name"] == "QueueSendError" and "404" in step["error"]["message"]


# --- run-result notifications ------------------------------------------------------------------


def _notify(api: Api, app_id: str, queue: dict[str, Any], **settings: Any) -> None:
    api("PATCH", f"/apps/{app_id}", json={"notifications": {"queueId": queue["id"], **settings}})


def _wait_run(engine, client, run_id):
    return engine.wait_for(
        lambda: (r := _get(client, run_id)) and r["status"] in ENDED and r, timeout=30
    )


def test_notifications_body_and_filters(engine, api, client, app_id):
    queue = api.queue("run-results")
    _notify(api, app_id, queue, on=["failed", "completed"], workflows=["charge", "sequence"])
    failed = client.start_run(app_id, "charge", {})
    completed = client.start_run(app_id, "sequence", {"n": 2})
    skipped = client.start_run(app_id, "plain", None)  # not in `workflows`
    runs = {r: _wait_run(engine, client, r) for r in (failed["id"], completed["id"], skipped["id"])}
    engine.wait_idle(timeout=30)
    bodies = {b["runId"]: b for b in (json.loads(m["Body"]) for m in _drain(queue))}
    assert set(bodies) == {failed["id"], completed["id"]}
    f, c = runs[failed["id"]], runs[completed["id"]]
    assert bodies[failed["id"]] == {
        "type": "workflows.run.ended",
        "runId": f["id"],
        "appId": app_id,
        "workflow": "charge",
        "status": "failed",
        "attempt": 1,
        "error": f["error"],
        "startedAt": f["startedAt"],
        "endedAt": f["endedAt"],
    }
    assert f["error"]["name"] == "CardDeclinedError"
    assert bodies[completed["id"]] == {
        "type": "workflows.run.ended",
        "runId": c["id"],
        "appId": app_id,
        "workflow": "sequence",
        "status": "completed",
        "attempt": 1,
        "output": 1,
        "startedAt": c["startedAt"],
        "endedAt": c["endedAt"],
    }


def test_notifications_once_per_ending_and_fifo_group_by(engine, api, client, app_id):
    from ezgh_engine.service import notifications

    queue = api.queue("results", fifo=True)
    _notify(api, app_id, queue, on=["failed"], workflows=None, groupBy="workflow")
    run = client.start_run(app_id, "charge", {})
    ended = _wait_run(engine, client, run["id"])
    engine.wait_idle(timeout=30)
    # The notify function gets the same ending again (a redelivery): still one message.
    stored = registry_store.get_app(engine.project_id, app_id)
    assert stored is not None
    notifications.send_notification(
        engine.project_id, {k: v for k, v in ended.items() if k not in ("steps", "input")}
    )
    (message,) = _drain(queue)
    assert message["Attributes"]["MessageGroupId"] == "charge"
    assert message["Attributes"]["MessageDeduplicationId"] == f"{run['id']}:1:failed"
    assert json.loads(message["Body"])["status"] == "failed"
    # A retried run that ends again sends another message (attempt 2).
    client.retry_run(run["id"])
    engine.wait_for(
        lambda: (r := _get(client, run["id"])) and r["attempt"] == 2 and r["status"] in ENDED,
        timeout=30,
    )
    engine.wait_idle(timeout=30)
    (again,) = _drain(queue)
    assert json.loads(again["Body"])["attempt"] == 2
    assert again["Attributes"]["MessageDeduplicationId"] == f"{run['id']}:2:failed"


def test_notifications_to_a_deleted_queue_are_dropped(engine, api, client, app_id):
    queue = api.queue("gone")
    _notify(api, app_id, queue, on=["completed"])
    api("DELETE", f"/queues/{queue['id']}")
    run = client.start_run(app_id, "sequence", {"n": 1})
    _wait_run(engine, client, run["id"])
    engine.wait_idle(timeout=20)  # the notifications queue is empty again: dropped at once


def _get(client: WorkflowsClient, run_id: str) -> dict[str, Any] | None:
    from ezgh_workflows import ApiError

    try:
        return dict(client.get_run(run_id))
    except ApiError as err:
        if err.status == 404:
            return None
        raise


# --- a message wait names its queue as every `{queueId}` does --------------------------------


def _ended(engine, client, run_id):
    return engine.wait_for(
        lambda: (r := _get(client, run_id)) and r["status"] in ENDED and r, timeout=30
    )


# A fixed UUID: a parameter is part of the test ID, which every xdist worker must collect alike.
@pytest.mark.parametrize(
    "ref", ["0f9c1c9e-2b7a-4c55-9d63-4a1f8e0b6a21", "no-such-queue", "Not a queue!"]
)
def test_a_wait_on_a_missing_or_malformed_queue_fails_at_once_as_a_send_does(
    engine, client, app_id, ref
):
    wait = client.start_run(app_id, "message-wait", {"queue": ref, "key": "k", "timeout": 86_400})
    send = client.start_run(app_id, "sendToQueue", {"queueId": ref, "messages": [{"body": "x"}]})
    waited, sent = _ended(engine, client, wait["id"]), _ended(engine, client, send["id"])
    assert waited["status"] == "failed" and sent["status"] == "failed"
    (step,) = [s for s in waited["steps"] if s["name"] == "paid"]
    (send_step,) = [s for s in sent["steps"] if s["name"] == "notify"]
    assert step["kind"] == "message" and step["status"] == "failed", step
    assert step["error"]["message"] == send_step["error"]["message"]
    assert step["error"]["code"] == send_step["error"]["code"]
    status = "400 validation_error" if ref == "Not a queue!" else "404 not_found"
    assert step["error"]["message"].startswith(status), step["error"]
    assert waited["error"]["name"] == "QueueWaitError"


def test_a_wait_may_name_its_queue_by_name(engine, api, client, app_id):
    queue = api.queue("payments")
    target = {
        "kind": "workflow",
        "mode": "resume",
        "appId": app_id,
        "workflow": "message-wait",
        "correlationAttribute": "orderKey",
    }
    api.subscribe(queue["id"], target)
    run = client.start_run(app_id, "message-wait", {"queue": "payments", "key": "order:7"})
    engine.wait_for(
        lambda: any(s["status"] == "waiting" for s in client.get_run(run["id"])["steps"]),
        timeout=30,
    )
    api.send(queue["id"], {"body": "paid", "attributes": {"orderKey": "order:7"}})
    done = _ended(engine, client, run["id"])
    assert done["status"] == "completed", done
    assert done["output"]["message"]["body"] == "paid"
    assert done["output"]["message"]["queueId"] == queue["id"]
