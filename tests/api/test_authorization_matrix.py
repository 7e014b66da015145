"""The authorization matrix: every operation of the engine's OpenAPI document.

For each operation, a key holding exactly the permissions it needs (scoped to one app's
workflow, one app or one queue where the operation has a resource) succeeds; keys holding any
other single permission (scoped alike, or unscoped), or the needed ones on another resource,
are refused with 403 (a search answers only what the key may read) and change nothing: every
table item, queue depth and event-source mapping is the same after the refusals.

The operations come from `GET /v1/openapi.json`: one without an entry here fails the test.
Permissions and resources: CONTRACT.md "API keys"; the choices the contract leaves open are
in each service's docstring (a key reads the apps, queues, subscriptions and API keys its
grants name: a list answers only those, a read of another is refused).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import event_sources, push
from ezgh_engine.adapters.flows_store import FailedItem
from ezgh_engine.core.flows.modules import MODULE_TYPES
from ezgh_engine.service import flow_jobs
from ezgh_engine.topology import TOPOLOGY

from tests.api.conftest import ENV, Project, call
from tests.api.test_run_scopes import fail_run, key, pull_app, start

pytestmark = pytest.mark.moto_only(
    "permission checks over every operation: the store calls they make run on DynamoDB Local in their own modules"
)

ACTIONS = (
    "workflows.runs.start",
    "workflows.runs.read",
    "workflows.runs.cancel",
    "workflows.runs.resume",
    "workflows.apps.update",
    "queues.subscriptions.create",
    "queues.messages.send",
    "queues.manage",
    "flows.manage",
    "flows.jobs.start",
    "flows.jobs.read",
    "flows.jobs.cancel",
)
START, READ, CANCEL = "workflows.runs.start", "workflows.runs.read", "workflows.runs.cancel"
APPS, SUBS, SEND, MANAGE = (
    "workflows.apps.update",
    "queues.subscriptions.create",
    "queues.messages.send",
    "queues.manage",
)
FLOWS, JOB_START, JOB_READ, JOB_CANCEL = (
    "flows.manage",
    "flows.jobs.start",
    "flows.jobs.read",
    "flows.jobs.cancel",
)
PREFIX = "/v1/organizations/{orgId}/projects/{projectId}"


@dataclass
class World:
    """What the operations act on. Resource names: `wf` (alpha/a), `app` (alpha), `push`
    (pusher), `newapp` (gamma, created by the call), `queue` (q1), `queue2` (q2), `flow`
    (f1), `newflow` (f3, created by the call), None (the whole project); each has another
    resource a key may be scoped to instead."""

    project: Project
    ids: dict[str, str] = field(default_factory=dict)

    def resource(self, name: str | None, *, other: bool = False) -> str | None:
        table = {
            "wf": ("alpha/a", "alpha/b"),
            "appwf": ("alpha/a", "beta/other"),  # a workflow of app alpha, or of another
            "betawf": ("beta/other", "beta/nope"),  # what alpha's code invokes
            "app": ("alpha", "beta"),
            "push": ("pusher", "beta"),
            "newapp": ("gamma", "beta"),
            "queue": (self.ids.get("q1"), self.ids.get("q2")),
            "queue2": (self.ids.get("q2"), self.ids.get("q1")),
            "flow": ("f1", "f2"),  # flows permissions name the flow by name
            "flow2": ("f2", "f1"),
            "newflow": ("f3", "f2"),
        }
        if name is None:
            return self.ids["q1"] if other else None  # scoped where all was needed
        return table[name][1 if other else 0]


def build_world(project: Project) -> World:
    world = World(project)
    alpha = pull_app(project, "alpha", ["a", "b"])
    pull_app(project, "beta", ["other"])
    world.ids["alpha"] = alpha["id"]
    pusher = project.call(
        "POST", "/apps", body={"name": "pusher", "kind": "push", "url": "https://app.example.com/"}
    )
    assert pusher.status == 201, pusher.body
    world.ids["pusher"] = pusher.body["id"]
    world.ids["run"] = start(project, alpha, "a", {"secret": 1})
    world.ids["failed"] = start(project, alpha, "a", {"secret": 2})
    fail_run(world.ids["failed"])
    start(project, alpha, "b")
    for name in ("q1", "q2"):
        queue = project.call("POST", "/queues", body={"name": name})
        assert queue.status == 201, queue.body
        world.ids[name] = queue.body["id"]
    sub = project.call(
        "POST",
        "/subscriptions",
        body={
            "queueId": world.ids["q1"],
            "target": {"kind": "https", "url": "https://hooks.example.com/in"},
        },
    )
    assert sub.status == 201, sub.body
    world.ids["sub"] = sub.body["id"]
    schedule = project.call(
        "POST", "/schedules", body={"appId": alpha["id"], "workflow": "a", "cron": "0 3 * * *"}
    )
    assert schedule.status == 201, schedule.body
    world.ids["schedule"] = schedule.body["id"]
    world.ids["target_key"] = project.call(
        "POST",
        "/apiKeys",
        body={"name": "target", "permissions": [{"action": READ, "resource": "alpha/a"}]},
    ).body["id"]
    build_flows(world)
    return world


GRAPH = {"nodes": [{"id": "start", "moduleType": "trigger.manual"}], "edges": []}


def build_flows(world: World) -> None:
    """Flows f1 and f2 with a committed graph, and on each a RUNNING job; on f1 also a FAILED
    job with its failed item, and a schedule. No engine runs in tests/api, so the jobs never
    advance on their own."""
    project = world.project
    for name in ("f1", "f2"):
        flow = project.call("POST", "/flows", body={"name": name})
        assert flow.status == 201, flow.body
        world.ids[name] = flow.body["id"]
        made = project.call("POST", f"/flows/{name}/commits", body={"graph": GRAPH})
        assert made.status == 201, made.body
        world.ids[f"{name}_job"] = start_job(project, name)
    world.ids["failed_job"] = start_job(project, "f1")
    fail_run(world.ids["failed_job"])
    # Only the interpreter records failed items (while it runs a node), and it does not run
    # here: write the one its failing `start` node would leave, through the same service call.
    failed = FailedItem(
        id=flow_jobs.failed_item_id(world.ids["failed_job"], 1, "start"),
        project_id=project.project_id,
        job_id=world.ids["failed_job"],
        flow_id=world.ids["f1"],
        node_id="start",
        module_type="trigger.manual",
        input={},
        error={"code": "user", "name": "Boom", "message": "boom"},
        attempts=1,
        created_at=clock.iso(clock.now()),
    )
    flow_jobs.record_failed_item(failed)
    world.ids["failed_item"] = failed.id
    made = project.call("POST", "/flows/f1/schedules", body={"cron": "0 3 * * *"})
    assert made.status == 201, made.body
    world.ids["flow_schedule"] = made.body["id"]


def start_job(project: Project, flow: str) -> str:
    answer = project.call("POST", f"/flows/{flow}/jobs", body={"input": {"n": 1}})
    assert answer.status == 201, answer.body
    return str(answer.body["id"])


Needs = tuple[tuple[tuple[str, str | None], ...], ...]  # alternatives of permission sets


@dataclass(frozen=True)
class Entry:
    """One operation: its request, the permissions it needs (any one alternative), the
    status it answers when allowed, and for a filtered list, what a refused key must not
    see (None: refusal is 403)."""

    request: Callable[[World], tuple[str, dict[str, Any]]]  # (concrete subpath, call kwargs)
    needs: Needs
    ok: int = 200
    hidden: Callable[[World], str] | None = None


def _get(path: str) -> Callable[[World], tuple[str, dict[str, Any]]]:
    return lambda w: (path.format(**w.ids), {})


def _with(path: str, body: Any = None, **kwargs: Any) -> Callable[[World], Any]:
    def build(w: World) -> tuple[str, dict[str, Any]]:
        concrete = json.loads(json.dumps(body).replace("<q1>", w.ids["q1"]).replace(
            "<q2>", w.ids["q2"]).replace("<alpha>", w.ids["alpha"]))  # fmt: skip
        return path.format(**w.ids), {"body": concrete, **kwargs}

    return build


OPEN: Needs = ((),)
RESUME = "workflows.runs.resume"
# Reading app alpha: a grant on it, or on one of its workflows (any workflows.* action).
READS_APP: Needs = (
    ((APPS, "app"),),
    ((START, "appwf"),),
    ((READ, "appwf"),),
    ((CANCEL, "appwf"),),
    ((RESUME, "appwf"),),
)
# Reading queue q1 (and its subscription): a grant of any queues.* action on it.
READS_QUEUE: Needs = (((SUBS, "queue"),), ((SEND, "queue"),), ((MANAGE, "queue"),))
RUN = "/runs/{run}"
SCHEDULE = "/schedules/{schedule}"
SUB = "/subscriptions/{sub}"
FLOW = "/flows/{f1}"
JOB = "/jobs/{f1_job}"
NEW_KEY = {"name": "made", "permissions": [{"action": READ, "resource": "alpha/a"}]}
HTTPS = {"kind": "https", "url": "https://hooks.example.com/other"}

MATRIX: dict[tuple[str, str], Entry] = {
    # apps: a key reads the apps its grants name (an app, or one of its workflows)
    ("GET", "/apps"): Entry(_get("/apps"), READS_APP, hidden=lambda w: w.ids["alpha"]),
    ("POST", "/apps"): Entry(
        _with("/apps", {"name": "gamma", "kind": "pull"}), (((APPS, "newapp"),),), 201
    ),
    ("GET", "/apps/{appId}"): Entry(_get("/apps/{alpha}"), READS_APP),
    ("PATCH", "/apps/{appId}"): Entry(
        _with("/apps/{alpha}", {"notifications": None}), (((APPS, "app"),),)
    ),
    ("DELETE", "/apps/{appId}"): Entry(_get("/apps/{alpha}"), (((APPS, "app"),),), 204),
    ("POST", "/apps/{appId}/sync"): Entry(_with("/apps/{pusher}/sync"), (((APPS, "push"),),)),
    ("POST", "/apps/{appId}/workers"): Entry(
        _with("/apps/{alpha}/workers", {"workerId": "w2", "workflows": ["c"]}),
        (((APPS, "app"),),),
    ),
    ("POST", "/apps/{appId}/tasks/poll"): Entry(
        _with("/apps/{alpha}/tasks/poll", {"waitSeconds": 0}), (((APPS, "app"),),), 204
    ),
    ("POST", "/apps/{appId}/tasks/access"): Entry(
        _with("/apps/{alpha}/tasks/access"), (((APPS, "app"),),)
    ),
    # API keys: creating, revoking or seeing a key in a list needs what that key holds
    ("GET", "/apiKeys"): Entry(
        _get("/apiKeys"), (((READ, "wf"),),), hidden=lambda w: w.ids["target_key"]
    ),
    ("POST", "/apiKeys"): Entry(_with("/apiKeys", NEW_KEY), (((READ, "wf"),),), 201),
    ("DELETE", "/apiKeys/{id}"): Entry(_get("/apiKeys/{target_key}"), (((READ, "wf"),),), 204),
    # runs
    ("GET", "/runs"): Entry(_get("/runs"), (((READ, "wf"),),), hidden=lambda w: w.ids["run"]),
    ("POST", "/runs"): Entry(
        _with("/runs", {"appId": "<alpha>", "workflow": "a", "input": 1}), (((START, "wf"),),), 201
    ),
    ("GET", "/runs/{runId}"): Entry(_get(RUN), (((READ, "wf"),),)),
    ("DELETE", "/runs/{runId}"): Entry(_get("/runs/{failed}"), (((CANCEL, "wf"),),), 204),
    ("POST", "/runs/{runId}/cancel"): Entry(
        _with(RUN + "/cancel"), (((CANCEL, "wf"), (READ, "wf")),), 202
    ),
    ("POST", "/runs/{runId}/retry"): Entry(
        _with("/runs/{failed}/retry"), (((START, "wf"), (READ, "wf")),)
    ),
    ("GET", "/runs/{runId}/events"): Entry(_get(RUN + "/events"), (((READ, "wf"),),)),
    ("GET", "/runs/{runId}/payloads/{path}"): Entry(
        _get(RUN + "/payloads/input"), (((READ, "wf"),),)
    ),
    # schedules: reading needs read or start; managing needs start
    ("GET", "/schedules"): Entry(
        _get("/schedules"),
        (((READ, "wf"),), ((START, "wf"),)),
        hidden=lambda w: w.ids["schedule"],
    ),
    ("POST", "/schedules"): Entry(
        _with("/schedules", {"appId": "<alpha>", "workflow": "a", "cron": "0 4 * * *"}),
        (((START, "wf"),),),
        201,
    ),
    ("GET", "/schedules/{scheduleId}"): Entry(_get(SCHEDULE), (((READ, "wf"),), ((START, "wf"),))),
    ("PATCH", "/schedules/{scheduleId}"): Entry(
        _with(SCHEDULE, {"cron": "0 5 * * *"}), (((START, "wf"),),)
    ),
    ("DELETE", "/schedules/{scheduleId}"): Entry(_get(SCHEDULE), (((START, "wf"),),), 204),
    ("POST", "/schedules/{scheduleId}/pause"): Entry(
        _with(SCHEDULE + "/pause"), (((START, "wf"),),)
    ),
    ("POST", "/schedules/{scheduleId}/resume"): Entry(
        _with(SCHEDULE + "/resume"), (((START, "wf"),),)
    ),
    # queues: a key reads the queues its grants name; a new queue has no ID yet, so creating
    # needs an unscoped grant
    ("GET", "/queues"): Entry(_get("/queues"), READS_QUEUE, hidden=lambda w: w.ids["q1"]),
    ("POST", "/queues"): Entry(_with("/queues", {"name": "q3"}), (((MANAGE, None),),), 201),
    ("GET", "/queues/{queueId}"): Entry(_get("/queues/{q1}"), READS_QUEUE),
    ("DELETE", "/queues/{queueId}"): Entry(_get("/queues/{q1}"), (((MANAGE, "queue"),),), 204),
    ("POST", "/queues/{queueId}/messages"): Entry(
        _with("/queues/{q1}/messages", {"messages": [{"body": "x"}]}), (((SEND, "queue"),),)
    ),
    ("POST", "/queues/{queueId}/redrive"): Entry(
        _with("/queues/{q1}/redrive"), (((MANAGE, "queue"),),)
    ),
    # subscriptions: read with their queue; changing one needs subscriptions.create on it
    ("GET", "/subscriptions"): Entry(
        _get("/subscriptions"), READS_QUEUE, hidden=lambda w: w.ids["sub"]
    ),
    ("POST", "/subscriptions"): Entry(
        _with("/subscriptions", {"queueId": "<q2>", "target": HTTPS}), (((SUBS, "queue2"),),), 201
    ),
    ("GET", "/subscriptions/{subId}"): Entry(_get(SUB), READS_QUEUE),
    ("PATCH", "/subscriptions/{subId}"): Entry(
        _with(SUB, {"maxConcurrency": 3}), (((SUBS, "queue"),),)
    ),
    ("DELETE", "/subscriptions/{subId}"): Entry(_get(SUB), (((SUBS, "queue"),),), 204),
    ("POST", "/subscriptions/{subId}/pause"): Entry(_with(SUB + "/pause"), (((SUBS, "queue"),),)),
    ("POST", "/subscriptions/{subId}/resume"): Entry(_with(SUB + "/resume"), (((SUBS, "queue"),),)),
}

MATRIX |= {
    # flows: reading needs manage or jobs.read on the flow; a list answers only those flows
    ("GET", "/flows/moduleTypes"): Entry(_get("/flows/moduleTypes"), OPEN),
    ("GET", "/flows"): Entry(
        _get("/flows"),
        (((FLOWS, "flow"),), ((JOB_READ, "flow"),)),
        hidden=lambda w: w.ids["f1"],
    ),
    ("POST", "/flows"): Entry(_with("/flows", {"name": "f3"}), (((FLOWS, "newflow"),),), 201),
    ("GET", "/flows/{flowId}"): Entry(_get(FLOW), (((FLOWS, "flow"),), ((JOB_READ, "flow"),))),
    ("PATCH", "/flows/{flowId}"): Entry(_with(FLOW, {"description": "d"}), (((FLOWS, "flow"),),)),
    ("DELETE", "/flows/{flowId}"): Entry(_get(FLOW), (((FLOWS, "flow"),),), 204),
    ("POST", "/flows/{flowId}/commits"): Entry(
        _with(FLOW + "/commits", {"graph": GRAPH}), (((FLOWS, "flow"),),), 201
    ),
    ("GET", "/flows/{flowId}/commits"): Entry(
        _get(FLOW + "/commits"), (((FLOWS, "flow"),), ((JOB_READ, "flow"),))
    ),
    # jobs and failed items: a list answers only the flows the key may read
    ("POST", "/flows/{flowId}/jobs"): Entry(
        _with(FLOW + "/jobs", {"input": 2}), (((JOB_START, "flow"),),), 201
    ),
    ("GET", "/jobs"): Entry(
        _get("/jobs"), (((JOB_READ, "flow"),),), hidden=lambda w: w.ids["f1_job"]
    ),
    ("GET", "/jobs/{jobId}"): Entry(_get(JOB), (((JOB_READ, "flow"),),)),
    ("GET", "/jobs/{jobId}/payloads/{path}"): Entry(
        _get(JOB + "/payloads/input"), (((JOB_READ, "flow"),),)
    ),
    # like a run's cancel and retry: the answer is the job, so reading it is needed too
    ("POST", "/jobs/{jobId}/cancel"): Entry(
        _with(JOB + "/cancel"), (((JOB_CANCEL, "flow"), (JOB_READ, "flow")),), 202
    ),
    # flow schedules: start jobs in their creator's stead (reading: read or start)
    ("POST", "/flows/{flowId}/schedules"): Entry(
        _with(FLOW + "/schedules", {"cron": "0 4 * * *"}), (((JOB_START, "flow"),),), 201
    ),
    ("GET", "/flows/{flowId}/schedules"): Entry(
        _get(FLOW + "/schedules"), (((JOB_READ, "flow"),), ((JOB_START, "flow"),))
    ),
    ("DELETE", "/flows/{flowId}/schedules/{scheduleId}"): Entry(
        _get(FLOW + "/schedules/{flow_schedule}"), (((JOB_START, "flow"),),), 204
    ),
    ("GET", "/failedItems"): Entry(
        _get("/failedItems"), (((JOB_READ, "flow"),),), hidden=lambda w: w.ids["failed_item"]
    ),
    ("POST", "/failedItems/{failedItemId}/retry"): Entry(
        _with("/failedItems/{failed_item}/retry"),
        (((JOB_START, "flow"), (JOB_READ, "flow")),),
        202,
    ),
}

# Operations no API key authorizes: what an admin key gets there (it is no credential).
NOT_BY_API_KEY: dict[tuple[str, str], tuple[str, int]] = {
    ("GET", "/v1/health"): ("/v1/health", 200),  # open to anyone
    ("POST", "/v1/callbacks/{token}"): ("/v1/callbacks/not-a-token", 404),  # the URL's token
    ("POST", "/v1/invocations/steps"): ("/v1/invocations/steps", 401),  # invocation token
    ("POST", "/v1/invocations/outcome"): ("/v1/invocations/outcome", 401),
    ("POST", "/v1/invocations/heartbeat"): ("/v1/invocations/heartbeat", 401),
    ("POST", "/v1/invocations/history"): ("/v1/invocations/history", 401),
    ("POST", "/v1/invocations/payload"): ("/v1/invocations/payload", 401),
}


def _document_operations() -> set[tuple[str, str]]:
    from functions.api.handler import handler  # noqa: F401 (the resolver with every route)

    answer = call("GET", "/v1/openapi.json")
    assert answer.status == 200
    found = set()
    for path, item in answer.body["paths"].items():
        for method in item:
            if method.lower() in ("get", "post", "put", "patch", "delete"):
                short = path[len(PREFIX) :] if path.startswith(PREFIX) else path
                found.add((method.upper(), short))
    return found


def test_every_operation_of_the_openapi_document_has_a_matrix_entry(aws_env: None) -> None:
    operations = _document_operations()
    assert operations, "the OpenAPI document lists no operation"
    covered = set(MATRIX) | set(NOT_BY_API_KEY)
    assert operations - covered == set(), "operations without an authorization entry"
    assert covered - operations == set(), "entries for operations the document lacks"


@pytest.mark.parametrize(("method", "path"), sorted(NOT_BY_API_KEY))
def test_an_api_key_is_no_credential_where_another_authorizes(
    project: Project, method: str, path: str
) -> None:
    concrete, status = NOT_BY_API_KEY[(method, path)]
    body = {"ops": [], "taskId": "x"} if method == "POST" else None
    answer = call(method, concrete, headers=project.auth(), body=body)
    assert answer.status == status, answer.body


# --- the matrix -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _engine_env(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(
        config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
    )
    monkeypatch.setenv("EZGH_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    # The push app's own HTTP answer to a sync (the network is not ours to reach here).
    monkeypatch.setattr(push, "sync_app", lambda app: push.Synced(["a"], "1.5"))
    config.reset_settings()
    event_sources.LOCAL.clear()
    yield
    event_sources.LOCAL.clear()


def _all_items(name: str) -> list[dict[str, Any]]:
    """Every item of table `name`, in DynamoDB's JSON form. On moto, read from its in-process
    backend: a `Scan` per refused call, serialized by moto, was most of this module's time."""
    if os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"):  # DynamoDB Local (EZGH_DDBLOCAL=all)
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        return list(ddb.scan(TableName=name, ConsistentRead=True)["Items"])
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    table = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(name)
    return [item.to_json()["Attributes"] for item in table.all_items()]


