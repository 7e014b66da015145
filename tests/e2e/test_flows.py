"""Flows, commits and jobs end to end through the local runtime: the interpreter served as
the topology's `flows` function (the engine's own app, no project's), user-directed code in
its `sandbox` function."""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from ezgh_engine.core.flows.jobs import MAX_DEPTH
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.topology import INVOKER_FUNCTION

pytestmark = pytest.mark.e2e
ENDED = {"COMPLETED", "FAILED", "CANCELLED"}


@pytest.fixture(scope="module")
def interpreter(runtime: LocalRuntime) -> Iterator[None]:
    """The interpreter is the runtime's own `flows` function (the topology's), the engine's
    app in every project; nothing to serve or register here."""
    assert "flows" in runtime.url_servers
    yield


class Api:
    """Plain HTTP calls to the local engine's API; `call` answers (status, body)."""

    def __init__(self, engine: LocalRuntime, key: str | None = None) -> None:
        self.engine = engine
        self.http = httpx.Client(
            base_url=engine.api_prefix,
            headers={"Authorization": f"Bearer {key or engine.api_key}"},
            timeout=30,
        )

    def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        answer = self.http.request(method, path, **kwargs)
        return answer.status_code, (answer.json() if answer.content else None)

    def __call__(self, method: str, path: str, **kwargs: Any) -> Any:
        status, body = self.call(method, path, **kwargs)
        assert status < 300, (status, body)
        return body

    def flow(self, name: str, nodes: list[Any], edges: list[Any]) -> dict[str, Any]:
        flow = self("POST", "/flows", json={"name": name})
        self(
            "POST", f"/flows/{flow['id']}/commits", json={"graph": {"nodes": nodes, "edges": edges}}
        )
        return dict(flow)

    def start(self, flow: str, **body: Any) -> dict[str, Any]:
        return dict(self("POST", f"/flows/{flow}/jobs", json=body))

    def wait(self, job_id: str, until: Any = None, timeout: float = 30) -> dict[str, Any]:
        until = until or (lambda j: j["status"] in ENDED)
        found: dict[str, Any] = {}

        def check() -> bool:
            found.update(self("GET", f"/jobs/{job_id}"))
            return bool(until(found))

        self.engine.wait_for(check, timeout=timeout)
        return found


@pytest.fixture()
def api(interpreter: None, engine: LocalRuntime) -> Iterator[Api]:
    client = Api(engine)
    yield client
    client.http.close()


