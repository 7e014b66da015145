"""DynamoDB access for EzFlow. Item layout:

| table | pk | sk | what |
| --- | --- | --- | --- |
| registry | `FLOW#<id>` | `FLOW` | a flow (gsi1: `FLOWS#<project>` / name) |
| registry | `FLOWNAME#<project>#<name>`, `FLOWSLUG#<slug>` | same | pointers to the flow's id |
| registry | `FLOW#<id>` | `COMMIT#<createdAt>#<commitId>` | an immutable commit with its graph |
| registry | `FLOW#<id>` | `BRANCH#<branch>` | a branch's latest commit (its sort key) |
| runs | `RUN#<jobId>` | `JOB` | a job's index entry (gsi1: `JOBS#<project>` / createdAt#id) |
| runs | `RUN#<jobId>` | `FAILED#<attempt>#<nodeId>` | a failed item (gsi1: `FAILEDS#<project>` / createdAt#id) |

A job is a run of the interpreter: the run holds its state; the index entry makes jobs
searchable by flow and trackingId. The index entry and the failed items live in the job's
run partition, so they go with the run: 30 days after the job ends (the run item's TTL;
`service/retention.py` deletes the rest of the partition), with a TTL of their own as a
backstop. Every write is conditional.
"""

from __future__ import annotations

import base64
import collections
import json
import threading
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.adapters.ddb import cancellation_codes, is_condition_failure
from ezgh_engine.adapters.registry_store import (
    ddb,
    delete_with_pointers,
    get_item,
    item_key,
    table,
)
from ezgh_engine.config import settings
from ezgh_engine.core.events import STEP_PREFIX
from ezgh_engine.core.flows.jobs import WAIT_PREFIX
from ezgh_engine.core.validation import is_uuid
from ezgh_engine.errors import Conflict, PayloadTooLarge, ValidationError

MAX_GRAPH_BYTES = 300 * 1024  # a DynamoDB item holds 400 KB


def _s(value: str) -> dict[str, str]:
    return {"S": value}


@dataclass(frozen=True)
class Flow:
    id: str
    slug: str
    project_id: str
    name: str
    description: str | None
    active_branch: str
    created_at: str
    version: int = 1

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "name": self.name,
            "description": self.description,
            "activeBranch": self.active_branch,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True)
class Commit:
    id: str
    flow_id: str
    branch: str
    message: str | None
    created_at: str
    graph: dict[str, Any]

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "flowId": self.flow_id,
            "branch": self.branch,
            "message": self.message,
            "createdAt": self.created_at,
            "graph": self.graph,
        }


@dataclass(frozen=True)
class JobEntry:
    """What makes a job searchable; its state is the run's."""

    id: str
    project_id: str
    flow_id: str
    commit_id: str
    branch: str
    tracking_id: str
    created_at: str
    # Whether its commit has wait nodes (delay, wait.event): only then can it be WAITING.
    waits: bool = True


@dataclass(frozen=True)
class FailedItem:
    id: str
    project_id: str
    job_id: str
    flow_id: str
    node_id: str
    module_type: str
    input: Any
    error: dict[str, Any]
    attempts: int
    created_at: str
    retried_at: str | None = None

    def to_api(self) -> dict[str, Any]:
        body = {
            "id": self.id,
            "jobId": self.job_id,
            "flowId": self.flow_id,
            "nodeId": self.node_id,
            "moduleType": self.module_type,
            "input": self.input,
            "error": self.error,
            "attempts": self.attempts,
            "createdAt": self.created_at,
        }
        if self.retried_at:
            body["retriedAt"] = self.retried_at
        return body


# --- flows ---------------------------------------------------------------------------------


def _flow_item(flow: Flow) -> dict[str, Any]:
    item: dict[str, Any] = {
        **item_key(f"FLOW#{flow.id}", "FLOW"),
        "id": _s(flow.id),
        "slug": _s(flow.slug),
        "projectId": _s(flow.project_id),
        "name": _s(flow.name),
        "activeBranch": _s(flow.active_branch),
        "createdAt": _s(flow.created_at),
        "version": {"N": str(flow.version)},
        "gsi1pk": _s(f"FLOWS#{flow.project_id}"),
        "gsi1sk": _s(flow.name),
    }
    if flow.description is not None:
        item["description"] = _s(flow.description)
    return item