def snapshot() -> Any:
    """Everything a request could change: every item of every table, every queue's depth,
    the event-source mappings."""
    tables = {}
    for table in TOPOLOGY.tables:
        name = ENV[table.env_var]
        found = _all_items(name)
        # default=repr: binary attributes (sealed keys, a commit's compressed graph) by bytes
        tables[name] = sorted(json.dumps(item, sort_keys=True, default=repr) for item in found)
    mappings = json.dumps(event_sources.LOCAL, sort_keys=True, default=str)
    return tables, _queue_depths(), mappings


def _queue_depths() -> dict[str, tuple[int, int]]:
    """Every queue's visible and in-flight message counts, by queue name, read from moto's
    in-process backend (SQS is moto's on either DynamoDB backend): a `ListQueues` and a
    `GetQueueAttributes` per queue for each refused call, serialized by moto, were most of a
    snapshot's time. These are the properties moto answers `GetQueueAttributes` from."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    queues = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues
    return {
        name: (
            queue.approximate_number_of_messages,
            queue.approximate_number_of_messages_not_visible,
        )
        for name, queue in queues.items()
    }


def _grant(world: World, action: str, resource: str | None) -> tuple[str, str | None]:
    return action, world.resource(resource)


def _family(world: World, action: str) -> str | None:
    """The resource a key scoped to `action` would name here."""
    if action.startswith("workflows.runs."):
        return "alpha/a"
    if action == APPS:
        return "alpha"
    if action.startswith("flows."):
        return "f1"
    return world.ids["q1"]


def _covers(have: set[tuple[str, str | None]], needs: tuple[tuple[str, str | None], ...]) -> bool:
    return all(
        any(a in ("*", action) and (r is None or r == resource) for a, r in have)
        for action, resource in needs
    )


def _refusing_keys(world: World, entry: Entry) -> list[tuple[tuple[str, str | None], ...]]:
    """Every single permission (scoped alike, and unscoped) and every alternative on another
    resource, less those that cover one of the entry's alternatives."""
    needed = [tuple(_grant(world, a, r) for a, r in alt) for alt in entry.needs]
    candidates: list[tuple[tuple[str, str | None], ...]] = []
    for action in ACTIONS:
        candidates += [((action, _family(world, action)),), ((action, None),)]
    for alt in entry.needs:
        candidates.append(tuple((a, world.resource(r, other=True)) for a, r in alt))
    return [
        perms
        for perms in dict.fromkeys(candidates)
        if perms and not any(_covers(set(perms), alt) for alt in needed)
    ]


