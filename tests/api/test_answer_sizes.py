"""No API answer passes Lambda's 6 MB (the contract: large values are given as references).

Each get and list is filled to its maximum where that is within a test's reach, and the
Lambda answer (the JSON document Lambda returns, its body one JSON string) is measured
against 6 MB. Before, GetRun of 110 steps of 60 KB answered 6.6 MB, SearchRuns `limit=100`
over runs with 60 KB inputs 7.2 MB, `GET /schedules` 6.47 MB: a 5xx when deployed. The
lists too long for a test to fill (queues, subscriptions, flows, commits) are shown paging
by size under a smaller budget; the mechanics are the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ezgh_engine import config
from ezgh_engine.core import answers
from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES

from tests.api.conftest import LambdaContext, Project, make_event
from tests.api.steps_helpers import lease_token, steps_call, stored_run

KB60 = 60_000


@pytest.fixture(autouse=True)
def _local_sources(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Subscriptions' mappings recorded in-process (nothing polls)."""
    from ezgh_engine.adapters import event_sources

    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


def _get(project: Project, subpath: str, **query: str) -> tuple[int, Any, int]:
    """GET through the API handler: (status, body, the Lambda answer's size)."""
    from functions.api.handler import handler

    event = make_event("GET", project.prefix + subpath, headers=project.auth(), query=query)
    answer = handler(event, LambdaContext())
    size = len(json.dumps(answer, ensure_ascii=False).encode())
    return answer["statusCode"], json.loads(answer["body"]), size


def _steps(run_id: str, project_id: str, count: int, value: Callable[[int], Any]) -> None:
    """`count` steps of the run, each ended with `value(i)`, through the steps function."""
    from tests.api.steps_helpers import new_run  # noqa: F401  (the run exists already)

    token = lease_token(_run(run_id, project_id))
    starts = [
        {"op": "start", "stepId": f"s{i:03d}#1", "name": f"s{i:03d}", "kind": "run", "attempt": 1}
        for i in range(count)
    ]
    for at in range(0, count, 25):
        assert steps_call(token, starts[at : at + 25])[0] == 200
    ends = [{"op": "complete", "stepId": f"s{i:03d}#1", "output": value(i)} for i in range(count)]
    for at in range(0, count, 20):
        status, body, _ = steps_call(token, ends[at : at + 20])
        assert status == 200, body


def _run(run_id: str, project_id: str) -> Any:
    from ezgh_engine.adapters import runs_store

    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None and run.project_id == project_id
    return run


def _payload(project: Project, run_id: str, ref: str) -> Any:
    answer = project.call("GET", f"/runs/{run_id}/payloads/{ref}")
    assert answer.status == 200, answer.body
    return answer.body


def test_get_run_of_110_steps_of_60_kb_stays_within_6_mb(project: Project) -> None:
    run = stored_run(project_id=project.project_id, input={"n": 1})
    _steps(run.id, project.project_id, 110, lambda i: f"{i:03d}" + "v" * (KB60 - 3))
    status, body, size = _get(project, f"/runs/{run.id}")
    assert status == 200 and size <= LAMBDA_PAYLOAD_BYTES, size
    assert len(body["steps"]) == 110 and "nextStepsCursor" not in body
    inline = [s for s in body["steps"] if "output" in s]
    refs = [s for s in body["steps"] if "outputRef" in s]
    assert inline and refs and len(inline) + len(refs) == 110
    # In order: the first results inline, the rest as references read with GetPayload.
    assert body["steps"].index(refs[0]) == len(inline)
    last = refs[-1]
    assert _payload(project, run.id, last["outputRef"]).startswith("109vvv")
    assert body["input"] == {"n": 1}


