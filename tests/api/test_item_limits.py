"""Every write that could pass DynamoDB's 400 KB per item is refused first, naming its field,
and nothing is written: before, each was a 500 `internal_error` from the write (or, for a
step's error, a step call refused until the run failed). Each is tried at 401 KB."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine import config
from ezgh_engine.adapters import push

from tests.api.conftest import Project

KB401 = 401 * 1024


@pytest.fixture(autouse=True)
def _local_sources(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Subscriptions' mappings recorded in-process (nothing polls)."""
    from ezgh_engine.adapters import event_sources

    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


@pytest.fixture(autouse=True)
def _scheduler_target(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
    )
    monkeypatch.setenv("EZGH_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    config.reset_settings()


def _pull_app(project: Project, name: str = "jobs", workflows: list[str] | None = None) -> Any:
    app = project.call("POST", "/apps", body={"name": name, "kind": "pull"}).body
    body = {"workerId": "w1", "workflows": workflows or ["nightly"]}
    assert project.call("POST", f"/apps/{app['id']}/workers", body=body).status == 200
    return app


def _refused(answer: Any, field: str) -> None:
    assert answer.status in (400, 413), (answer.status, answer.body)
    code = "validation_error" if answer.status == 400 else "payload_too_large"
    assert answer.body["error"]["code"] == code
    assert answer.body["error"]["message"].startswith(field), answer.body


def test_a_schedule_input_of_401_kb_is_refused_on_create_and_on_patch(project: Project) -> None:
    app = _pull_app(project)
    body = {"appId": app["id"], "workflow": "nightly", "cron": "0 3 * * *"}
    _refused(project.call("POST", "/schedules", body={**body, "input": "x" * KB401}), "input")
    assert project.call("GET", "/schedules").body["schedules"] == []
    made = project.call("POST", "/schedules", body={**body, "input": {"small": True}}).body
    patched = project.call("PATCH", f"/schedules/{made['id']}", body={"input": "x" * KB401})
    _refused(patched, "input")
    assert project.call("GET", f"/schedules/{made['id']}").body["input"] == {"small": True}
    # What a schedule keeps whole still fits: 380 KiB.
    fits = project.call("PATCH", f"/schedules/{made['id']}", body={"input": "y" * 380 * 1024})
    assert fits.status == 200, fits.body


def _syncing(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> None:
    """The push app answers its sync with `names` (its answer, as the engine reads it)."""

    def answer(app: Any, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert body["type"] == "sync"
        return {"protocol": "1.5", "workflows": [{"name": n} for n in names]}

    monkeypatch.setattr(push, "_post", answer)


@pytest.mark.parametrize(
    "names",
    [
        [f"workflow-{i:05d}-{'x' * 8}" for i in range(20_000)],  # 20,000 names: 480 KB
        [f"w{i}" for i in range(1001)],  # one over the cap
        ["fine", "not a name"],
    ],
    ids=["20000-names", "1001-names", "bad-name"],
)
def test_a_push_apps_sync_is_held_to_a_pull_apps_rules(
    project: Project, monkeypatch: pytest.MonkeyPatch, names: list[str]
) -> None:
    app = project.call(
        "POST", "/apps", body={"name": "pushed", "kind": "push", "url": "https://a.example.com/"}
    ).body
    _syncing(monkeypatch, names)
    answer = project.call("POST", f"/apps/{app['id']}/sync")
    assert answer.status == 409 and answer.body["error"]["code"] == "app_not_synced"
    assert "workflows" in answer.body["error"]["message"]
    stored = project.call("GET", f"/apps/{app['id']}").body
    assert stored["status"] == "pending" and stored["workflows"] == []
    _syncing(monkeypatch, [f"w{i}" for i in range(1000)])  # the cap itself is fine
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200


def test_a_pull_apps_workers_together_host_at_most_a_thousand_workflows(project: Project) -> None:
    app = _pull_app(project, workflows=[f"a{i}" for i in range(600)])
    more = {"workerId": "w2", "workflows": [f"b{i}" for i in range(600)]}
    _refused(project.call("POST", f"/apps/{app['id']}/workers", body=more), "workflows")
    assert len(project.call("GET", f"/apps/{app['id']}").body["workflows"]) == 600


def test_an_apps_notification_workflows_of_401_kb_are_refused(project: Project) -> None:
    app = _pull_app(project)
    queue = project.call("POST", "/queues", body={"name": "results"}).body
    names = [f"n{i:07d}" for i in range(KB401 // 10)]
    body = {"notifications": {"queueId": queue["id"], "on": ["completed"], "workflows": names}}
    _refused(project.call("PATCH", f"/apps/{app['id']}", body=body), "notifications.workflows")
    assert project.call("GET", f"/apps/{app['id']}").body["notifications"] is None


def test_a_subscription_url_of_401_kb_is_refused(project: Project) -> None:
    queue = project.call("POST", "/queues", body={"name": "hooks"}).body
    url = "https://hooks.example.com/" + "p" * KB401
    body = {"queueId": queue["id"], "target": {"kind": "https", "url": url}}
    _refused(project.call("POST", "/subscriptions", body=body), "target.url")
    assert project.call("GET", "/subscriptions").body["subscriptions"] == []


def test_a_flow_commit_of_401_kb_is_refused(project: Project) -> None:
    """(Refused before too: a commit's graph is held to 300 KiB by the flows store.)"""
    flow = project.call("POST", "/flows", body={"name": "big"}).body
    node = {"id": "start", "moduleType": "trigger.manual"}
    note = {"id": "note", "moduleType": "comment", "config": {"text": "t" * KB401}}
    body = {"graph": {"nodes": [node, note], "edges": []}}
    answer = project.call("POST", f"/flows/{flow['id']}/commits", body=body)
    assert answer.status == 413 and "graph" in answer.body["error"]["message"]
    assert project.call("GET", f"/flows/{flow['id']}/commits").body["commits"] == []


def test_a_step_error_of_401_kb_is_kept_cut_not_refused() -> None:
    """An error's message is the app's text (an exception's): it is cut to 8 KiB where it is
    made (the SDK) and where it is received (the engine), never refused: a step call refused
    for it would fail the run for a long message."""
    from ezgh_engine.adapters import runs_store
    from ezgh_engine.core.protocol_rules import CUT_MARK, MAX_ERROR_MESSAGE_BYTES

    from tests.api.steps_helpers import lease_token, steps_call, stored_run

    run = stored_run()
    token = lease_token(run)
    start = {"op": "start", "stepId": "a#1", "name": "a", "kind": "run", "attempt": 1}
    assert steps_call(token, [start])[0] == 200
    error = {"code": "user", "name": "Huge" * 100, "message": "m" * KB401}
    status, body, _ = steps_call(token, [{"op": "fail", "stepId": "a#1", "error": error}])
    assert status == 200, body
    stored = runs_store.get_run(run.id)
    assert stored is not None
    kept = stored.steps[0].error
    assert kept is not None and kept.message.endswith(CUT_MARK)
    assert len(kept.message.encode()) <= MAX_ERROR_MESSAGE_BYTES and len(kept.name) <= 256
