"""Lists answer only what the key may read: what a narrow key once learnt from them.

A key scoped to one app's workflow, or to one queue, listed every app (with URLs and their
query strings), every queue, every subscription (with the last failure's message ID of other
queues) and every API key (names and permissions). Now each list answers the resources its
grants name, and a read of another is refused (the authorization matrix holds every list and
read to the same rule).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import event_sources, queues_store

from tests.api.conftest import Project
from tests.api.test_run_scopes import key, pull_app

SECRET_URL = "https://hooks.example.com/in?token=tok_s3cr3t"


@pytest.fixture(autouse=True)
def _local_sources(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


def _names(project: Project, secret: str, path: str, field: str) -> list[str]:
    answer = project.call("GET", path, key=secret)
    assert answer.status == 200, answer.body
    return sorted(str(item.get("name", item.get("id"))) for item in answer.body[field])


def test_a_key_scoped_to_one_workflow_sees_that_app_only(project: Project) -> None:
    pull_app(project, "alpha", ["a"])
    other = project.call("POST", "/apps", body={"name": "beta", "kind": "push",
                                                "url": SECRET_URL.replace("hooks", "app")})  # fmt: skip
    assert other.status == 201, other.body
    runner = key(project, ("workflows.runs.start", "alpha/a"))
    listed = project.call("GET", "/apps", key=runner)
    assert [a["name"] for a in listed.body["apps"]] == ["alpha"]
    assert "tok_s3cr3t" not in listed.raw and other.body["id"] not in listed.raw
    refused = project.call("GET", "/apps/beta", key=runner)
    assert refused.status == 403 and "tok_s3cr3t" not in refused.raw
    assert project.call("GET", "/apps/alpha", key=runner).status == 200
    # A key on every workflow, or on the app itself, sees it; a queue's key sees no app.
    assert _names(project, key(project, ("workflows.runs.read", None)), "/apps", "apps") == [
        "alpha", "beta"]  # fmt: skip
    assert _names(project, key(project, ("workflows.apps.update", "beta")), "/apps", "apps") == [
        "beta"]  # fmt: skip
    assert _names(project, key(project, ("queues.manage", None)), "/apps", "apps") == []


def test_a_key_scoped_to_one_queue_sees_that_queue_and_its_subscription_only(
    project: Project,
) -> None:
    mine = project.call("POST", "/queues", body={"name": "mine"}).body["id"]
    theirs = project.call("POST", "/queues", body={"name": "theirs"}).body["id"]
    subs = {}
    for queue in (mine, theirs):
        made = project.call("POST", "/subscriptions", body={
            "queueId": queue, "target": {"kind": "https", "url": SECRET_URL}})  # fmt: skip
        subs[queue] = made.body["id"]
    at = clock.iso(clock.now())
    failing = queues_store.get_subscription(project.project_id, subs[theirs])
    assert failing is not None
    queues_store.record_failure(failing, "POST https://hooks.example.com answered 503",
                                "their-message-0001", at)  # fmt: skip
    sender = key(project, ("queues.messages.send", mine))
    assert _names(project, sender, "/queues", "queues") == ["mine"]
    listed = project.call("GET", "/subscriptions", key=sender)
    assert [s["id"] for s in listed.body["subscriptions"]] == [subs[mine]]
    assert "their-message-0001" not in listed.raw and theirs not in listed.raw
    assert "tok_s3cr3t" not in listed.raw  # (and its own target's URL, it may not manage)
    assert project.call("GET", f"/subscriptions/{subs[theirs]}", key=sender).status == 403
    assert project.call("GET", f"/queues/{theirs}", key=sender).status == 403
    filtered = project.call("GET", "/subscriptions", key=sender, query={"queueId": theirs})
    assert filtered.status == 200 and filtered.body["subscriptions"] == []
    # The subscription's manager sees its last failure; the admin sees both queues.
    manager = key(project, ("queues.subscriptions.create", theirs))
    got = project.call("GET", f"/subscriptions/{subs[theirs]}", key=manager).body
    assert got["lastFailure"]["messageId"] == "their-message-0001"
    assert _names(project, project.api_key, "/queues", "queues") == ["mine", "theirs"]


def test_a_narrow_key_lists_no_other_key(project: Project) -> None:
    runner = key(project, ("workflows.runs.start", "alpha/a"))
    key(project, ("queues.manage", None))
    key(project, ("workflows.runs.start", "beta/b"))
    listed = project.call("GET", "/apiKeys", key=runner).body["apiKeys"]
    assert [k["permissions"] for k in listed] == [
        [{"action": "workflows.runs.start", "resource": "alpha/a"}]
    ]
    assert len(project.call("GET", "/apiKeys", query={"limit": "100"}).body["apiKeys"]) == 4