class Target:
    """A loopback HTTP server that counts requests per path; `/fail/<n>` answers 400 (or
    `status`) until `healed`, `/flaky` answers 500 for its first `flaky` calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.headers: list[dict[str, str]] = []
        self.healed = False
        self.status = 400
        self.flaky = 0
        target = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                sent = json.loads(self.rfile.read(length) or b"null")
                target.calls[self.path] += 1
                target.headers.append(dict(self.headers))
                status = 200
                if self.path.startswith("/fail") and not target.healed:
                    status = target.status
                if self.path == "/flaky" and target.calls[self.path] <= target.flaky:
                    status = 500
                body = json.dumps({"path": self.path, "got": sent}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def target() -> Iterator[Target]:
    server = Target()
    yield server
    server.server.shutdown()
    server.server.server_close()


def trigger(node_id: str = "start") -> dict[str, Any]:
    return {"id": node_id, "moduleType": "trigger.manual"}


def transform(node_id: str, expression: str) -> dict[str, Any]:
    return {"id": node_id, "moduleType": "transform", "config": {"expression": expression}}


def edge(source: str, target: str, **extra: Any) -> dict[str, Any]:
    return {"source": source, "target": target, **extra}


def by_node(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["nodeId"]: a for a in job["actions"]}


# --- flows and commits ---------------------------------------------------------------------


def test_the_interpreter_is_no_app_or_run_of_the_project(api: Api, engine: LocalRuntime) -> None:
    """The engine's interpreter has no app record and its runs are no project's runs: no
    app, run, schedule or subscription call names, reads, changes or starts it; an app a
    user names like it is just an app; its function URL answers only signed requests."""
    from ezgh_engine.core.flows.jobs import interpreter_app_id

    engine_id = interpreter_app_id(engine.project_id)
    api.flow("first", [trigger()], [])
    job = api.wait(api.start("first", input={"x": 1})["id"])
    assert job["status"] == "COMPLETED" and job["output"] == {"start": {"x": 1}}
    assert all(a["id"] != engine_id for a in api("GET", "/apps")["apps"])
    for ref in (engine_id, "ezgh-flows", "ezgh:flows"):
        for method, path, body in (
            ("GET", f"/apps/{ref}", None),
            ("PATCH", f"/apps/{ref}", {"url": "http://127.0.0.1:9/evil"}),
            ("POST", f"/apps/{ref}/sync", None),
            ("DELETE", f"/apps/{ref}", None),
            ("POST", "/runs", {"appId": ref, "workflow": "flow", "input": {"commitId": "x"}}),
            ("POST", "/schedules", {"appId": ref, "workflow": "flow", "cron": "* * * * *"}),
        ):
            status, answer = api.call(method, path, json=body)
            assert status == 404, (method, path, answer)
    for path in ("", "/events", "/payloads/input"):
        assert api.call("GET", f"/runs/{job['id']}{path}")[0] == 404
    for action in ("cancel", "retry"):
        assert api.call("POST", f"/runs/{job['id']}/{action}")[0] == 404
    assert api.call("DELETE", f"/runs/{job['id']}")[0] == 404
    assert job["id"] not in [r["id"] for r in api("GET", "/runs", params={"limit": 100})["runs"]]
    assert api("GET", "/runs", params={"appId": engine_id})["runs"] == []
    queue = api("POST", "/queues", json={"name": "hijack"})["id"]
    target = {"kind": "workflow", "mode": "resume", "appId": engine_id, "workflow": "flow",
              "correlationAttribute": "k"}  # fmt: skip
    assert api.call("POST", "/subscriptions", json={"queueId": queue, "target": target})[0] == 404
    # An app a user names like the interpreter is an app of the project like any other.
    made = api("POST", "/apps", json={"name": "ezgh-flows", "kind": "pull"})
    api("DELETE", f"/apps/{made['id']}")
    assert api.wait(api.start("first")["id"])["status"] == "COMPLETED"
    url = engine.url_servers["flows"].url
    for method in ("GET", "POST"):
        unsigned = httpx.request(method, url, json={"protocol": "1.4", "type": "sync"}, timeout=30)
        assert unsigned.status_code == 401, unsigned.text


def test_flows_crud_commits_and_module_types(api: Api) -> None:
    flow = api("POST", "/flows", json={"name": "orders", "description": "d"})
    assert flow["slug"].startswith("wff_") and flow["activeBranch"] == "main"
    assert api.call("POST", "/flows", json={"name": "orders"})[0] == 409
    for ref in (flow["id"], flow["slug"], "orders"):
        assert api("GET", f"/flows/{ref}")["id"] == flow["id"]
    graph = {"nodes": [trigger()], "edges": []}
    made = [
        api("POST", "/flows/orders/commits", json={"graph": graph, "message": f"c{i}"})
        for i in range(3)
    ]
    api("POST", "/flows/orders/commits", json={"graph": graph, "branch": "dev"})
    page = api("GET", "/flows/orders/commits", params={"branch": "main", "limit": 2})
    assert [c["message"] for c in page["commits"]] == ["c2", "c1"]
    rest = api(
        "GET", "/flows/orders/commits", params={"branch": "main", "cursor": page["nextCursor"]}
    )
    assert [c["id"] for c in rest["commits"]] == [made[0]["id"]] and rest["nextCursor"] is None
    assert api("PATCH", "/flows/orders", json={"activeBranch": "dev"})["activeBranch"] == "dev"
    types = {t["moduleType"]: t for t in api("GET", "/flows/moduleTypes")["moduleTypes"]}
    assert types["condition"]["outputs"] == ["true", "false"]
    assert types["http.request"]["configSchema"]["required"] == ["url"]
    assert len(types) == 10
    assert [f["name"] for f in api("GET", "/flows")["flows"]] == ["orders"]
    assert api.call("DELETE", "/flows/orders")[0] == 204
    assert api.call("GET", "/flows/orders")[0] == 404


def test_an_invalid_graph_is_refused_naming_the_node_or_edge(api: Api) -> None:
    api("POST", "/flows", json={"name": "bad"})
    cases = [
        ({"nodes": [trigger(), {"id": "x", "moduleType": "nope"}], "edges": []}, "node x"),
        (
            {"nodes": [trigger()], "edges": [{"id": "e9", "source": "start", "target": "ghost"}]},
            "edge e9",
        ),
        (
            {
                "nodes": [trigger(), transform("a", "in")],
                "edges": [
                    edge("start", "a"),
                    {"id": "back", "source": "a", "target": "a", "targetHandle": "loop"},
                ],
            },
            "cycle",
        ),
    ]
    for graph, fragment in cases:
        status, body = api.call("POST", "/flows/bad/commits", json={"graph": graph})
        assert status == 400 and body["error"]["code"] == "validation_error"
        assert fragment in body["error"]["message"]
    assert api("GET", "/flows/bad/commits")["commits"] == []


def test_the_flow_routes_are_in_the_openapi_document(engine: LocalRuntime) -> None:
    paths = httpx.get(f"{engine.api_url}/v1/openapi.json").json()["paths"]
    prefix = "/v1/organizations/{orgId}/projects/{projectId}"
    for path in (
        "/flows",
        "/flows/{flowId}",
        "/flows/{flowId}/commits",
        "/flows/moduleTypes",
        "/flows/{flowId}/jobs",
        "/jobs",
        "/jobs/{jobId}",
        "/jobs/{jobId}/cancel",
        "/failedItems",
        "/failedItems/{failedItemId}/retry",
    ):
        assert prefix + path in paths, path


def test_permissions_name_the_flow(api: Api, engine: LocalRuntime) -> None:
    api.flow("mine", [trigger()], [])
    api.flow("theirs", [trigger()], [])
    key = api(
        "POST",
        "/apiKeys",
        json={
            "name": "reader",
            "permissions": [
                {"action": "flows.jobs.read", "resource": "mine"},
                {"action": "flows.jobs.start", "resource": "mine"},
            ],
        },
    )["key"]
    limited = Api(engine, key)
    job = limited.start("mine")
    assert limited("GET", f"/jobs/{job['id']}")["flowId"] == api("GET", "/flows/mine")["id"]
    assert limited.call("POST", "/flows/theirs/jobs", json={})[0] == 403
    assert limited.call("POST", f"/jobs/{job['id']}/cancel")[0] == 403
    assert (
        limited.call("POST", "/flows/mine/commits", json={"graph": {"nodes": [trigger()]}})[0]
        == 403
    )
    other = api.start("theirs")
    assert limited.call("GET", f"/jobs/{other['id']}")[0] == 403
    assert [j["id"] for j in limited("GET", "/jobs")["jobs"]] == [job["id"]]
    api("DELETE", "/flows/theirs")  # a deleted flow's job: only for keys on every flow
    assert limited.call("GET", f"/jobs/{other['id']}")[0] == 403
    assert api("GET", f"/jobs/{other['id']}")["id"] == other["id"]


# --- jobs ----------------------------------------------------------------------------------


def test_a_diamond_joins_both_inputs_with_the_tracking_id_on_every_action(api: Api) -> None:
    api.flow(
        "diamond",
        [
            trigger(),
            transform("left", "input.a"),
            transform("right", "input.b"),
            transform("join", "[in.l, in.r]"),
            {"id": "note", "moduleType": "comment", "config": {"text": "not run"}},
        ],
        [
            edge("start", "left"),
            edge("start", "right"),
            edge("left", "join", targetHandle="l"),
            edge("right", "join", targetHandle="r"),
        ],
    )
    job = api.start("diamond", input={"a": 1, "b": 2}, trackingId="trk-42")
    assert job["status"] == "RUNNING" and job["trackingId"] == "trk-42"
    done = api.wait(job["id"])
    assert done["status"] == "COMPLETED", (done.get("error"), done["actions"])
    assert done["output"] == {"join": [1, 2]}
    actions = by_node(done)
    assert set(actions) == {"start", "left", "right", "join"}  # the comment never runs
    assert actions["join"]["input"] == {"l": 1, "r": 2}
    assert all(a["trackingId"] == "trk-42" and a["status"] == "COMPLETED" for a in actions.values())
    assert all(a["durationMs"] >= 0 and a["attempt"] == 1 for a in actions.values())
    assert done["finishedAt"] and done["durationMs"] >= 0
    found = api("GET", "/jobs", params={"trackingId": "trk-42"})["jobs"]
    assert [j["id"] for j in found] == [job["id"]]
    assert api("GET", "/jobs", params={"flowId": "diamond", "status": "COMPLETED"})["jobs"]
    assert api("GET", "/jobs", params={"flowId": "diamond", "status": "FAILED"})["jobs"] == []


def test_a_generated_tracking_id_and_paged_search(api: Api) -> None:
    api.flow("many", [trigger()], [])
    jobs = [api.start("many", input=i) for i in range(3)]
    assert len({j["trackingId"] for j in jobs}) == 3
    page = api("GET", "/jobs", params={"flowId": "many", "limit": 2})
    assert [j["id"] for j in page["jobs"]] == [jobs[2]["id"], jobs[1]["id"]]
    rest = api("GET", "/jobs", params={"flowId": "many", "cursor": page["nextCursor"]})
    assert [j["id"] for j in rest["jobs"]] == [jobs[0]["id"]]
    status, body = api.call("POST", "/flows/many/jobs", json={"trackingId": "a\r\nX-Evil: 1"})
    assert status == 400 and "trackingId" in body["error"]["message"]
    forged = base64.urlsafe_b64encode(b'{"pk": {"S": "JOB#x"}, "sk": {"S": "JOB"}}').decode()
    for cursor in (forged, "not-a-cursor", page["nextCursor"][:-4]):
        status, body = api.call("GET", "/jobs", params={"cursor": cursor})
        assert status == 400 and body["error"]["code"] == "validation_error", (cursor, body)
    status, _ = api.call("GET", "/flows/many/commits", params={"cursor": page["nextCursor"]})
    assert status == 400  # a jobs cursor is not a commits cursor


def test_a_condition_skips_the_branch_not_taken(api: Api) -> None:
    api.flow(
        "route",
        [
            trigger(),
            {"id": "big", "moduleType": "condition", "config": {"expression": "input.n > `10`"}},
            transform("yes", "'big'"),
            transform("no", "'small'"),
            transform("after-no", "in.no"),
        ],
        [
            edge("start", "big"),
            edge("big", "yes", sourceHandle="true"),
            edge("big", "no", sourceHandle="false"),
            edge("no", "after-no"),
        ],
    )
    done = api.wait(api.start("route", input={"n": 50})["id"])
    actions = by_node(done)
    assert done["status"] == "COMPLETED" and done["output"] == {"yes": "big"}
    assert actions["big"]["output"] == {"result": True}
    assert actions["no"]["status"] == "SKIPPED" and actions["after-no"]["status"] == "SKIPPED"
    small = api.wait(api.start("route", input={"n": 1})["id"])
    assert small["output"] == {"after-no": "small"} and by_node(small)["yes"]["status"] == "SKIPPED"


def test_http_request_templates_its_config_and_sends_the_tracking_id(
    api: Api, target: Target
) -> None:
    api.flow(
        "http",
        [
            trigger(),
            {
                "id": "call",
                "moduleType": "http.request",
                "config": {
                    "url": target.url + "/users/{{ input.id }}",
                    "method": "POST",
                    "body": {"who": "{{ input.id }}", "tag": "t-{{ trackingId }}"},
                },
            },
        ],
        [edge("start", "call")],
    )
    done = api.wait(api.start("http", input={"id": 7}, trackingId="trk-h")["id"])
    assert done["status"] == "COMPLETED", (done.get("error"), done["actions"])
    out = done["output"]["call"]
    assert out["status"] == 200 and out["body"] == {
        "path": "/users/7",
        "got": {"who": 7, "tag": "t-trk-h"},
    }
    assert target.headers[-1]["X-Tracking-Id"] == "trk-h"


def test_a_5xx_is_retried_until_it_answers(api: Api, target: Target) -> None:
    target.flaky = 2
    api.flow(
        "flaky",
        [
            trigger(),
            {
                "id": "call",
                "moduleType": "http.request",
                "config": {"url": target.url + "/flaky", "retries": 3},
            },
        ],
        [edge("start", "call")],
    )
    done = api.wait(api.start("flaky")["id"])
    assert done["status"] == "COMPLETED", (done.get("error"), done["actions"])
    assert target.calls["/flaky"] == 3 and by_node(done)["call"]["attempt"] == 3
    keys = {h["Idempotency-Key"] for h in target.headers}
    assert len(keys) == 1 and len(keys.pop()) == 64  # one key for every attempt of the node


def test_a_failing_node_leaves_one_failed_item_whose_retry_completes_the_job(
    api: Api, target: Target
) -> None:
    api.flow(
        "fragile",
        [
            trigger(),
            {"id": "first", "moduleType": "http.request", "config": {"url": target.url + "/ok"}},
            {"id": "second", "moduleType": "http.request", "config": {"url": target.url + "/fail"}},
            transform("last", "in.second.status"),
        ],
        [edge("start", "first"), edge("first", "second"), edge("second", "last")],
    )
    job = api.start("fragile", input={"x": 1})
    failed = api.wait(job["id"])
    assert failed["status"] == "FAILED" and failed["error"]["nodeId"] == "second"
    assert "node second (http.request) failed" in failed["error"]["message"]
    assert target.calls == Counter({"/ok": 1, "/fail": 1})  # a 4xx is not retried
    items = api("GET", "/failedItems", params={"jobId": job["id"]})["failedItems"]
    assert len(items) == 1
    item = items[0]
    assert (item["nodeId"], item["moduleType"], item["attempts"]) == ("second", "http.request", 1)
    assert item["input"]["first"]["status"] == 200 and "400" in item["error"]["message"]
    assert api("GET", "/failedItems", params={"flowId": "fragile"})["failedItems"] == items
    target.healed = True
    status, resumed = api.call("POST", f"/failedItems/{item['id']}/retry")
    assert status == 202 and resumed["status"] in ("RUNNING", "WAITING", "COMPLETED")
    done = api.wait(job["id"])
    assert done["status"] == "COMPLETED" and done["output"] == {"last": 200}
    assert target.calls == Counter({"/ok": 1, "/fail": 2})  # "first" did not run again
    assert done["commitId"] == failed["commitId"]
    assert api.call("POST", f"/failedItems/{item['id']}/retry")[0] == 409
    listed = api("GET", "/failedItems", params={"jobId": job["id"]})["failedItems"]
    assert len(listed) == 1 and listed[0]["retriedAt"]


def test_a_job_waits_for_a_message_by_key_across_an_engine_restart(
    api: Api, engine: LocalRuntime
) -> None:
    queue = api("POST", "/queues", json={"name": "payments", "visibilityTimeoutSeconds": 2})
    api.flow(
        "pay",
        [
            trigger(),
            {
                "id": "paid",
                "moduleType": "wait.event",
                "config": {
                    "queueId": "{{ input.queue }}",
                    "key": "order-{{ input.order }}",
                    "timeoutSeconds": 3600,
                },
            },
            transform("done", "in.paid.body"),
        ],
        [edge("start", "paid"), edge("paid", "done")],
    )
    target = {"kind": "flow", "mode": "resume", "flowId": "pay", "correlationAttribute": "orderId"}
    api("POST", "/subscriptions", json={"queueId": queue["id"], "target": target})
    job = api.start("pay", input={"queue": queue["id"], "order": 9})
    waiting = api.wait(job["id"], lambda j: j["status"] == "WAITING")
    assert by_node(waiting)["paid"]["status"] == "WAITING"
    assert api("GET", "/jobs", params={"status": "WAITING"})["jobs"][0]["id"] == job["id"]
    engine.restart_engine()  # the wait is in the tables, not in a process
    api(
        "POST",
        f"/queues/{queue['id']}/messages",
        json={"messages": [{"body": "paid!", "attributes": {"orderId": "order-9"}}]},
    )
    # A receive of the dead engine's poller may hold the message for one visibility timeout.
    done = api.wait(job["id"], timeout=60)
    assert done["status"] == "COMPLETED" and done["output"] == {"done": "paid!"}


def test_a_job_waits_on_its_resume_url_across_an_engine_restart(
    api: Api, engine: LocalRuntime
) -> None:
    api.flow(
        "approve",
        [
            trigger(),
            {"id": "ok", "moduleType": "wait.event", "config": {"timeoutSeconds": 3600}},
            transform("result", "in.ok.approved"),
        ],
        [edge("start", "ok"), edge("ok", "result")],
    )
    job = api.start("approve")
    waiting = api.wait(job["id"], lambda j: "resumeUrl" in by_node(j).get("ok", {}))
    assert waiting["status"] == "WAITING"
    url = by_node(waiting)["ok"]["resumeUrl"]
    engine.restart_engine()
    assert httpx.post(url, json={"approved": True}).status_code == 200  # no API key
    # An invocation the restart killed mid-call (the wait's own, still committing) holds the
    # run's lease, and its event comes back only when its visibility timeout ends: the dead
    # engine's poller could not set Lambda's one-minute retry. Past both, it runs again.
    engine.clock.advance(timedelta(seconds=INVOKER_FUNCTION.timeout_seconds + 61))
    done = api.wait(job["id"])
    assert done["status"] == "COMPLETED" and done["output"] == {"result": True}
    assert "resumeUrl" not in by_node(done)["ok"]
    assert httpx.post(url, json={"approved": False}).status_code == 409  # single use


def test_a_waiting_job_is_cancelled(api: Api) -> None:
    api.flow(
        "stuck",
        [trigger(), {"id": "w", "moduleType": "wait.event", "config": {"timeoutSeconds": 3600}}],
        [edge("start", "w")],
    )
    job = api.start("stuck")
    api.wait(job["id"], lambda j: j["status"] == "WAITING")
    assert api.call("POST", f"/jobs/{job['id']}/cancel")[0] == 202
    assert api.wait(job["id"])["status"] == "CANCELLED"
    assert api.call("POST", f"/jobs/{job['id']}/cancel")[0] == 409


def test_delay_and_queue_send(api: Api, engine: LocalRuntime) -> None:
    queue = api("POST", "/queues", json={"name": "out"})
    api.flow(
        "send",
        [
            trigger(),
            {"id": "nap", "moduleType": "delay", "config": {"seconds": 5}},
            {
                "id": "tell",
                "moduleType": "queue.send",
                "config": {"queueId": queue["id"], "messages": [{"body": "hello {{ input.who }}"}]},
            },
        ],
        [edge("start", "nap"), edge("nap", "tell")],
    )
    done = api.wait(api.start("send", input={"who": "ada"}, trackingId="trk-q")["id"])
    assert done["status"] == "COMPLETED", (done.get("error"), done["actions"])
    assert by_node(done)["nap"]["output"] is None
    sent = done["output"]["tell"]["messages"]
    assert len(sent) == 1 and sent[0]["messageId"]


def test_flow_invoke_runs_a_child_job_with_the_same_tracking_id(api: Api) -> None:
    api.flow("child", [trigger(), transform("double", "input.n")], [edge("start", "double")])
    api.flow(
        "parent",
        [
            trigger(),
            {
                "id": "sub",
                "moduleType": "flow.invoke",
                "config": {"flowId": "child", "input": {"n": "{{ input.n }}"}},
            },
        ],
        [edge("start", "sub")],
    )
    done = api.wait(api.start("parent", input={"n": 21}, trackingId="trk-p")["id"])
    assert done["status"] == "COMPLETED", (done.get("error"), done["actions"])
    assert done["output"] == {"sub": {"double": 21}}
    child_id = by_node(done)["sub"]["childJobId"]
    child = api("GET", f"/jobs/{child_id}")
    assert child["trackingId"] == "trk-p" and child["status"] == "COMPLETED"
    assert child["flowId"] == api("GET", "/flows/child")["id"]
    assert all(a["trackingId"] == "trk-p" for a in child["actions"])


def _invoking(api: Api, name: str, app_id: str, workflow: str, value: Any) -> None:
    node = {
        "id": "code",
        "moduleType": "workflow.invoke",
        "config": {"appId": app_id, "workflow": workflow, "input": value},
    }
    api.flow(name, [trigger(), node], [edge("start", "code")])


def test_workflow_invoke_runs_a_code_workflow_of_another_app_as_a_child_run(
    api: Api, engine: LocalRuntime
) -> None:
    """The child is the engine's child run of the job (another app's): linked both ways, no
    polling steps, and the job resumes when it ends."""
    app_id = engine.apps["e2e"].record["id"]
    _invoking(api, "code", app_id, "sequence", {"n": 4})
    job = api.start("code", trackingId="trk-w")
    done = api.wait(job["id"], timeout=60)
    assert done["status"] == "COMPLETED", (done.get("error"), done["actions"])
    assert done["output"] == {"code": 0 + 1 + 2 + 3}
    action = by_node(done)["code"]
    child = api("GET", f"/runs/{action['childRunId']}")
    assert child["parentRunId"] == job["id"] and child["appId"] == app_id
    assert child["workflow"] == "sequence" and child["status"] == "completed"
    assert child["input"] == {"n": 4, "trackingId": "trk-w"}
    assert api.call("GET", f"/runs/{job['id']}")[0] == 404  # a job is no run of the project


def test_cancelling_a_job_cancels_its_child_run(api: Api, engine: LocalRuntime) -> None:
    app_id = engine.apps["e2e"].record["id"]
    _invoking(api, "wait-code", app_id, "sleepy-kid", {})
    job = api.start("wait-code")
    running = api.wait(job["id"], lambda j: by_node(j).get("code", {}).get("childRunId"))
    child_id = by_node(running)["code"]["childRunId"]
    engine.wait_for(
        lambda: api("GET", f"/runs/{child_id}")["steps"][-1:] != [], timeout=30
    )  # the child sleeps
    assert api.call("POST", f"/jobs/{job['id']}/cancel")[0] == 202
    assert api.wait(job["id"])["status"] == "CANCELLED"
    engine.wait_for(lambda: api("GET", f"/runs/{child_id}")["status"] == "cancelled", timeout=30)


def test_workflow_invoke_of_an_unknown_workflow_is_refused_or_fails_the_node(
    api: Api, engine: LocalRuntime
) -> None:
    app_id = engine.apps["e2e"].record["id"]
    api("POST", "/flows", json={"name": "no-such"})
    node = {"id": "code", "moduleType": "workflow.invoke",
            "config": {"appId": app_id, "workflow": "nope"}}  # fmt: skip
    graph = {"nodes": [trigger(), node], "edges": [edge("start", "code")]}
    status, body = api.call("POST", "/flows/no-such/commits", json={"graph": graph})
    assert status == 400 and "node code: workflow nope not found" in body["error"]["message"]
    node["config"]["workflow"] = "{{ input.workflow }}"  # known only when the node runs
    api("POST", "/flows/no-such/commits", json={"graph": graph})
    done = api.wait(api.start("no-such", input={"workflow": "nope"})["id"])
    assert done["status"] == "FAILED" and done["error"]["nodeId"] == "code"
    assert "workflow nope not found" in done["error"]["message"]


# --- queue subscriptions targeting a flow ----------------------------------------------------


def test_each_message_starts_one_job_and_a_redelivery_none(api: Api, engine: LocalRuntime) -> None:
    from ezgh_engine import ids

    from functions.deliver.handler import handler as deliver

    queue = api("POST", "/queues", json={"name": "signups"})
    api.flow("signup", [trigger(), transform("who", "input.body")], [edge("start", "who")])
    sub = api(
        "POST",
        "/subscriptions",
        json={
            "queueId": queue["id"],
            "target": {"kind": "flow", "mode": "start", "flowId": "signup"},
        },
    )
    assert sub["target"] == {
        "kind": "flow",
        "mode": "start",
        "flowId": api("GET", "/flows/signup")["id"],
        "keyId": engine_key_id(api),  # its jobs act for the key that made it
    }
    (sent,) = api("POST", f"/queues/{queue['id']}/messages", json={"messages": [{"body": "ada"}]})[
        "messages"
    ]
    job_id = ids.derived_id("queue-start", engine.project_id, queue["id"], sent["messageId"])
    engine.wait_for(lambda: api.call("GET", f"/jobs/{job_id}")[0] == 200, timeout=30)
    done = api.wait(job_id)
    assert done["status"] == "COMPLETED" and done["output"] == {"who": "ada"}
    record = {  # SQS delivers at least once: the same message again
        "messageId": sent["messageId"],
        "receiptHandle": "gone",
        "body": "ada",
        "attributes": {"SentTimestamp": "1790000000000", "ApproximateReceiveCount": "2"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:ezgh-q-{queue['id']}",
    }
    assert deliver({"Records": [record]}, None) == {"batchItemFailures": []}
    engine.wait_idle(timeout=30)
    assert [j["id"] for j in api("GET", "/jobs", params={"flowId": "signup"})["jobs"]] == [job_id]


def test_a_flow_resume_subscription_resumes_only_that_flows_jobs(api: Api) -> None:
    queue = api("POST", "/queues", json={"name": "events"})
    wait = {"queueId": queue["id"], "key": "{{ input.ref }}", "timeoutSeconds": 3600}
    for name in ("listener", "other"):
        api.flow(
            name,
            [trigger(), {"id": "hear", "moduleType": "wait.event", "config": wait}],
            [edge("start", "hear")],
        )
    target = {"kind": "flow", "mode": "resume", "flowId": "listener", "correlationAttribute": "ref"}
    api("POST", "/subscriptions", json={"queueId": queue["id"], "target": target})
    job = api.start("listener", input={"ref": "r-1"})
    other = api.start("other", input={"ref": "r-1"})
    for started in (job, other):
        api.wait(started["id"], lambda j: j["status"] == "WAITING")
    message = {"body": "heard", "attributes": {"ref": "r-1"}}
    api("POST", f"/queues/{queue['id']}/messages", json={"messages": [message]})
    done = api.wait(job["id"])
    assert done["status"] == "COMPLETED" and done["output"]["hear"]["body"] == "heard"
    assert api("GET", f"/jobs/{other['id']}")["status"] == "WAITING"  # another flow's job


def engine_key_id(api: Api) -> str:
    keys = api("GET", "/apiKeys")["apiKeys"]
    return str(next(k["id"] for k in keys if k["name"] == "admin (bootstrap)"))


def test_a_flow_schedule_starts_jobs_of_its_flow(api: Api, engine: LocalRuntime) -> None:
    from datetime import timedelta

    from ezgh_engine import clock, ids

    api.flow("tick", [trigger(), transform("seen", "input.n")], [edge("start", "seen")])
    schedule = api(
        "POST",
        "/flows/tick/schedules",
        json={"cron": "*/5 * * * *", "input": {"n": 5}, "trackingId": "every-5"},
    )
    assert schedule["flowId"] == api("GET", "/flows/tick")["id"]
    assert schedule["keyId"] == engine_key_id(api)
    assert [s["id"] for s in api("GET", "/flows/tick/schedules")["schedules"]] == [schedule["id"]]
    # /schedules neither shows nor changes a flow's schedule: the interpreter is no app.
    assert schedule["id"] not in [s["id"] for s in api("GET", "/schedules")["schedules"]]
    for method, path in (("GET", ""), ("PATCH", ""), ("POST", "/pause"), ("DELETE", "")):
        body = {"input": {"flowId": "other"}} if method == "PATCH" else None
        status, _ = api.call(method, f"/schedules/{schedule['id']}{path}", json=body)
        assert status == 404, (method, path)
    engine.clock.advance(
        clock.parse_iso(schedule["nextRunAt"]) - clock.now() + timedelta(seconds=1)
    )
    engine.scheduler.kick()
    job_id = ids.derived_id("schedule", schedule["id"], schedule["nextRunAt"])
    engine.wait_for(lambda: api.call("GET", f"/jobs/{job_id}")[0] == 200, timeout=30)
    done = api.wait(job_id)
    assert done["status"] == "COMPLETED" and done["output"] == {"seen": 5}
    assert done["trackingId"] == "every-5" and done["flowId"] == api("GET", "/flows/tick")["id"]
    assert done["commitId"] == api("GET", "/flows/tick/commits")["commits"][0]["id"]
    assert [j["id"] for j in api("GET", "/jobs", params={"flowId": "tick"})["jobs"]] == [job_id]
    assert api.call("DELETE", f"/flows/tick/schedules/{schedule['id']}")[0] == 204
    assert api("GET", "/flows/tick/schedules")["schedules"] == []


# --- authority: what a narrow key tries, refused -------------------------------------------


def narrow(api: Api, engine: LocalRuntime, *permissions: tuple[str, str | None]) -> Api:
    """An API client with a key holding exactly `permissions`."""
    body = {
        "name": "narrow",
        "permissions": [{"action": a, **({"resource": r} if r else {})} for a, r in permissions],
    }
    return Api(engine, api("POST", "/apiKeys", json=body)["key"])


FLOWS_ON = ("flows.manage", "flows.jobs.start", "flows.jobs.read")


def queue_depth(engine: LocalRuntime, queue_id: str) -> int:
    from ezgh_engine.adapters import aws
    from ezgh_engine.service.queues import find_queue

    url = find_queue(engine.project_id, queue_id).url
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    got = aws.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=names)
    return sum(int(v) for v in got["Attributes"].values())


def victims(api: Api, engine: LocalRuntime) -> dict[str, Any]:
    """Another app's workflow, a queue and a flow the narrow keys are not given."""
    queue = api("POST", "/queues", json={"name": "q-victim"})["id"]
    api.flow(
        "f-victim", [trigger(), transform("secret", "'victim ran'")], [edge("start", "secret")]
    )
    return {"app": engine.apps["e2e"].record["id"], "queue": queue}


