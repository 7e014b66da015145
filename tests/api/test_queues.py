"""Queues and subscriptions through the API handler (moto in-process, no runtime)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from ezgh_engine.adapters import api_keys_store, event_sources

from tests.api.conftest import Project


@pytest.fixture(autouse=True)
def _local_sources(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Mappings recorded in-process (no runtime host installed: nothing polls)."""
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


def _queue(project: Project, name: str = "orders", **extra: Any) -> dict[str, Any]:
    answer = project.call("POST", "/queues", body={"name": name, **extra})
    assert answer.status == 201, answer.body
    return dict(answer.body)


def _sqs_messages(url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    got: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            VisibilityTimeout=60,
        ).get("Messages", [])
        if not batch:
            return got
        got.extend(batch)


def _url(queue_id: str, fifo: bool = False) -> str:
    name = f"ezgh-q-{queue_id}{'.fifo' if fifo else ''}"
    return str(
        boto3.client("sqs", region_name="us-east-1").get_queue_url(QueueName=name)["QueueUrl"]
    )


def test_create_get_list_delete_queue(project: Project) -> None:
    queue = _queue(project, "orders", maxReceiveCount=3, visibilityTimeoutSeconds=5)
    assert queue["name"] == "orders" and queue["fifo"] is False
    assert queue["maxReceiveCount"] == 3 and queue["visibilityTimeoutSeconds"] == 5
    by_name = project.call("GET", "/queues/orders")
    by_id = project.call("GET", f"/queues/{queue['id']}")
    assert by_name.body == by_id.body == queue
    assert [q["id"] for q in project.call("GET", "/queues").body["queues"]] == [queue["id"]]
    sqs = boto3.client("sqs", region_name="us-east-1")
    attrs = sqs.get_queue_attributes(QueueUrl=_url(queue["id"]), AttributeNames=["All"])[
        "Attributes"
    ]
    assert json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] in (3, "3")
    assert project.call("DELETE", "/queues/orders").status == 204
    assert project.call("GET", f"/queues/{queue['id']}").status == 404


def test_queue_name_rules_and_uniqueness(project: Project) -> None:
    bad = project.call("POST", "/queues", body={"name": "Bad Name"})
    assert bad.status == 400 and bad.body["error"]["code"] == "validation_error"
    assert "name" in bad.body["error"]["message"]
    _queue(project, "orders")
    again = project.call("POST", "/queues", body={"name": "orders"})
    assert again.status == 409 and again.body["error"]["code"] == "invalid_state"


def test_fifo_queue_send_answers_seq(project: Project) -> None:
    queue = _queue(project, "runs", fifo=True)
    answer = project.call(
        "POST",
        f"/queues/{queue['id']}/messages",
        body={
            "messages": [
                {"body": "a", "groupId": "g"},
                {"body": "b", "groupId": "g", "dedupId": "d"},
            ]
        },
    )
    assert answer.status == 200, answer.body
    sent = answer.body["messages"]
    assert len(sent) == 2 and all(m["messageId"] and m["seq"] for m in sent)
    assert sent[0]["messageId"] != sent[1]["messageId"]


@pytest.mark.parametrize(
    ("messages", "fifo", "field"),
    [
        ([{"body": str(i)} for i in range(11)], False, "messages"),
        ([{"body": "ok", "groupId": "g"}, {"body": "no group"}], True, "messages[1].groupId"),
        ([{"body": "ok"}, {"body": "x" * (256 * 1024 + 1)}], False, "messages[1]"),
        (
            [{"body": "ok"}, {"body": "ok", "attributes": {"n": 5}}],
            False,
            "messages[1].attributes.n",
        ),
        ([{"body": 5}], False, "messages[0].body"),
        ([], False, "messages"),
    ],
)
def test_bad_messages_are_400_and_nothing_is_sent(
    project: Project, messages: list[Any], fifo: bool, field: str
) -> None:
    queue = _queue(project, "q", fifo=fifo)
    answer = project.call("POST", f"/queues/{queue['id']}/messages", body={"messages": messages})
    assert answer.status in (400, 413), answer.body
    assert answer.body["error"]["code"] in ("validation_error", "payload_too_large")
    if answer.status == 400:
        assert field in answer.body["error"]["message"]
    assert _sqs_messages(_url(queue["id"], fifo)) == []