def _refused(answer: Any, world: World, entry: Entry) -> bool:
    if answer.status == 403 and answer.body["error"]["code"] == "forbidden":
        return True
    return (
        entry.hidden is not None and answer.status == 200 and entry.hidden(world) not in answer.raw
    )


@pytest.mark.parametrize(("method", "path"), sorted(MATRIX))
def test_exactly_the_needed_permission_passes_and_nothing_else_does(
    project: Project, method: str, path: str
) -> None:
    entry = MATRIX[(method, path)]
    world = build_world(project)
    subpath, kwargs = entry.request(world)
    if entry.needs == OPEN:
        for action in ACTIONS:
            anyone = key(project, (action, _family(world, action)))
            answer = project.call(method, subpath, key=anyone, **kwargs)
            assert answer.status == entry.ok, (action, answer.body)
        return
    refusing = [(perms, key(project, *perms)) for perms in _refusing_keys(world, entry)]
    exact = [key(project, *(_grant(world, a, r) for a, r in alt)) for alt in entry.needs]
    before = snapshot()
    for perms, secret in refusing:
        answer = project.call(method, subpath, key=secret, **kwargs)
        assert _refused(answer, world, entry), (perms, answer.status, answer.body)
        assert snapshot() == before, f"a refused call with {perms} changed the state"
    answer = project.call(method, subpath, key=exact[0], **kwargs)
    assert answer.status == entry.ok, answer.body
    if entry.hidden is not None:
        assert entry.hidden(world) in answer.raw
    for other in exact[1:]:  # the other alternatives pass too (reads: no state to undo)
        again = project.call(method, subpath, key=other, **kwargs)
        assert again.status == entry.ok, again.body