def _runs_of(api: Api, app_id: str) -> int:
    return len(api("GET", "/runs", params={"appId": app_id, "limit": 100})["runs"])


def test_a_flow_key_cannot_reach_another_app_queue_or_flow_through_its_nodes(
    api: Api, engine: LocalRuntime
) -> None:
    """`flows.*` on one flow: a commit naming another app's workflow, another queue or
    another flow outright is refused (403); named through templates, the commit and the
    start pass, and the node fails with 403 before it acts: no child run, no message, no
    job of the other flow."""
    target = victims(api, engine)
    attacker = narrow(api, engine, *((a, "f-attacker") for a in FLOWS_ON))
    attacker("POST", "/flows", json={"name": "f-attacker"})
    direct = {
        "workflow.invoke": {"appId": target["app"], "workflow": "sequence", "input": {"n": 1}},
        "queue.send": {"queueId": target["queue"], "messages": [{"body": "stolen"}]},
        "flow.invoke": {"flowId": "f-victim"},
        "wait.event": {"queueId": target["queue"], "key": "k", "timeoutSeconds": 60},
    }
    for module_type, config in direct.items():
        graph = {
            "nodes": [trigger(), {"id": "x", "moduleType": module_type, "config": config}],
            "edges": [edge("start", "x")],
        }
        status, body = attacker.call("POST", "/flows/f-attacker/commits", json={"graph": graph})
        assert status == 403 and body["error"]["code"] == "forbidden", (module_type, body)
        assert "node x" in body["error"]["message"]
    templated = {
        "workflow.invoke": {"appId": "{{ input.app }}", "workflow": "sequence", "input": {"n": 1}},
        "queue.send": {"queueId": "{{ input.queue }}", "messages": [{"body": "stolen"}]},
        "flow.invoke": {"flowId": "{{ input.flow }}"},
        "wait.event": {"queueId": "{{ input.queue }}", "key": "k", "timeoutSeconds": 60},
    }
    runs_before = _runs_of(api, target["app"])
    for module_type, config in templated.items():
        graph = {
            "nodes": [trigger(), {"id": "x", "moduleType": module_type, "config": config}],
            "edges": [edge("start", "x")],
        }
        attacker("POST", "/flows/f-attacker/commits", json={"graph": graph})
        inputs = {"app": target["app"], "queue": target["queue"], "flow": "f-victim"}
        done = attacker.wait(attacker.start("f-attacker", input=inputs)["id"])
        assert done["status"] == "FAILED" and done["error"]["nodeId"] == "x", (module_type, done)
        assert "403 forbidden" in done["error"]["message"], done["error"]
        assert "output" not in by_node(done)["x"]
    assert _runs_of(api, target["app"]) == runs_before
    assert queue_depth(engine, target["queue"]) == 0
    assert api("GET", "/jobs", params={"flowId": "f-victim"})["jobs"] == []
    for key_call in (  # and directly, the same key is refused as it always was
        ("POST", "/runs", {"appId": target["app"], "workflow": "sequence"}),
        ("POST", f"/queues/{target['queue']}/messages", {"messages": [{"body": "x"}]}),
        ("POST", "/flows/f-victim/jobs", {}),
    ):
        assert attacker.call(key_call[0], key_call[1], json=key_call[2])[0] == 403