def test_send_idempotency_key_stores_one_copy(project: Project) -> None:
    queue = _queue(project)
    body = {"messages": [{"body": "hello", "attributes": {"source": "web"}}]}
    headers = {"Idempotency-Key": "k-1"}
    first = project.call("POST", f"/queues/{queue['id']}/messages", body=body, headers=headers)
    second = project.call("POST", f"/queues/{queue['id']}/messages", body=body, headers=headers)
    assert first.status == second.status == 200
    assert first.body == second.body
    other = project.call(
        "POST",
        f"/queues/{queue['id']}/messages",
        body={"messages": [{"body": "other"}]},
        headers=headers,
    )
    assert other.status == 409 and other.body["error"]["code"] == "idempotency_conflict"
    stored = _sqs_messages(_url(queue["id"]))
    assert len(stored) == 1
    assert stored[0]["Body"] == "hello"
    assert stored[0]["MessageAttributes"]["source"]["StringValue"] == "web"


def test_send_needs_permission_on_the_queue(project: Project) -> None:
    queue = _queue(project)
    other = _queue(project, "other")
    key = project.call(
        "POST",
        "/apiKeys",
        body={
            "name": "s",
            "permissions": [{"action": "queues.messages.send", "resource": queue["id"]}],
        },
    ).body["key"]
    ok = project.call(
        "POST", f"/queues/{queue['id']}/messages", key=key, body={"messages": [{"body": "x"}]}
    )
    assert ok.status == 200
    no = project.call(
        "POST", f"/queues/{other['id']}/messages", key=key, body={"messages": [{"body": "x"}]}
    )
    assert no.status == 403 and no.body["error"]["code"] == "forbidden"


def test_redrive_moves_dead_letters_back(project: Project) -> None:
    queue = _queue(project, maxReceiveCount=1, visibilityTimeoutSeconds=0)
    project.call(
        "POST",
        f"/queues/{queue['id']}/messages",
        body={"messages": [{"body": "x", "attributes": {"a": "b"}}]},
    )
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = _url(queue["id"])
    for _ in range(3):  # received once, then moved to the DLQ on the next receive
        sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)
    assert _sqs_messages(url) == []
    answer = project.call("POST", f"/queues/{queue['id']}/redrive")
    assert answer.status == 200 and answer.body["moved"] == 1, answer.body
    back = _sqs_messages(url)
    assert [m["Body"] for m in back] == ["x"]
    assert back[0]["MessageAttributes"]["a"]["StringValue"] == "b"


# --- subscriptions -------------------------------------------------------------------------


def _synced_app(
    project: Project, name: str = "billing-jobs", workflows: tuple[str, ...] = ("chargeCustomer",)
) -> dict[str, Any]:
    from ezgh_engine.adapters import registry_store

    app = project.call("POST", "/apps", body={"name": name, "kind": "pull"}).body
    stored = registry_store.get_app(project.project_id, app["id"])
    assert stored is not None
    return registry_store.update_app_after_sync(stored, list(workflows)).to_api()


