"""An app's reach: a resume subscription resumes its own app's workflow only, and an app's code
starts another app's workflow only where the key it acts for may (docs/architecture.md, "API
key permissions").

Runs suspend through `outcomes.apply`, as an invocation's answer does; messages arrive through
the deliver function's handler, as SQS hands them over.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from ezgh_engine import clock, ids
from ezgh_engine.adapters import event_sources, registry_store, runs_store
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.protocol import outcomes as rules
from ezgh_engine.service import deliver, launches, outcomes

from tests.api.conftest import Project
from tests.api.test_run_scopes import key, pull_app, start


@pytest.fixture(autouse=True)
def _local_sources(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    monkeypatch.setattr(deliver, "_backoff", lambda record, queue: None)  # no real receipt
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


def suspend(run_id: str, *waits: rules.Wait) -> None:
    """The run's invocation answers `suspended` on `waits`, as an app's would; then the
    outbox makes what the suspend started, as it does once it sees the commit."""
    leased = inv.take_lease(run_id, 1, now_ms=clock.now_ms(), lease_ms=600_000)
    assert leased is not None
    full = runs_store.get_run(run_id)
    assert full is not None
    outcomes.apply(
        replace(full, epoch=leased.epoch),
        1,
        rules.Outcome("suspended", waits=waits),
        invocation_id=ids.time_ordered_id(),
        started_at=clock.iso(clock.now()),
    )
    committed = runs_store.get_run(run_id)
    assert committed is not None
    launch = launches.missing(committed)
    if launch is not None:
        launches.launch(run_id, launch[0])


def step(run_id: str, step_id: str) -> Any:
    run = runs_store.get_run(run_id)
    assert run is not None
    (found,) = [s for s in run.steps if s.id == step_id]
    return found


# --- a resume subscription resumes its own app's workflow --------------------------------------


def _wait_for(run_id: str, queue_id: str, key: str = "order:1") -> None:
    wait = rules.Wait(step_id="paid#1", name="paid", kind="message", queue_id=queue_id, key=key)
    suspend(run_id, wait)
    assert step(run_id, "paid#1").status == "waiting"


def _resume_subscription(project: Project, queue_id: str, app: dict[str, Any]) -> str:
    target = {"kind": "workflow", "mode": "resume", "appId": app["id"], "workflow": "order",
              "correlationAttribute": "orderKey"}  # fmt: skip
    made = project.call("POST", "/subscriptions", body={"queueId": queue_id, "target": target})
    assert made.status == 201, made.body
    return str(made.body["id"])


def _record(queue_id: str, message_id: str, order_key: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "body": '{"amount": "19.99"}',
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1790000000000"},
        "messageAttributes": {"orderKey": {"stringValue": order_key, "dataType": "String"}},
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:ezgh-q-{queue_id}",
    }


def test_a_resume_subscription_resumes_only_its_own_apps_workflow(project: Project) -> None:
    """Two apps (and two workflows of one app) wait on one queue and key: the subscription
    for alpha's `order` resumes alpha's `order` runs; beta's, and alpha's `refund`, wait on."""
    alpha, beta = (
        pull_app(project, "alpha", ["order", "refund"]),
        pull_app(project, "beta", ["order"]),
    )
    queue = project.call("POST", "/queues", body={"name": "payments"}).body["id"]
    mine = [start(project, alpha, "order", {"n": n}) for n in range(2)]
    refund = start(project, alpha, "refund")
    theirs = start(project, beta, "order")
    for run_id in (*mine, refund, theirs):
        _wait_for(run_id, queue)
    sub = _resume_subscription(project, queue, alpha)
    assert deliver.deliver_record(_record(queue, "m-1", "order:1")) is True
    for run_id in mine:
        paid = step(run_id, "paid#1")
        assert paid.status == "completed" and paid.output["messageId"] == "m-1"
    assert step(refund, "paid#1").status == "waiting"
    assert step(theirs, "paid#1").status == "waiting"
    # A message only beta's run waits for is no message for this subscription: retried.
    assert deliver.deliver_record(_record(queue, "m-2", "order:1")) is False
    status = project.call("GET", f"/subscriptions/{sub}").body["status"]
    assert status == "No run to resume (message)"
    assert step(theirs, "paid#1").status == "waiting"


def test_a_waiter_recorded_before_waiters_named_their_app_is_judged_by_its_run(
    project: Project,
) -> None:
    alpha, beta = pull_app(project, "alpha", ["order"]), pull_app(project, "beta", ["order"])
    queue = project.call("POST", "/queues", body={"name": "payments"}).body["id"]
    theirs, mine = start(project, beta, "order"), start(project, alpha, "order")
    for run_id in (theirs, mine):
        _wait_for(run_id, queue)
    for waiter in ws.query_pk(ws.msgwait_pk(project.project_id, queue, "order:1")):
        old = {k: v for k, v in waiter.items() if k not in ("appId", "workflow")}
        assert ws.transact([ws.plain_put(old, only_new=False)])  # as an older engine wrote it
    _resume_subscription(project, queue, alpha)
    assert deliver.deliver_record(_record(queue, "m-1", "order:1")) is True
    assert step(mine, "paid#1").status == "completed"
    assert step(theirs, "paid#1").status == "waiting"


# --- an app's code starts another app's workflow only with a grant ------------------------------


def _invoke(run_id: str, app: str = "beta", workflow: str = "other") -> Any:
    """The run's code invokes `app`'s `workflow`; answers the invoke step."""
    wait = rules.Wait(step_id="call#1", name="call", kind="invoke", workflow=workflow,
                      input={"x": 1}, app=app)  # fmt: skip
    suspend(run_id, wait)
    return step(run_id, "call#1")


def _children(run_id: str) -> list[str]:
    from ezgh_engine.service.waits import child_run_id

    parent = runs_store.get_run(run_id, with_steps=False)
    assert parent is not None
    child = runs_store.get_run(child_run_id(parent, "call#1"), with_steps=False)
    return [] if child is None else [child.app_id]


def _announce(project: Project, app: dict[str, Any], secret: str) -> None:
    answer = project.call("POST", f"/apps/{app['id']}/workers", key=secret,
                          body={"workerId": "w", "workflows": ["a"]})  # fmt: skip
    assert answer.status == 200, answer.body


def _refused(invoke_step: Any, run_id: str, why: str) -> None:
    assert invoke_step.status == "failed", invoke_step
    assert invoke_step.error.code == "workflows.forbidden", invoke_step.error
    assert (
        invoke_step.error.message.startswith("403 forbidden") and why in invoke_step.error.message
    )
    assert _children(run_id) == []


def test_an_app_starts_another_apps_workflow_only_where_its_key_may(project: Project) -> None:
    alpha, beta = pull_app(project, "alpha", ["a"]), pull_app(project, "beta", ["other"])
    # Registered and announced by the admin key: alpha's code acts for it.
    allowed = start(project, alpha, "a")
    assert _invoke(allowed).status == "waiting" and _children(allowed) == [beta["id"]]
    # A worker of a key that may update alpha but start nothing of beta's announces: alpha's
    # code now acts for that key, and may not start beta/other.
    worker = key(project, ("workflows.apps.update", "alpha"))
    _announce(project, alpha, worker)
    refused = start(project, alpha, "a")
    _refused(_invoke(refused), refused, "may not workflows.runs.start on beta/other")
    # Its own app's workflows are its own code's business.
    own = start(project, alpha, "a")
    assert _invoke(own, app="alpha", workflow="a").status == "waiting"
    assert _children(own) == [alpha["id"]]
    # A worker whose key may start beta/other: allowed; revoked, refused at once.
    starter = project.call("POST", "/apiKeys", body={"name": "deploy", "permissions": [
        {"action": "workflows.apps.update", "resource": "alpha"},
        {"action": "workflows.runs.start", "resource": "beta/other"}]}).body  # fmt: skip
    _announce(project, alpha, starter["key"])
    again = start(project, alpha, "a")
    assert _invoke(again).status == "waiting" and _children(again) == [beta["id"]]
    assert project.call("DELETE", f"/apiKeys/{starter['id']}").status == 204
    late = start(project, alpha, "a")
    _refused(_invoke(late), late, "is revoked")


def test_an_apps_url_set_by_a_key_makes_its_code_act_for_that_key(project: Project) -> None:
    pull_app(project, "beta", ["other"])
    made = project.call("POST", "/apps", body={"name": "pusher", "kind": "push"}).body
    app = registry_store.get_app(project.project_id, made["id"])
    assert app is not None and app.key_id is not None  # the admin's, who made it
    mover = project.call("POST", "/apiKeys", body={"name": "mover", "permissions": [
        {"action": "workflows.apps.update", "resource": "pusher"}]}).body  # fmt: skip
    patched = project.call("PATCH", f"/apps/{made['id']}", key=mover["key"],
                           body={"url": "https://app.example.com/"})  # fmt: skip
    assert patched.status == 200, patched.body
    moved = registry_store.get_app(project.project_id, made["id"])
    assert moved is not None and moved.key_id == mover["id"]
    registry_store.update_app_after_sync(moved, ["a"])  # (its sync, without the network)
    run_id = start(project, registry_store.get_app(project.project_id, made["id"]).to_api(), "a")
    _refused(_invoke(run_id), run_id, "may not workflows.runs.start on beta/other")


def test_an_app_that_records_no_key_starts_no_other_apps_workflow(project: Project) -> None:
    alpha, _ = pull_app(project, "alpha", ["a"]), pull_app(project, "beta", ["other"])
    stored = registry_store.get_app(project.project_id, alpha["id"])
    assert stored is not None
    registry_store.save_app(replace(stored, key_id=None))  # registered by an older engine
    run_id = start(project, alpha, "a")
    _refused(_invoke(run_id), run_id, "records no API key")
    _announce(project, alpha, project.api_key)  # a worker announces: its key is recorded
    again = start(project, alpha, "a")
    assert _invoke(again).status == "waiting"