def test_run_and_app_keys_on_the_interpreters_names_reach_nothing(
    api: Api, engine: LocalRuntime
) -> None:
    """`workflows.runs.*` and `workflows.apps.update` on every name the interpreter ever had
    start, read, change and delete nothing of it; a graph in a run's input runs nowhere."""
    from ezgh_engine.core.flows.jobs import interpreter_app_id

    target = victims(api, engine)
    job = api.wait(api.start("f-victim")["id"])
    engine_id = interpreter_app_id(engine.project_id)
    names = ("ezgh-flows", "ezgh:flows", engine_id)
    perms = [
        (a, f"{n}/flow") for n in names for a in ("workflows.runs.start", "workflows.runs.read")
    ]
    perms += [("workflows.apps.update", n) for n in names]
    key = narrow(api, engine, *perms)
    graph = {"nodes": [{"id": "wf", "moduleType": "workflow.invoke",
                        "config": {"appId": target["app"], "workflow": "sequence"}}], "edges": []}  # fmt: skip
    runs_before = _runs_of(api, target["app"])
    for ref in names:
        started = {"appId": ref, "workflow": "flow", "input": {"commitId": "x", "graph": graph}}
        assert key.call("POST", "/runs", json=started)[0] == 404
        assert key.call("PATCH", f"/apps/{ref}", json={"url": "http://127.0.0.1:9/"})[0] == 404
        assert key.call("DELETE", f"/apps/{ref}")[0] == 404
    assert key.call("GET", f"/runs/{job['id']}")[0] == 404
    assert key("GET", "/runs")["runs"] == []
    assert _runs_of(api, target["app"]) == runs_before
    assert api.wait(api.start("f-victim")["id"])["status"] == "COMPLETED"  # unharmed