def test_subscription_lifecycle(project: Project) -> None:
    queue = _queue(project)
    app = _synced_app(project)
    created = project.call(
        "POST",
        "/subscriptions",
        body={
            "queueId": "orders",
            "target": {
                "kind": "workflow",
                "mode": "start",
                "appId": app["id"],
                "workflow": "chargeCustomer",
            },
            "maxConcurrency": 3,
        },
    )
    assert created.status == 201, created.body
    sub = created.body
    assert sub["queueId"] == queue["id"] and sub["maxConcurrency"] == 3
    assert sub["target"] == {
        "kind": "workflow",
        "mode": "start",
        "appId": app["id"],
        "workflow": "chargeCustomer",
        "keyId": api_keys_store.find_api_key(project.api_key).id,  # its deliveries act for it
    }
    assert sub["state"] == "active" and sub["status"] == "ok"
    (mapping,) = event_sources.LOCAL.mappings.values()
    assert mapping.enabled and mapping.max_concurrency == 3 and mapping.batch_size == 1
    assert mapping.queue_arn.endswith(f"ezgh-q-{queue['id']}")

    assert project.call("GET", f"/subscriptions/{sub['id']}").body == sub
    assert [s["id"] for s in project.call("GET", "/subscriptions").body["subscriptions"]] == [
        sub["id"]
    ]
    paused = project.call("POST", f"/subscriptions/{sub['id']}/pause").body
    assert paused["state"] == "paused" and not event_sources.LOCAL.mappings[mapping.id].enabled
    resumed = project.call("POST", f"/subscriptions/{sub['id']}/resume").body
    assert resumed["state"] == "active" and event_sources.LOCAL.mappings[mapping.id].enabled
    changed = project.call("PATCH", f"/subscriptions/{sub['id']}", body={"maxConcurrency": 1})
    assert changed.status == 200 and changed.body["maxConcurrency"] == 1
    assert event_sources.LOCAL.mappings[mapping.id].max_concurrency == 1
    kind = project.call(
        "PATCH",
        f"/subscriptions/{sub['id']}",
        body={"target": {"kind": "https", "url": "https://hooks.example.com/x"}},
    )
    assert kind.status == 400 and "kind" in kind.body["error"]["message"]
    second = project.call(
        "POST",
        "/subscriptions",
        body={
            "queueId": queue["id"],
            "target": {"kind": "https", "url": "https://hooks.example.com/x"},
        },
    )
    assert second.status == 409
    assert project.call("DELETE", f"/subscriptions/{sub['id']}").status == 204
    assert event_sources.LOCAL.mappings == {}
    assert project.call("GET", f"/subscriptions/{sub['id']}").status == 404


def test_resume_mode_needs_a_correlation_attribute(project: Project) -> None:
    _queue(project, "payments")
    app = _synced_app(project, workflows=("order",))
    target = {"kind": "workflow", "mode": "resume", "appId": app["id"], "workflow": "order"}
    bad = project.call("POST", "/subscriptions", body={"queueId": "payments", "target": target})
    assert bad.status == 400 and "correlationAttribute" in bad.body["error"]["message"]
    ok = project.call(
        "POST",
        "/subscriptions",
        body={"queueId": "payments", "target": {**target, "correlationAttribute": "orderKey"}},
    )
    assert ok.status == 201 and ok.body["target"]["correlationAttribute"] == "orderKey"


def test_subscription_permissions_at_create_and_update(project: Project) -> None:
    queue = _queue(project)
    app = _synced_app(project, workflows=("chargeCustomer", "order"))
    start = {"kind": "workflow", "mode": "start", "appId": app["id"], "workflow": "chargeCustomer"}

    def key(*perms: tuple[str, str]) -> str:
        permissions = [{"action": a, "resource": r} for a, r in perms]
        return str(
            project.call("POST", "/apiKeys", body={"name": "k", "permissions": permissions}).body[
                "key"
            ]
        )

    only_queue = key(("queues.subscriptions.create", queue["id"]))
    refused = project.call(
        "POST", "/subscriptions", key=only_queue, body={"queueId": queue["id"], "target": start}
    )
    assert refused.status == 403
    only_run = key(("workflows.runs.start", "billing-jobs/chargeCustomer"))
    refused = project.call(
        "POST", "/subscriptions", key=only_run, body={"queueId": queue["id"], "target": start}
    )
    assert refused.status == 403
    both = key(
        ("queues.subscriptions.create", queue["id"]),
        ("workflows.runs.start", "billing-jobs/chargeCustomer"),
    )
    created = project.call(
        "POST", "/subscriptions", key=both, body={"queueId": queue["id"], "target": start}
    )
    assert created.status == 201, created.body
    # Changing the workflow needs the permission on the new one too.
    change = project.call(
        "PATCH",
        f"/subscriptions/{created.body['id']}",
        key=both,
        body={"target": {**start, "workflow": "order"}},
    )
    assert change.status == 403
    resume = key(
        ("queues.subscriptions.create", queue["id"]),
        ("workflows.runs.start", "billing-jobs/chargeCustomer"),
    )
    assert resume  # start permission does not grant resume
    refused = project.call(
        "PATCH",
        f"/subscriptions/{created.body['id']}",
        key=resume,
        body={"target": {**start, "mode": "resume", "correlationAttribute": "k"}},
    )
    assert refused.status == 403


