"""HTTPS subscription deliveries are signed as Standard Webhooks, and a target's URL is shown
in full only to keys that may manage the subscription.

Deliveries end in a mock transport: nothing leaves the process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import event_sources, push, queues_store
from ezgh_engine.service import deliver

from tests.api.conftest import ENV, Project

URL = "https://hooks.example.com/in/tok_s3cr3t?key=abc123"


@pytest.fixture(autouse=True)
def _local_sources(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    requests: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(204)

    monkeypatch.setattr(push, "network_transport", lambda: httpx.MockTransport(handle))
    return requests


def _subscription(project: Project, url: str = URL) -> tuple[dict[str, Any], dict[str, Any]]:
    queue = project.call("POST", "/queues", body={"name": "orders"}).body
    created = project.call(
        "POST",
        "/subscriptions",
        body={"queueId": queue["id"], "target": {"kind": "https", "url": url}},
    )
    assert created.status == 201, created.body
    return queue, dict(created.body)


def _key(project: Project, *permissions: dict[str, str]) -> str:
    answer = project.call("POST", "/apiKeys", body={"name": "k", "permissions": list(permissions)})
    assert answer.status == 201, answer.body
    return str(answer.body["key"])


def _record(queue: dict[str, Any], body: str = '{"order": 7}') -> dict[str, Any]:
    return {
        "messageId": "msg-0001",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1790000000000"},
        "messageAttributes": {},
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:ezgh-q-{queue['id']}",
    }


def _verify(secret: str, headers: httpx.Headers, body: bytes) -> bool:
    """A Standard Webhooks receiver's check, written from the specification."""
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        part.split(",", 1) == ["v1", expected] for part in headers["webhook-signature"].split()
    )


def test_the_secret_is_answered_once_at_create(project: Project) -> None:
    _, sub = _subscription(project)
    secret = sub["secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    shown = project.call("GET", f"/subscriptions/{sub['id']}").body
    listed = project.call("GET", "/subscriptions").body["subscriptions"]
    assert "secret" not in shown and all("secret" not in s for s in listed)
    assert secret[6:] not in json.dumps([shown, listed])


def test_the_stored_subscription_holds_no_clear_secret(project: Project) -> None:
    _, sub = _subscription(project)
    raw = boto3.client("dynamodb", region_name="us-east-1").scan(
        TableName=ENV["EZGH_REGISTRY_TABLE"]
    )
    dump = json.dumps(raw["Items"])
    assert sub["secret"] not in dump and sub["secret"][6:] not in dump


def test_a_delivery_is_signed_as_standard_webhooks(
    project: Project, sent: list[httpx.Request]
) -> None:
    queue, sub = _subscription(project)
    assert deliver.deliver_record(_record(queue)) is True
    (request,) = sent
    assert request.url.host == "93.184.215.14"  # pinned to the checked address
    assert request.headers["host"] == "hooks.example.com"
    assert request.headers["webhook-id"] == "msg-0001"
    assert abs(int(request.headers["webhook-timestamp"]) - clock.wall_seconds()) <= 5
    assert request.headers["webhook-signature"].startswith("v1,")
    assert _verify(sub["secret"], request.headers, request.content)
    assert json.loads(request.content)["body"] == '{"order": 7}'


def test_a_signature_does_not_verify_with_another_subscriptions_secret(
    project: Project, other_project: Project, sent: list[httpx.Request]
) -> None:
    queue, _ = _subscription(project)
    _, other = _subscription(other_project)
    deliver.deliver_record(_record(queue))
    assert not _verify(other["secret"], sent[0].headers, sent[0].content)
    tampered = sent[0].content.replace(b"7", b"8")
    assert not _verify(_subscription_secret(project), sent[0].headers, tampered)


def _subscription_secret(project: Project) -> str:
    sub = queues_store.list_subscriptions(project.project_id)[0]
    from ezgh_engine.service.subscriptions import signing_secret

    secret = signing_secret(sub)
    assert secret is not None
    return secret


def test_a_failed_delivery_shows_no_path_or_query(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        push, "network_transport", lambda: httpx.MockTransport(lambda r: httpx.Response(500))
    )
    queue, sub = _subscription(project)
    monkeypatch.setattr(deliver, "_backoff", lambda record, queue: None)
    assert deliver.deliver_record(_record(queue)) is False
    status = project.call("GET", f"/subscriptions/{sub['id']}").body["status"]
    assert "500" in status and "hooks.example.com" in status
    assert "tok_s3cr3t" not in status and "abc123" not in status


def test_only_keys_that_may_manage_it_see_the_target_url(project: Project) -> None:
    queue, sub = _subscription(project)
    manager = _key(project, {"action": "queues.subscriptions.create", "resource": queue["id"]})
    sender = _key(project, {"action": "queues.messages.send", "resource": queue["id"]})
    reader = _key(project, {"action": "queues.manage"})
    full = project.call("GET", f"/subscriptions/{sub['id']}", key=manager).body
    assert full["target"]["url"] == URL and "urlRedacted" not in full["target"]
    for key in (sender, reader):
        for answer in (
            project.call("GET", f"/subscriptions/{sub['id']}", key=key).body,
            project.call("GET", "/subscriptions", key=key).body["subscriptions"][0],
        ):
            assert answer["target"] == {
                "kind": "https",
                "url": "https://hooks.example.com",
                "urlRedacted": True,
                "keyId": full["target"]["keyId"],  # the key its deliveries act for
            }
    # A key with no grant on the queue sees neither the subscription nor its last failure.
    elsewhere = _key(project, {"action": "queues.subscriptions.create", "resource": "other"})
    assert project.call("GET", f"/subscriptions/{sub['id']}", key=elsewhere).status == 403
    assert project.call("GET", "/subscriptions", key=elsewhere).body["subscriptions"] == []