def test_a_revoked_key_fails_its_jobs_next_node_before_it_acts(
    api: Api, engine: LocalRuntime
) -> None:
    queue = api("POST", "/queues", json={"name": "out"})["id"]
    api.flow(
        "later",
        [
            trigger(),
            {"id": "hold", "moduleType": "wait.event", "config": {"timeoutSeconds": 3600}},
            {
                "id": "send",
                "moduleType": "queue.send",
                "config": {"queueId": queue, "messages": [{"body": "late"}]},
            },
        ],
        [edge("start", "hold"), edge("hold", "send")],
    )
    body = {"name": "soon-gone", "permissions": [
        {"action": "flows.jobs.start", "resource": "later"},
        {"action": "flows.jobs.read", "resource": "later"},
        {"action": "queues.messages.send", "resource": queue}]}  # fmt: skip
    made = api("POST", "/apiKeys", json=body)
    holder = Api(engine, made["key"])
    job = holder.start("later")
    waiting = api.wait(job["id"], lambda j: "resumeUrl" in by_node(j).get("hold", {}))
    api("DELETE", f"/apiKeys/{made['id']}")
    assert httpx.post(by_node(waiting)["hold"]["resumeUrl"], json={}).status_code == 200
    done = api.wait(job["id"])
    assert done["status"] == "FAILED" and done["error"]["nodeId"] == "send", done
    assert "403 forbidden" in done["error"]["message"] and "revoked" in done["error"]["message"]
    assert queue_depth(engine, queue) == 0
    (item,) = api("GET", "/failedItems", params={"jobId": job["id"]})["failedItems"]
    assert item["nodeId"] == "send" and item["error"]["name"] == "ForbiddenError"