def test_subscription_create_is_idempotent(project: Project) -> None:
    _queue(project)
    body = {"queueId": "orders", "target": {"kind": "https", "url": "https://hooks.example.com/in"}}
    first = project.call("POST", "/subscriptions", body=body, headers={"Idempotency-Key": "s-1"})
    again = project.call("POST", "/subscriptions", body=body, headers={"Idempotency-Key": "s-1"})
    assert first.status == again.status == 201 and first.body == again.body
    assert len(event_sources.LOCAL.mappings) == 1


def test_deleting_a_queue_deletes_its_subscription(project: Project) -> None:
    _queue(project)
    sub = project.call(
        "POST",
        "/subscriptions",
        body={
            "queueId": "orders",
            "target": {"kind": "https", "url": "https://hooks.example.com/in"},
        },
    ).body
    assert project.call("DELETE", "/queues/orders").status == 204
    assert project.call("GET", f"/subscriptions/{sub['id']}").status == 404
    assert event_sources.LOCAL.mappings == {}


def test_openapi_lists_the_queue_paths(api: Any) -> None:
    paths = api("GET", "/v1/openapi.json").body["paths"]
    prefix = "/v1/organizations/{orgId}/projects/{projectId}"
    for path in (
        "/queues",
        "/queues/{queueId}",
        "/queues/{queueId}/messages",
        "/queues/{queueId}/redrive",
        "/subscriptions",
        "/subscriptions/{subId}",
        "/subscriptions/{subId}/pause",
    ):
        assert prefix + path in paths