# --- an app's code: it acts for the key recorded on its app -------------------------------


def test_an_apps_code_starts_another_apps_workflow_only_with_start_on_it(
    project: Project,
) -> None:
    """alpha's code invokes beta/other (`ctx.step.invoke(..., app="beta")`), acting for the key
    whose worker last announced alpha. Exactly `workflows.runs.start` on beta/other passes;
    every other single permission (scoped alike, or unscoped), and start on another workflow,
    fail the step with `workflows.forbidden` and start no child run."""
    from tests.api.test_app_scope import _announce, _children, _invoke

    world = build_world(project)
    alpha = {"id": world.ids["alpha"]}
    entry = Entry(_get("/"), (((START, "betawf"),),))
    update = (APPS, "alpha")  # what announcing a worker of alpha needs
    refusing = _refusing_keys(world, entry)
    for perms in refusing:
        _announce(project, alpha, key(project, update, *perms))
        run_id = start(project, alpha, "a")
        invoked = _invoke(run_id)
        assert invoked.status == "failed", (perms, invoked)
        assert invoked.error.code == "workflows.forbidden", (perms, invoked.error)
        assert _children(run_id) == [], perms
    _announce(project, alpha, key(project, update, (START, "beta/other")))
    run_id = start(project, alpha, "a")
    assert _invoke(run_id).status == "waiting"
    assert _children(run_id) == [project.call("GET", "/apps/beta").body["id"]]