def test_schedules_and_subscriptions_act_for_their_creator_and_stop_when_it_is_revoked(
    api: Api, engine: LocalRuntime
) -> None:
    from datetime import timedelta

    from ezgh_engine import clock, ids

    api.flow("tock", [trigger(), transform("seen", "input")], [edge("start", "seen")])
    queue = api("POST", "/queues", json={"name": "tocks"})["id"]
    body = {"name": "creator", "permissions": [
        {"action": "flows.jobs.start", "resource": "tock"},
        {"action": "queues.subscriptions.create", "resource": queue}]}  # fmt: skip
    made = api("POST", "/apiKeys", json=body)
    creator = Api(engine, made["key"])
    schedule = creator("POST", "/flows/tock/schedules", json={"cron": "*/5 * * * *"})
    target = {"kind": "flow", "mode": "start", "flowId": "tock"}
    sub = creator("POST", "/subscriptions", json={"queueId": queue, "target": target})
    assert schedule["keyId"] == sub["target"]["keyId"] == made["id"]
    api("DELETE", f"/apiKeys/{made['id']}")
    engine.clock.advance(
        clock.parse_iso(schedule["nextRunAt"]) - clock.now() + timedelta(seconds=1)
    )
    engine.scheduler.kick()
    api("POST", f"/queues/{queue}/messages", json={"messages": [{"body": "m"}]})
    engine.wait_for(
        lambda: (
            (api("GET", f"/subscriptions/{sub['id']}").get("lastFailure") or {})
            .get("message", "")
            .startswith("Job not started: 403")
        ),
        timeout=30,
    )
    engine.wait_idle(timeout=30)
    assert api("GET", "/jobs", params={"flowId": "tock"})["jobs"] == []
    job_id = ids.derived_id("schedule", schedule["id"], schedule["nextRunAt"])
    assert api.call("GET", f"/jobs/{job_id}")[0] == 404
    # The fire that started nothing says why, where the schedule's readers look.
    (shown,) = api("GET", "/flows/tock/schedules")["schedules"]
    assert shown["lastError"]["message"] == (
        f"Job not started: 403 forbidden: the API key {made['id']} this job acts for "
        f"(schedule:{schedule['id']}) is revoked"
    )