def _attributes(url: str) -> dict[str, str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    return dict(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_a_queue_keeps_a_backlog_14_days_and_a_fifo_one_is_high_throughput(
    project: Project, fifo: bool
) -> None:
    """SQS's default retention (4 days) deleted an older backlog unread; a FIFO queue without
    high-throughput mode takes 300 calls a second in all, not per message group."""
    queue = _queue(project, "backlog", fifo=fifo)
    for suffix in ("", "-dlq"):
        name = f"ezgh-q-{queue['id']}{suffix}{'.fifo' if fifo else ''}"
        url = boto3.client("sqs", region_name="us-east-1").get_queue_url(QueueName=name)
        got = _attributes(url["QueueUrl"])
        assert got["MessageRetentionPeriod"] == str(14 * 24 * 3600), name
        if fifo:
            assert got["DeduplicationScope"] == "messageGroup", name
            assert got["FifoThroughputLimit"] == "perMessageGroupId", name


def test_repair_brings_a_queue_made_before_up_to_date(project: Project) -> None:
    """A queue made by an older version keeps SQS's defaults until `ezgh ops repair` sets
    them (a dry run lists it; applied, it is found up to date)."""
    from ezgh_engine.service.repair import queue_upgrades

    fifo = _queue(project, "old-fifo", fifo=True)
    plain = _queue(project, "old-plain")
    sqs = boto3.client("sqs", region_name="us-east-1")
    old = {"MessageRetentionPeriod": str(4 * 24 * 3600)}
    old_fifo = {**old, "DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    for url in (_url(fifo["id"], fifo=True), _dlq_url(fifo["id"], fifo=True)):
        sqs.set_queue_attributes(QueueUrl=url, Attributes=old_fifo)
    sqs.set_queue_attributes(QueueUrl=_url(plain["id"]), Attributes=old)
    found = queue_upgrades(project.project_id)
    assert sorted(u.queue.name for u in found) == ["old-fifo", "old-plain"]
    assert "MessageRetentionPeriod=1209600" in found[0].summary()
    assert _attributes(_url(plain["id"]))["MessageRetentionPeriod"] == old["MessageRetentionPeriod"]
    assert [u.queue.name for u in queue_upgrades(project.project_id, apply=True)] == [
        "old-fifo",
        "old-plain",
    ]
    assert queue_upgrades(project.project_id) == []
    assert _attributes(_url(fifo["id"], fifo=True))["FifoThroughputLimit"] == "perMessageGroupId"
    assert queue_upgrades() == []  # every project's queues, from the registry


def _dlq_url(queue_id: str, fifo: bool = False) -> str:
    name = f"ezgh-q-{queue_id}-dlq{'.fifo' if fifo else ''}"
    return str(
        boto3.client("sqs", region_name="us-east-1").get_queue_url(QueueName=name)["QueueUrl"]
    )


# --- what a burst of deliveries reads ------------------------------------------------------


def _start_subscription(project: Project) -> tuple[dict[str, Any], dict[str, Any]]:
    queue = _queue(project, "burst")
    app = _synced_app(project)
    created = project.call(
        "POST",
        "/subscriptions",
        body={
            "queueId": queue["id"],
            "target": {
                "kind": "workflow",
                "mode": "start",
                "appId": app["id"],
                "workflow": "chargeCustomer",
            },
        },
    )
    assert created.status == 201, created.body
    return queue, app


def _message(queue: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "messageId": f"msg-{n:04d}",
        "body": json.dumps({"n": n}),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1790000000000"},
        "messageAttributes": {},
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:ezgh-q-{queue['id']}",
    }


@pytest.fixture
def fresh_memory() -> Iterator[None]:
    from ezgh_engine.adapters import queues_store, registry_store

    registry_store.forget_cached_apps()
    queues_store.forget_cached()
    yield
    registry_store.forget_cached_apps()
    queues_store.forget_cached()


def test_a_burst_of_start_messages_reads_the_registry_once(
    project: Project, fresh_memory: None
) -> None:
    """Each message read the queue, its subscription (claim and record) and the app, all
    consistently and all on the same keys: a burst of a thousand a second read each key a
    thousand times a second. Now a warm environment reads them once per few seconds."""
    from ezgh_engine.adapters import aws, registry_store
    from ezgh_engine.service import deliver

    queue, _ = _start_subscription(project)
    registry_store.forget_cached_apps()
    seen: list[dict[str, Any]] = []
    stop = aws.observe(seen.append)
    try:
        for n in range(20):
            assert deliver.deliver_record(_message(queue, n)) is True
    finally:
        stop()
    registry = [r for r in seen if r["params"].get("TableName", "").endswith("registry")]
    reads = [r["params"]["Key"]["pk"]["S"].split("#")[0] for r in registry]
    # The first message's: its queue, subscription and app, and the key it acts for (a
    # bootstrap key: no chain of creators to read).
    assert sorted(reads) == ["APIKEY", "APIKEYID", "APP", "QUEUE", "QUEUESUB", "SUB"]
    runs = project.call("GET", "/runs").body["runs"]
    assert len(runs) == 20


def test_a_delivery_sees_an_app_change_made_here_at_once_and_elsewhere_within_seconds(
    project: Project, fresh_memory: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stale for at most `APP_CACHE_SECONDS`, and only in the startable direction: an app
    changed in this environment is read again at once, a refusal is read again before it
    is answered, and one changed elsewhere is seen once its memory is that old."""
    from ezgh_engine import clock
    from ezgh_engine.adapters import registry_store
    from ezgh_engine.service import deliver
    from ezgh_engine.service.derived_runs import NotStartable, startable_app

    queue, app = _start_subscription(project)
    assert deliver.deliver_record(_message(queue, 0)) is True
    stored = registry_store.get_app(project.project_id, app["id"])
    assert stored is not None
    # Elsewhere (another environment, behind this one's back): the workflow goes away.
    boto3.client("dynamodb", region_name="us-east-1").update_item(
        TableName=registry_store.table(),
        Key=registry_store.item_key(f"APP#{app['id']}", "APP"),
        UpdateExpression="SET workflows = :w, version = version + :one",
        ExpressionAttributeValues={":w": {"L": []}, ":one": {"N": "1"}},
    )
    assert deliver.deliver_record(_message(queue, 1)) is True  # within the seconds: stale
    now = clock.monotonic()
    monkeypatch.setattr(clock, "monotonic", lambda: now + registry_store.APP_CACHE_SECONDS)
    assert deliver.deliver_record(_message(queue, 2)) is False  # read again: refused
    # Here: synced again through the store, seen at once (and the refusal was not kept).
    registry_store.update_app_after_sync(stored, ["chargeCustomer"])
    assert deliver.deliver_record(_message(queue, 3)) is True
    registry_store.delete_app(stored)
    with pytest.raises(NotStartable):
        startable_app(project.project_id, app["id"], "chargeCustomer")


def test_the_memory_keeps_the_newest_version_it_read() -> None:
    from ezgh_engine.adapters.read_cache import ReadCache

    cache: ReadCache[tuple[str, int]] = ReadCache(5.0, version=lambda v: v[1], owner=lambda v: v[0])
    cache.put("k", ("a", 3))
    cache.put("k", ("a", 2))  # an older read arriving late
    assert cache.get("k", lambda: None) == ("a", 3)
    cache.forget("a")
    assert cache.get("k", lambda: ("a", 4)) == ("a", 4)


def test_the_status_is_the_last_deliverys_and_only_a_recovery_writes(
    project: Project, fresh_memory: None
) -> None:
    """A failed delivery sets the status; the next successful one (here: after the app
    synced) sets it back to `ok` and keeps `lastFailure`. Deliveries that succeed while the
    status is `ok` write nothing to the subscription."""
    from ezgh_engine.adapters import aws, registry_store
    from ezgh_engine.service import deliver

    queue, app = _start_subscription(project)
    stored = registry_store.get_app(project.project_id, app["id"])
    assert stored is not None
    registry_store.update_app_after_sync(stored, ["another"])  # chargeCustomer went away
    assert deliver.deliver_record(_message(queue, 0)) is False
    (sub,) = project.call("GET", "/subscriptions").body["subscriptions"]
    assert sub["status"].startswith("Run not started") and sub["lastFailure"]["messageId"] == (
        "msg-0000"
    )
    stored = registry_store.get_app(project.project_id, app["id"])
    assert stored is not None
    registry_store.update_app_after_sync(stored, ["chargeCustomer"])
    assert deliver.deliver_record(_message(queue, 0)) is True  # the redelivery
    (sub,) = project.call("GET", "/subscriptions").body["subscriptions"]
    assert sub["status"] == "ok" and sub["lastFailure"]["messageId"] == "msg-0000"
    seen: list[dict[str, Any]] = []
    stop = aws.observe(seen.append)
    try:
        for n in range(1, 6):
            assert deliver.deliver_record(_message(queue, n)) is True
    finally:
        stop()
    writes = [r for r in seen if r["operation"] == "UpdateItem" and "SUB#" in json.dumps(r)]
    assert writes == []