def test_get_run_pages_its_steps_when_their_records_alone_do_not_fit(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = stored_run(project_id=project.project_id)
    _steps(run.id, project.project_id, 30, lambda i: i)
    monkeypatch.setattr(answers, "ANSWER_BYTES", 3000)
    seen: list[str] = []
    cursor: dict[str, str] = {}
    for _ in range(30):
        status, body, _ = _get(project, f"/runs/{run.id}", **cursor)
        assert status == 200, body
        assert body["id"] == run.id and body["steps"]
        seen += [s["id"] for s in body["steps"]]
        if "nextStepsCursor" not in body:
            break
        cursor = {"stepsCursor": body["nextStepsCursor"]}
    assert seen == [f"s{i:03d}#1" for i in range(30)]
    other = stored_run(project_id=project.project_id)
    first = _get(project, f"/runs/{run.id}")[1]["nextStepsCursor"]
    status, body, _ = _get(project, f"/runs/{other.id}", stepsCursor=first)
    assert status == 400 and body["error"]["code"] == "validation_error"


def test_search_runs_of_100_runs_with_60_kb_inputs_stays_within_6_mb(project: Project) -> None:
    made = [
        stored_run(project_id=project.project_id, input=f"{i:03d}" + "i" * (KB60 - 3))
        for i in range(100)
    ]
    status, body, size = _get(project, "/runs", limit="100")
    assert status == 200 and size <= LAMBDA_PAYLOAD_BYTES, size
    assert {r["id"] for r in body["runs"]} == {r.id for r in made}
    refs = [r for r in body["runs"] if "inputRef" in r]
    assert refs and all("input" in r for r in body["runs"] if r not in refs)
    assert _payload(project, refs[0]["id"], refs[0]["inputRef"]).endswith("iii")


def test_search_runs_reads_no_payload_and_gives_an_input_kept_in_s3_as_a_reference(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ezgh_engine.adapters import payloads

    monkeypatch.setattr(push_module(), "sync_app", _synced("big"))
    app = project.call("POST", "/apps", body={"name": "big", "kind": "push"}).body
    project.call("PATCH", f"/apps/{app['id']}", body={"url": "https://a.example.com/"})
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200
    started = project.call(
        "POST", "/runs", body={"appId": app["id"], "workflow": "big", "input": "b" * 900_000}
    )
    assert started.status == 201, started.body
    monkeypatch.setattr(payloads, "get", _no_read)
    status, body, _ = _get(project, "/runs")
    assert status == 200
    assert body["runs"][0]["inputRef"] == "input" and "input" not in body["runs"][0]


def push_module() -> Any:
    from ezgh_engine.adapters import push

    return push


def _synced(*names: str) -> Callable[[Any], Any]:
    push = push_module()
    return lambda app: push.Synced(list(names), "1.5")


def _no_read(*args: Any) -> Any:
    raise AssertionError("a list must read no payload")


@pytest.fixture
def scheduler(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
    )
    monkeypatch.setenv("EZGH_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    config.reset_settings()


def _all_pages(project: Project, subpath: str, name: str) -> list[dict[str, Any]]:
    """Every item of a list, page by page; each page within 6 MB."""
    found: list[dict[str, Any]] = []
    query: dict[str, str] = {}
    for _ in range(100):
        status, body, size = _get(project, subpath, **query)
        assert status == 200 and size <= LAMBDA_PAYLOAD_BYTES, (status, size)
        found += body[name]
        if not body.get("nextCursor"):
            return found
        query = {"cursor": body["nextCursor"]}
    raise AssertionError("the list did not end")


def _pull_app(project: Project, name: str, workflows: list[str]) -> Any:
    app = project.call("POST", "/apps", body={"name": name, "kind": "pull"}).body
    body = {"workerId": "w", "workflows": workflows}
    assert project.call("POST", f"/apps/{app['id']}/workers", body=body).status == 200
    return app


def test_list_schedules_of_380_kib_inputs_pages_within_6_mb(
    project: Project, scheduler: None
) -> None:
    app = _pull_app(project, "jobs", ["nightly"])
    made = []
    for i in range(20):  # 7.6 MB of inputs, each the most a schedule keeps
        body = {"appId": app["id"], "workflow": "nightly", "cron": "0 3 * * *"}
        answer = project.call("POST", "/schedules", body={**body, "input": f"{i:02d}" * 194_000})
        assert answer.status == 201, answer.body
        made.append(answer.body["id"])
    listed = _all_pages(project, "/schedules", "schedules")
    assert [s["id"] for s in listed] == made  # oldest first, each once
    first = _get(project, "/schedules")[1]
    assert first["nextCursor"] and len(first["schedules"]) < 20


def test_list_apps_of_a_thousand_workflows_each_pages_within_6_mb(project: Project) -> None:
    names = [f"workflow-{i:04d}-" + "w" * 48 for i in range(1000)]  # 64 characters each
    made = sorted(_pull_app(project, f"app-{i:03d}", names)["name"] for i in range(100))
    listed = _all_pages(project, "/apps", "apps")
    assert [a["name"] for a in listed] == made
    assert all(len(a["workflows"]) == 1000 for a in listed)


def test_list_api_keys_of_a_hundred_long_permissions_each_pages_within_6_mb(
    project: Project,
) -> None:
    perms = [
        {"action": "workflows.runs.read", "resource": f"{i:03d}" + "r" * 253} for i in range(100)
    ]
    made = []
    for i in range(220):  # 30 KB each: 6.6 MB in all
        answer = project.call("POST", "/apiKeys", body={"name": f"k{i}", "permissions": perms})
        assert answer.status == 201, answer.body
        made.append(answer.body["id"])
    listed = _all_pages(project, "/apiKeys", "apiKeys")
    assert set(made) <= {k["id"] for k in listed} and len(listed) == len({k["id"] for k in listed})


@pytest.mark.parametrize(
    ("subpath", "name"),
    [("/queues", "queues"), ("/subscriptions", "subscriptions"), ("/flows", "flows")],
)
def test_the_other_whole_lists_page_by_size(
    project: Project, monkeypatch: pytest.MonkeyPatch, subpath: str, name: str
) -> None:
    made = []
    for i in range(12):
        queue = project.call("POST", "/queues", body={"name": f"q{i:02d}"}).body
        if name == "queues":
            made.append(queue["id"])
        elif name == "subscriptions":
            target = {"kind": "https", "url": f"https://hooks{i}.example.com/"}
            sub = project.call(
                "POST", "/subscriptions", body={"queueId": queue["id"], "target": target}
            )
            assert sub.status == 201, sub.body
            made.append(sub.body["id"])
        else:
            flow = project.call(
                "POST", "/flows", body={"name": f"f{i:02d}", "description": "d" * 1500}
            )
            made.append(flow.body["id"])
    monkeypatch.setattr(answers, "ANSWER_BYTES", 2500)
    listed = _all_pages(project, subpath, name)
    assert [item["id"] for item in listed] == made
    assert _get(project, subpath)[1]["nextCursor"]


def test_a_store_paged_list_asks_again_for_fewer_when_its_page_does_not_fit(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = project.call("POST", "/flows", body={"name": "many"}).body
    for i in range(6):
        note = {"id": "note", "moduleType": "comment", "config": {"text": f"{i}" * 2000}}
        graph = {"nodes": [{"id": "start", "moduleType": "trigger.manual"}, note], "edges": []}
        made = project.call("POST", f"/flows/{flow['id']}/commits", body={"graph": graph})
        assert made.status == 201, made.body
    monkeypatch.setattr(answers, "ANSWER_BYTES", 6000)
    listed = _all_pages(project, f"/flows/{flow['id']}/commits", "commits")
    assert len(listed) == 6 and len({c["id"] for c in listed}) == 6
    first = _get(project, f"/flows/{flow['id']}/commits", limit="100")[1]
    assert len(first["commits"]) < 6 and first["nextCursor"]