def test_resource_bombs_fail_their_node_naming_the_limit(api: Api) -> None:
    bomb = "input" + " | [@, @]" * 21
    api.flow("bomb", [trigger(), transform("boom", bomb)], [edge("start", "boom")])
    done = api.wait(api.start("bomb", input={"a": "x" * 300})["id"])
    assert done["status"] == "FAILED" and done["error"]["nodeId"] == "boom"
    assert "4194304 bytes" in done["error"]["message"], done["error"]
    # A flow that invokes itself: its chain of jobs stops at the depth limit, naming it
    # (a tree's size is bounded too: tests/unit/test_flows_modules.py).
    api.flow(
        "loop",
        [trigger(), {"id": "again", "moduleType": "flow.invoke", "config": {"flowId": "loop"}}],
        [edge("start", "again")],
    )
    root = api.wait(api.start("loop")["id"], timeout=300)
    assert root["status"] == "FAILED"
    jobs = api("GET", "/jobs", params={"flowId": "loop", "limit": 100})["jobs"]
    assert len(jobs) == MAX_DEPTH + 1
    # The deepest job's own node says why (the others fail with their child's error).
    own = "node again (flow.invoke) failed: ModuleError: flow.invoke: a job tree is at most"
    deepest = [j for j in jobs if j["error"]["message"].startswith(own)]
    assert len(deepest) == 1 and deepest[0]["error"]["nodeId"] == "again"