def _flow(item: dict[str, Any]) -> Flow:
    return Flow(
        id=item["id"]["S"],
        slug=item["slug"]["S"],
        project_id=item["projectId"]["S"],
        name=item["name"]["S"],
        description=item["description"]["S"] if "description" in item else None,
        active_branch=item["activeBranch"]["S"],
        created_at=item["createdAt"]["S"],
        version=int(item["version"]["N"]),
    )


def _put_new(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "Put": {
                "TableName": table(),
                "Item": i,
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
        for i in items
    ]


def create_flow(flow: Flow) -> Flow:
    """Store a flow with its name and slug pointers; a taken name is `409 invalid_state`."""
    name = {
        **item_key(f"FLOWNAME#{flow.project_id}#{flow.name}", "FLOWNAME"),
        "flowId": _s(flow.id),
    }
    slug = {**item_key(f"FLOWSLUG#{flow.slug}", "FLOWSLUG"), "flowId": _s(flow.id)}
    try:
        ddb().transact_write_items(TransactItems=_put_new([_flow_item(flow), name, slug]))
    except ClientError as err:
        reasons = cancellation_codes(err)
        if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
            raise Conflict(
                f"a flow named {flow.name!r} already exists in this project", code="invalid_state"
            ) from err
        raise
    return flow


def get_flow(project_id: str, ref: str) -> Flow | None:
    """The flow named by its UUID, `wff_` slug or name; None when absent or another project's."""
    pointer = None
    if ref.startswith("wff_"):
        pointer = get_item(f"FLOWSLUG#{ref}", "FLOWSLUG")
    if pointer is None:
        pointer = get_item(f"FLOWNAME#{project_id}#{ref}", "FLOWNAME")
    flow_id = pointer["flowId"]["S"] if pointer else ref
    item = get_item(f"FLOW#{flow_id}", "FLOW")
    flow = _flow(item) if item else None
    return flow if flow and flow.project_id == project_id else None


def get_flow_by_id(project_id: str, flow_id: str) -> Flow | None:
    """The flow with this UUID (one read), or None when absent or another project's."""
    item = get_item(f"FLOW#{flow_id}", "FLOW")
    flow = _flow(item) if item else None
    return flow if flow and flow.project_id == project_id else None


def list_flows(project_id: str) -> list[Flow]:
    """Every flow of the project, by name."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": table(),
        "IndexName": "gsi1",
        "KeyConditionExpression": "gsi1pk = :p",
        "ExpressionAttributeValues": {":p": _s(f"FLOWS#{project_id}")},
    }
    while True:
        page = ddb().query(**kwargs)
        items += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return [_flow(i) for i in items]
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def save_flow(flow: Flow) -> Flow:
    """Write over the stored flow if its version is still the one read; else Conflict."""
    saved = replace(flow, version=flow.version + 1)
    try:
        ddb().put_item(
            TableName=table(),
            Item=_flow_item(saved),
            ConditionExpression="version = :v",
            ExpressionAttributeValues={":v": {"N": str(flow.version)}},
        )
    except ClientError as err:
        if is_condition_failure(err):
            raise Conflict(f"flow {flow.id} changed or was deleted meanwhile; retry") from err
        raise
    return saved


def delete_flow(flow: Flow) -> None:
    """Delete the flow and its pointers (its commits stay, unreachable: jobs keep theirs)."""
    keys = [
        item_key(f"FLOW#{flow.id}", "FLOW"),
        item_key(f"FLOWNAME#{flow.project_id}#{flow.name}", "FLOWNAME"),
        item_key(f"FLOWSLUG#{flow.slug}", "FLOWSLUG"),
    ]
    delete_with_pointers(keys, f"flow {flow.id}")


# --- commits -------------------------------------------------------------------------------


def _commit_sk(commit: Commit) -> str:
    return f"COMMIT#{commit.created_at}#{commit.id}"


def _commit(item: dict[str, Any]) -> Commit:
    return Commit(
        id=item["id"]["S"],
        flow_id=item["flowId"]["S"],
        branch=item["branch"]["S"],
        message=item["message"]["S"] if "message" in item else None,
        created_at=item["createdAt"]["S"],
        graph=json.loads(item["graph"]["S"]),
    )


def add_commit(commit: Commit) -> Commit:
    """Store an immutable commit and move its branch's head to it, in one transaction.

    The head moves only forward (a commit older than the head, a clock oddity, is refused).
    """
    text = json.dumps(commit.graph, separators=(",", ":"))
    if len(text.encode()) > MAX_GRAPH_BYTES:
        raise PayloadTooLarge(f"the graph is larger than {MAX_GRAPH_BYTES} bytes")
    item: dict[str, Any] = {
        **item_key(f"FLOW#{commit.flow_id}", _commit_sk(commit)),
        "id": _s(commit.id),
        "flowId": _s(commit.flow_id),
        "branch": _s(commit.branch),
        "createdAt": _s(commit.created_at),
        "graph": _s(text),
    }
    if commit.message is not None:
        item["message"] = _s(commit.message)
    head = {
        **item_key(f"FLOW#{commit.flow_id}", f"BRANCH#{commit.branch}"),
        "commitSk": _s(_commit_sk(commit)),
    }
    try:
        ddb().transact_write_items(
            TransactItems=[
                *_put_new([item]),
                {
                    "Put": {
                        "TableName": table(),
                        "Item": head,
                        "ConditionExpression": "attribute_not_exists(pk) OR commitSk < :sk",
                        "ExpressionAttributeValues": {":sk": _s(_commit_sk(commit))},
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": table(),
                        "Key": item_key(f"FLOW#{commit.flow_id}", "FLOW"),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    except ClientError as err:
        if cancellation_codes(err) and not aws.is_throttle(err):  # else 429, not a refusal
            raise Conflict(f"commit to flow {commit.flow_id} raced another; retry") from err
        raise
    return commit


def branch_head(flow_id: str, branch: str) -> Commit | None:
    """The latest commit of a branch, or None when the branch has none."""
    head = get_item(f"FLOW#{flow_id}", f"BRANCH#{branch}")
    if head is None:
        return None
    item = get_item(f"FLOW#{flow_id}", head["commitSk"]["S"])
    return _commit(item) if item else None


_COMMITS: collections.OrderedDict[tuple[str, str, str], Commit] = collections.OrderedDict()
_COMMITS_KEPT = 32
_COMMITS_LOCK = threading.Lock()


def get_commit(flow_id: str, created_at: str, commit_id: str) -> Commit | None:
    """A commit by its flow, time and ID (its key), or None. Commits never change, so the
    last ones a process read are kept (the interpreter reads its job's graph at every
    invocation); an absent one is read again next time."""
    key = (flow_id, created_at, commit_id)
    with _COMMITS_LOCK:
        if key in _COMMITS:
            _COMMITS.move_to_end(key)
            return _COMMITS[key]
    item = get_item(f"FLOW#{flow_id}", f"COMMIT#{created_at}#{commit_id}")
    commit = _commit(item) if item else None
    if commit is not None and commit.id == commit_id:
        with _COMMITS_LOCK:
            _COMMITS[key] = commit
            while len(_COMMITS) > _COMMITS_KEPT:
                _COMMITS.popitem(last=False)
    return commit


def _encode(key: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode() if key else None


_CURSOR_KEYS = {"pk", "sk", "gsi1pk", "gsi1sk"}


def _decode(cursor: str | None, field: str, partition: str) -> dict[str, Any] | None:
    """The start key in a cursor this API gave for this partition; else 400 (a forged or
    foreign cursor must never reach DynamoDB, which would refuse it with a 5xx)."""
    if not cursor:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except ValueError:
        key = None
    well_formed = (
        isinstance(key, dict)
        and set(key) <= _CURSOR_KEYS
        and {"pk", "sk"} <= set(key)
        and all(
            isinstance(v, dict) and isinstance(v.get("S"), str) and len(v) == 1
            for v in key.values()
        )
    )
    if not well_formed or key.get(field, {}).get("S") != partition:
        raise ValidationError("cursor: not a cursor this API gave")
    return dict(key)


def list_commits(
    flow_id: str, *, branch: str | None, limit: int, cursor: str | None
) -> tuple[list[Commit], str | None]:
    """Commits newest first, optionally of one branch; (page, next cursor)."""
    found: list[Commit] = []
    start = _decode(cursor, "pk", f"FLOW#{flow_id}")
    while True:
        kwargs: dict[str, Any] = {
            "TableName": table(),
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {":p": _s(f"FLOW#{flow_id}"), ":c": _s("COMMIT#")},
            "ScanIndexForward": False,
            "Limit": limit,
            "ConsistentRead": True,
        }
        if branch is not None:
            kwargs["FilterExpression"] = "branch = :b"
            kwargs["ExpressionAttributeValues"][":b"] = _s(branch)
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = ddb().query(**kwargs)
        for item in page.get("Items", []):
            found.append(_commit(item))
            if len(found) == limit:
                key = item_key(item["pk"]["S"], item["sk"]["S"])
                return found, _encode(key)
        start = page.get("LastEvaluatedKey")
        if not start:
            return found, None


# --- jobs and failed items (the runs table, in the job's run partition) ---------------------

# A backstop: the run's removal deletes them first (as a run's step items).
_JOB_ITEM_TTL_SECONDS = 396 * 24 * 3600


def _runs() -> str:
    return settings().runs_table


def _runs_ddb() -> Any:
    return aws.client("dynamodb")


def _put_once(item: dict[str, Any]) -> None:
    """Write `item` to the runs table unless its key exists (a repeated put is a no-op)."""
    item["ttl"] = {"N": str(int(clock.now().timestamp()) + _JOB_ITEM_TTL_SECONDS)}
    try:
        _runs_ddb().put_item(
            TableName=_runs(), Item=item, ConditionExpression="attribute_not_exists(pk)"
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise


def _runs_item(pk: str, sk: str) -> dict[str, Any] | None:
    answer = _runs_ddb().get_item(TableName=_runs(), Key=item_key(pk, sk), ConsistentRead=True)
    item: dict[str, Any] | None = answer.get("Item")
    return item


def put_job(job: JobEntry) -> None:
    """Index a job once (a second put of the same job is a no-op)."""
    item = {
        **item_key(f"RUN#{job.id}", "JOB"),
        "id": _s(job.id),
        "projectId": _s(job.project_id),
        "flowId": _s(job.flow_id),
        "commitId": _s(job.commit_id),
        "branch": _s(job.branch),
        "trackingId": _s(job.tracking_id),
        "createdAt": _s(job.created_at),
        "waits": {"BOOL": job.waits},
        "gsi1pk": _s(f"JOBS#{job.project_id}"),
        "gsi1sk": _s(f"{job.created_at}#{job.id}"),
    }
    _put_once(item)


def _job(item: dict[str, Any]) -> JobEntry:
    return JobEntry(
        id=item["id"]["S"],
        project_id=item["projectId"]["S"],
        flow_id=item["flowId"]["S"],
        commit_id=item["commitId"]["S"],
        branch=item["branch"]["S"],
        tracking_id=item["trackingId"]["S"],
        created_at=item["createdAt"]["S"],
        waits=bool(item.get("waits", {}).get("BOOL", True)),
    )


def get_job(project_id: str, job_id: str) -> JobEntry | None:
    item = _runs_item(f"RUN#{job_id}", "JOB")
    job = _job(item) if item else None
    return job if job and job.project_id == project_id else None


def scan_index(
    partition: str,
    filters: dict[str, str],
    *,
    after: str | None,
    before: str | None,
    cursor: str | None,
    page_size: int = 100,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a runs-table gsi1 partition (jobs, failed items), newest first, with
    equality filters and a time range on `createdAt`; (items, cursor of the next page or
    None). DynamoDB reads at most `page_size` entries before filtering."""
    values: dict[str, Any] = {":p": _s(partition)}
    condition = "gsi1pk = :p"
    if after or before:
        condition += " AND gsi1sk BETWEEN :lo AND :hi"
        values[":lo"] = _s(after or "")
        values[":hi"] = _s((before or "~") + "~")
    names: dict[str, str] = {}
    clauses = []
    for i, (name, value) in enumerate(sorted(filters.items())):
        names[f"#f{i}"] = name
        values[f":f{i}"] = _s(value)
        clauses.append(f"#f{i} = :f{i}")
    kwargs: dict[str, Any] = {
        "TableName": _runs(),
        "IndexName": "gsi1",
        "KeyConditionExpression": condition,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
        "Limit": page_size,
    }
    if clauses:
        kwargs["FilterExpression"] = " AND ".join(clauses)
        kwargs["ExpressionAttributeNames"] = names
    start = _decode(cursor, "gsi1pk", partition)
    if start:
        if "gsi1sk" not in start:
            raise ValidationError("cursor: not a cursor this API gave")
        kwargs["ExclusiveStartKey"] = start
    page = _runs_ddb().query(**kwargs)
    return page.get("Items", []), _encode(page.get("LastEvaluatedKey"))


def job_from_item(item: dict[str, Any]) -> JobEntry:
    return _job(item)


def cursor_at(item: dict[str, Any]) -> str | None:
    """A cursor that resumes right after `item` of a gsi1 query."""
    return _encode({k: item[k] for k in ("pk", "sk", "gsi1pk", "gsi1sk")})


def run_items(job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The run items of these jobs (one BatchGetItem per 100, consistent reads), by ID;
    a job whose run is gone has none."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(job_ids), 100):
        keys = [item_key(f"RUN#{j}", "RUN") for j in dict.fromkeys(job_ids[start : start + 100])]
        request: dict[str, Any] = {_runs(): {"Keys": keys, "ConsistentRead": True}}
        for _ in range(8):  # unprocessed keys (throttling) go again
            answer = _runs_ddb().batch_get_item(RequestItems=request)
            for item in answer.get("Responses", {}).get(_runs(), []):
                found[item["id"]["S"]] = item
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                break
    return found


def wait_steps(job_id: str) -> list[dict[str, Any]]:
    """The step items of a job's wait nodes (delay, wait.event: named `wait:<nodeId>`),
    without the others (one query of just those items)."""
    answer = _runs_ddb().query(
        TableName=_runs(),
        KeyConditionExpression="pk = :p AND begins_with(sk, :w)",
        ExpressionAttributeValues={":p": _s(f"RUN#{job_id}"), ":w": _s(STEP_PREFIX + WAIT_PREFIX)},
        ConsistentRead=True,
    )
    items: list[dict[str, Any]] = answer.get("Items", [])
    return items


def failed_item_key(failed_id: str) -> tuple[str, str] | None:
    """Where a failed item is, from its ID `<jobId>.<attempt>.<nodeId>` (None: no such
    form)."""
    job_id, _, rest = failed_id.partition(".")
    attempt, _, node_id = rest.partition(".")
    if not (is_uuid(job_id) and attempt.isdigit() and node_id):
        return None
    return f"RUN#{job_id}", f"FAILED#{attempt}#{node_id}"


def put_failed_item(failed: FailedItem) -> None:
    """Record a failed node execution once (its ID is derived from job, attempt and node)."""
    key = failed_item_key(failed.id)
    assert key is not None, failed.id
    item = {
        **item_key(*key),
        "id": _s(failed.id),
        "projectId": _s(failed.project_id),
        "jobId": _s(failed.job_id),
        "flowId": _s(failed.flow_id),
        "nodeId": _s(failed.node_id),
        "moduleType": _s(failed.module_type),
        "input": _s(json.dumps(failed.input)),
        "error": _s(json.dumps(failed.error)),
        "attempts": {"N": str(failed.attempts)},
        "createdAt": _s(failed.created_at),
        "gsi1pk": _s(f"FAILEDS#{failed.project_id}"),
        "gsi1sk": _s(f"{failed.created_at}#{failed.id}"),
    }
    _put_once(item)


def failed_from_item(item: dict[str, Any]) -> FailedItem:
    return FailedItem(
        id=item["id"]["S"],
        project_id=item["projectId"]["S"],
        job_id=item["jobId"]["S"],
        flow_id=item["flowId"]["S"],
        node_id=item["nodeId"]["S"],
        module_type=item["moduleType"]["S"],
        input=json.loads(item["input"]["S"]),
        error=json.loads(item["error"]["S"]),
        attempts=int(item["attempts"]["N"]),
        created_at=item["createdAt"]["S"],
        retried_at=item["retriedAt"]["S"] if "retriedAt" in item else None,
    )


def get_failed_item(project_id: str, failed_id: str) -> FailedItem | None:
    key = failed_item_key(failed_id)
    item = _runs_item(*key) if key else None
    failed = failed_from_item(item) if item else None
    return failed if failed and failed.project_id == project_id else None


def mark_retried(failed: FailedItem, at: str) -> FailedItem:
    """Set `retriedAt` once; a second retry of the same item is `409 invalid_state`."""
    key = failed_item_key(failed.id)
    assert key is not None, failed.id
    try:
        _runs_ddb().update_item(
            TableName=_runs(),
            Key=item_key(*key),
            UpdateExpression="SET retriedAt = :at",
            ConditionExpression="attribute_exists(pk) AND attribute_not_exists(retriedAt)",
            ExpressionAttributeValues={":at": _s(at)},
        )
    except ClientError as err:
        if is_condition_failure(err):
            raise Conflict(
                f"failed item {failed.id} was already retried", code="invalid_state"
            ) from err
        raise
    return replace(failed, retried_at=at)
