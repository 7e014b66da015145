"""DynamoDB access for EzFlow in the `registry` table. Item layout:

| pk | sk | what |
| --- | --- | --- |
| `FLOW#<id>` | `FLOW` | a flow (gsi1: `FLOWS#<project>` / name) |
| `FLOWNAME#<project>#<name>`, `FLOWSLUG#<slug>` | same | pointers to the flow's id |
| `FLOW#<id>` | `COMMIT#<createdAt>#<commitId>` | an immutable commit with its graph |
| `FLOW#<id>` | `BRANCH#<branch>` | a branch's latest commit (its sort key) |
| `JOB#<runId>` | `JOB` | a job's index entry (gsi1: `JOBS#<project>` / createdAt#id) |
| `FAILED#<id>` | `FAILED` | a failed item (gsi1: `FAILEDS#<project>` / createdAt#id) |

A job is a run of the interpreter app: the run holds its state; the index entry only makes
jobs searchable by flow and trackingId. Every write is conditional.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import aws
from ezgh_engine.adapters.ddb import cancellation_codes, is_condition_failure
from ezgh_engine.adapters.registry_store import (
    ddb,
    delete_with_pointers,
    get_item,
    item_key,
    table,
)
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


# --- jobs ----------------------------------------------------------------------------------


def put_job(job: JobEntry) -> None:
    """Index a job once (a second put of the same job is a no-op)."""
    item = {
        **item_key(f"JOB#{job.id}", "JOB"),
        "id": _s(job.id),
        "projectId": _s(job.project_id),
        "flowId": _s(job.flow_id),
        "commitId": _s(job.commit_id),
        "branch": _s(job.branch),
        "trackingId": _s(job.tracking_id),
        "createdAt": _s(job.created_at),
        "gsi1pk": _s(f"JOBS#{job.project_id}"),
        "gsi1sk": _s(f"{job.created_at}#{job.id}"),
    }
    try:
        ddb().put_item(TableName=table(), Item=item, ConditionExpression="attribute_not_exists(pk)")
    except ClientError as err:
        if not is_condition_failure(err):
            raise


def _job(item: dict[str, Any]) -> JobEntry:
    return JobEntry(
        id=item["id"]["S"],
        project_id=item["projectId"]["S"],
        flow_id=item["flowId"]["S"],
        commit_id=item["commitId"]["S"],
        branch=item["branch"]["S"],
        tracking_id=item["trackingId"]["S"],
        created_at=item["createdAt"]["S"],
    )


def get_job(project_id: str, job_id: str) -> JobEntry | None:
    item = get_item(f"JOB#{job_id}", "JOB")
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
    """One page of a gsi1 partition, newest first, with equality filters and a time range on
    `createdAt`; (items, cursor of the next page or None)."""
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
        "TableName": table(),
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
    page = ddb().query(**kwargs)
    return page.get("Items", []), _encode(page.get("LastEvaluatedKey"))


def job_from_item(item: dict[str, Any]) -> JobEntry:
    return _job(item)


def cursor_at(item: dict[str, Any]) -> str | None:
    """A cursor that resumes right after `item` of a gsi1 query."""
    return _encode({k: item[k] for k in ("pk", "sk", "gsi1pk", "gsi1sk")})


# --- failed items --------------------------------------------------------------------------


def put_failed_item(failed: FailedItem) -> None:
    """Record a failed node execution once (its ID is derived from job, attempt and node)."""
    item = {
        **item_key(f"FAILED#{failed.id}", "FAILED"),
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
    try:
        ddb().put_item(TableName=table(), Item=item, ConditionExpression="attribute_not_exists(pk)")
    except ClientError as err:
        if not is_condition_failure(err):
            raise


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
    item = get_item(f"FAILED#{failed_id}", "FAILED")
    failed = failed_from_item(item) if item else None
    return failed if failed and failed.project_id == project_id else None


def mark_retried(failed: FailedItem, at: str) -> FailedItem:
    """Set `retriedAt` once; a second retry of the same item is `409 invalid_state`."""
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(f"FAILED#{failed.id}", "FAILED"),
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


def find_app_id(project_id: str, name: str) -> str | None:
    """The ID of the project's app with this name (the interpreter app), or None."""
    item = get_item(f"APPNAME#{project_id}#{name}", "APPNAME")
    return item["appId"]["S"] if item else None
