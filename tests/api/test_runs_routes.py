"""Run routes: their paths, status codes, query validation and how they call `service.runs`.

The run logic is `service.runs` (tested with the engine); here it is replaced by a recorder,
except in the last test, which goes through the real service once.
"""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine.adapters import push
from ezgh_engine.core.models import Run
from ezgh_engine.service import runs, steps

from tests.api.steps_helpers import lease_token, stored_run

RUN = Run(
    id="11111111-1111-4111-8111-111111111111",
    org_id="o",
    project_id="p",
    app_id="a",
    workflow="onboarding",
    status="running",
    input={"user": 1},
    attempt=1,
    created_at="2026-10-13T18:00:00.000Z",
    started_at="2026-10-13T18:00:00.000Z",
    version=1,
)


@pytest.fixture
def recorder(monkeypatch) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def fake(name: str, result: Any):
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args[1:], kwargs))
            return result

        monkeypatch.setattr(runs, name, record)

    fake("start_run", (RUN, True))
    fake("get_run", RUN)
    fake("search_runs", ([RUN], "next-page"))
    fake("cancel_run", RUN)
    fake("retry_run", RUN)
    fake("delete_run", None)
    fake("list_events", ([{"type": "run.started"}], None))
    fake("get_payload", {"big": True})
    return calls


def test_run_routes_answer_their_status_codes(project, recorder):
    rid = RUN.id
    start = project.call(
        "POST",
        "/runs",
        body={
            "appId": "wfa_x",
            "workflow": "onboarding",
            "input": {"user": 1},
            "runKey": "signup-1",
        },
    )
    assert start.status == 201 and start.body == RUN.to_api()
    assert recorder[-1] == (
        "start_run",
        (),
        {
            "app_ref": "wfa_x",
            "workflow": "onboarding",
            "input": {"user": 1},
            "run_key": "signup-1",
            "timeout_seconds": None,
        },
    )
    assert project.call("GET", f"/runs/{rid}").body == RUN.to_api()
    assert project.call("POST", f"/runs/{rid}/cancel").status == 202
    assert project.call("POST", f"/runs/{rid}/retry").status == 200
    deleted = project.call("DELETE", f"/runs/{rid}")
    assert deleted.status == 204 and deleted.raw == ""
    events = project.call("GET", f"/runs/{rid}/events", query={"limit": "5", "cursor": "c"})
    assert events.body == {"events": [{"type": "run.started"}], "nextCursor": None}
    assert recorder[-1] == ("list_events", (rid,), {"limit": 5, "cursor": "c"})


def test_an_existing_run_for_a_run_key_answers_200(project, recorder, monkeypatch):
    monkeypatch.setattr(runs, "start_run", lambda *a, **k: (RUN, False))
    answer = project.call(
        "POST", "/runs", body={"appId": "a", "workflow": "onboarding", "runKey": "k"}
    )
    assert answer.status == 200


@pytest.mark.parametrize(
    ("subpath", "expected"),
    [
        ("output", "output"),
        ("steps/load-user%231/output", "steps/load-user%231/output"),
        ("steps/charge.v2/output", "steps/charge.v2/output"),
    ],
)
def test_payload_paths_may_hold_slashes_and_escapes(project, recorder, subpath, expected):
    answer = project.call("GET", f"/runs/{RUN.id}/payloads/{subpath}")
    assert answer.status == 200 and answer.body == {"big": True}
    assert recorder[-1] == ("get_payload", (RUN.id, expected), {})


def test_search_passes_filters_and_answers_runs_without_steps(project, recorder):
    answer = project.call(
        "GET",
        "/runs",
        query={
            "appId": "wfa_x",
            "workflow": "onboarding",
            "status": "timedOut",
            "runKey": "k",
            "createdAfter": "2026-10-13T18:00:00Z",
            "limit": "100",
        },
    )
    assert answer.status == 200
    assert answer.body == {"runs": [RUN.to_api(with_steps=False)], "nextCursor": "next-page"}
    assert "steps" not in answer.body["runs"][0]
    assert recorder[-1][2] == {
        "app_ref": "wfa_x",
        "workflow": "onboarding",
        "status": "timedOut",
        "run_key": "k",
        "created_after": "2026-10-13T18:00:00.000Z",
        "created_before": None,
        "limit": 100,
        "cursor": None,
    }
    assert project.call("GET", "/runs").status == 200
    assert recorder[-1][2]["limit"] == 20


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"status": "done"}, "status"),
        ({"createdAfter": "yesterday"}, "createdAfter"),
        ({"createdBefore": "2026-13-45"}, "createdBefore"),
    ],
)
def test_search_refuses_bad_queries(project, recorder, query, field):
    answer = project.call("GET", "/runs", query=query)
    assert answer.status == 400
    assert answer.body["error"]["message"].startswith(field)
    assert not recorder


def test_run_routes_need_a_key_of_the_project(project, other_project, recorder, api):
    assert api("GET", f"{project.prefix}/runs/{RUN.id}").status == 401
    assert other_project.call("GET", f"/runs/{RUN.id}", key=project.api_key).status == 404
    assert not recorder


def test_step_calls_take_the_invocation_token(api, monkeypatch):
    seen = []
    monkeypatch.setattr(
        steps, "apply_ops", lambda token, body: seen.append((token, body)) or {"results": []}
    )
    body = {"deploymentId": None, "ops": []}
    token = lease_token(stored_run())
    answer = api(
        "POST", "/v1/invocations/steps", body=body, headers={"authorization": f"Bearer {token}"}
    )
    assert answer.status == 200 and answer.body == {"results": []}
    assert seen == [(token, body)]
    missing = api("POST", "/v1/invocations/steps", body=body)
    assert missing.status == 401 and missing.body["error"]["code"] == "unauthorized"
    forged = api(
        "POST", "/v1/invocations/steps", body=body, headers={"authorization": "Bearer tok-1"}
    )
    assert forged.status == 401 and seen == [(token, body)]  # refused before the route


def test_start_run_through_the_real_service(project, monkeypatch):
    app = project.call(
        "POST", "/apps", body={"name": "billing", "kind": "push", "url": "https://app.example.com/"}
    ).body
    not_synced = project.call(
        "POST", "/runs", body={"appId": app["slug"], "workflow": "onboarding"}
    )
    assert not_synced.status == 409 and not_synced.body["error"]["code"] == "app_not_synced"
    monkeypatch.setattr(push, "sync_app", lambda _app: push.Synced(["onboarding"], "1.5"))
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200
    body = {
        "appId": app["slug"],
        "workflow": "onboarding",
        "input": {"user": 7},
        "runKey": "signup-7",
    }
    first = project.call("POST", "/runs", body=body)
    assert first.status == 201 and first.body["status"] == "running"
    assert first.body["appId"] == app["id"]
    again = project.call("POST", "/runs", body=body)
    assert again.status == 200 and again.body["id"] == first.body["id"]
    conflict = project.call("POST", "/runs", body={**body, "input": {"user": 8}})
    assert conflict.status == 409 and conflict.body["error"]["code"] == "run_key_conflict"
    assert project.call("GET", f"/runs/{first.body['id']}").body["id"] == first.body["id"]