# --- every node type: what a graph names outright, checked at commit and at start ----------

# Per module type: a node's config naming its resources outright, and the permissions a key
# needs on them beyond flows.manage (commit) or flows.jobs.start (start) on the flow. The
# same needs are checked again when the node runs (tests/e2e/test_flow_authority.py runs a
# job of every node type with keys that hold them and keys that do not).
NODES: dict[str, tuple[Callable[[World], dict[str, Any]], tuple[tuple[str, str], ...]]] = {
    "trigger.manual": (lambda w: {}, ()),
    "transform": (lambda w: {"expression": "input"}, ()),
    "condition": (lambda w: {"expression": "input"}, ()),
    "http.request": (lambda w: {"url": "https://hooks.example.com/in"}, ()),
    "delay": (lambda w: {"seconds": 5}, ()),
    "wait.event": (
        lambda w: {"queueId": w.ids["q1"], "key": "k", "timeoutSeconds": 60},
        ((SUBS, "queue"),),
    ),
    "queue.send": (
        lambda w: {"queueId": w.ids["q1"], "messages": [{"body": "x"}]},
        ((SEND, "queue"),),
    ),
    "workflow.invoke": (lambda w: {"appId": w.ids["alpha"], "workflow": "a"}, ((START, "wf"),)),
    "flow.invoke": (lambda w: {"flowId": "f2"}, ((JOB_START, "flow2"),)),
    "comment": (lambda w: {"text": "a note"}, ()),
}