def test_a_commit_refuses_an_unknown_jmespath_function(api: Api) -> None:
    api("POST", "/flows", json={"name": "typo"})
    graph = {"nodes": [trigger(), transform("m", "multiply(input.a, `2`)")],
             "edges": [edge("start", "m")]}  # fmt: skip
    status, body = api.call("POST", "/flows/typo/commits", json={"graph": graph})
    assert status == 400 and "node m" in body["error"]["message"]
    assert "unknown function multiply()" in body["error"]["message"]


def test_every_node_type_runs_for_a_key_that_holds_what_it_needs(
    api: Api, engine: LocalRuntime, target: Target
) -> None:
    """The node matrix run through jobs: each module type, its resources named through
    templates (so only the node's own check can decide), started by a key holding exactly
    `flows.jobs.start` on the flow and what the node needs: it runs (a key without the
    needs is refused at the node: the test above)."""
    from ezgh_engine.core.flows.modules import MODULE_TYPES

    queue = api("POST", "/queues", json={"name": "q-ok"})["id"]
    api.flow("child-ok", [trigger()], [])
    app_id = engine.apps["e2e"].record["id"]
    nodes: dict[str, tuple[dict[str, Any], list[tuple[str, str]]]] = {
        "transform": ({"expression": "input.n"}, []),
        "condition": ({"expression": "input.n"}, []),
        "http.request": ({"url": target.url + "/ok/{{ input.n }}"}, []),
        "delay": ({"seconds": "{{ input.n }}"}, []),
        "wait.event": (
            {"queueId": "{{ input.queue }}", "key": "k", "timeoutSeconds": 3600},
            [("queues.subscriptions.create", queue)],
        ),
        "queue.send": (
            {"queueId": "{{ input.queue }}", "messages": [{"body": "ok"}]},
            [("queues.messages.send", queue)],
        ),
        "workflow.invoke": (
            {"appId": "{{ input.app }}", "workflow": "sequence", "input": {"n": 2}},
            [("workflows.runs.start", "e2e/sequence")],
        ),
        "flow.invoke": ({"flowId": "{{ input.flow }}"}, [("flows.jobs.start", "child-ok")]),
    }
    assert set(nodes) | {"trigger.manual", "comment"} == set(MODULE_TYPES)
    for module_type, (config, needs) in nodes.items():
        name = f"n-{module_type.replace('.', '-')}"
        api.flow(
            name,
            [trigger(), {"id": "x", "moduleType": module_type, "config": config}],
            [edge("start", "x")],
        )
        key = narrow(api, engine, ("flows.jobs.start", name), ("flows.jobs.read", name), *needs)
        inputs = {"n": 1, "queue": queue, "app": app_id, "flow": "child-ok"}
        wanted = "WAITING" if module_type == "wait.event" else "COMPLETED"
        settled = (lambda j: j["status"] != "RUNNING") if wanted == "WAITING" else None
        done = key.wait(key.start(name, input=inputs)["id"], settled)
        assert done["status"] == wanted, (module_type, done.get("error"), done["actions"])