def test_every_module_type_has_a_node_entry() -> None:
    assert set(NODES) == set(MODULE_TYPES)


def _graph(world: World, module_type: str) -> dict[str, Any]:
    if module_type == "trigger.manual":
        return {"nodes": [{"id": "n", "moduleType": module_type}], "edges": []}
    node = {"id": "n", "moduleType": module_type, "config": NODES[module_type][0](world)}
    edges = [] if module_type == "comment" else [{"source": "start", "target": "n"}]
    return {"nodes": [{"id": "start", "moduleType": "trigger.manual"}, node], "edges": edges}


@pytest.mark.parametrize("module_type", sorted(NODES))
def test_a_node_is_committed_and_started_only_by_keys_that_hold_what_it_needs(
    project: Project, module_type: str
) -> None:
    """A graph naming a resource outright: committed by a key with flows.manage and the
    node's needs (201), refused (403, nothing changed) to one without them or with them on
    another resource; the same for starting a job of it with flows.jobs.start."""
    world = build_world(project)
    graph = _graph(world, module_type)
    needs = tuple(_grant(world, a, r) for a, r in NODES[module_type][1])
    elsewhere = tuple((a, world.resource(r, other=True)) for a, r in NODES[module_type][1])
    for base, path, body in (
        (FLOWS, "/flows/f1/commits", {"graph": graph}),  # (the start below runs this commit)
        (JOB_START, "/flows/f1/jobs", {}),
    ):
        flow = _grant(world, base, "flow")
        refusing = [needs[:i] for i in range(len(needs))] + ([elsewhere] if needs else [])
        keys = [(perms, key(project, flow, *perms)) for perms in refusing]
        before = snapshot()
        for perms, secret in keys:
            answer = project.call("POST", path, key=secret, body=body)
            assert answer.status == 403, (module_type, base, perms, answer.body)
            assert "node n" in answer.body["error"]["message"], answer.body
            assert snapshot() == before, f"a refused call with {perms} changed the state"
        answer = project.call("POST", path, key=key(project, flow, *needs), body=body)
        assert answer.status == 201, (module_type, base, answer.body)
