"""DynamoDB access for runs: create, read, search, delete, events.

Every write is conditional; a lost race raises or answers what the winner wrote, never a
second effect. Invocation leases and outcomes are in `invocations_store`; step writes in
`steps_store`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import ids
from ezgh_engine.adapters import (
    ddb,
    event_listing,
    payloads,
    registry_store,
    run_writes,
    runs_index,
)
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.intents import NewEvent
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run, Step
from ezgh_engine.errors import TransientError, ValidationError
from ezgh_engine.topology import (
    RUNS_BY_APP,
    RUNS_BY_STATUS,
    RUNS_BY_WORKFLOW,
    RUNS_INDEX,
    RUNS_SORT_KEY,
)

# How long an ended run is kept, and how long its steps and events live (the run item's own
# TTL is set when it ends): owned by the write path.
RETENTION_SECONDS = run_writes.RETENTION_SECONDS
CHILD_ITEM_TTL_SECONDS = run_writes.CHILD_ITEM_TTL_SECONDS


class RunKeyTaken(Exception):
    """The run key belongs to another run; `run_id` names it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class RunExists(Exception):
    """A run with this (derived) ID exists already."""


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def event_put(
    run_id: str,
    attempt: int,
    event_type: str,
    at: str,
    expires: int,
    *,
    event_id: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A transaction Put of one event item (None fields are left out). Events sort by
    `event_id`, minted when the event happened (by default now)."""
    event = NewEvent(
        run_id, attempt, event_type, at, expires, event_id or ids.time_ordered_id(), fields
    )
    return run_writes.request(event)


def put_payload(project_id: str, run_id: str, path: str, text: str) -> None:
    """Store a payload of the run (a step's or the run's output) after marking its run item
    as holding payloads, so the purge lists the run's objects (`retention.purge_run`): a
    payload whose write then loses (a candidate output) is still found. Nothing is stored
    when the run item is gone: the write that would name the payload is refused too (its
    run's liveness or its step's own conditions), and no purge would find the object."""
    try:
        _ddb().update_item(
            TableName=_table(),
            Key=items.run_key(run_id),
            UpdateExpression="SET #p = :some",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#p": items.PAYLOADS_ATTR},
            ExpressionAttributeValues={":some": {"S": "some"}},
        )
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            return
        ddb.raise_transient(exc)
        raise
    payloads.put(project_id, run_id, path, text)


def create_run(run: Run, *, now_epoch_s: int) -> None:
    """Write a new run and its run-key item in one transaction (a run without a key: one
    conditional Put).

    Raises `RunKeyTaken` when the key is another run's, `RunExists` when the ID is taken.
    """
    actions: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": _table(),
                "Item": ddb.to_item(items.run_values(run, started_event=ids.time_ordered_id())),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
    ]
    if run.run_key:
        key_item = {
            "pk": items.run_key_pk_of(run),
            "sk": "RUNKEY",
            "runId": run.id,
            # No run outlives its year plus retention; nor does its key (a key whose run
            # expired sooner is taken over: `create_run_over_stale_key`).
            "ttl": now_epoch_s + CHILD_ITEM_TTL_SECONDS,
        }
        actions.append(
            {
                "Put": {
                    "TableName": _table(),
                    "Item": ddb.to_item(key_item),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        )
    if len(actions) == 1:
        # No key: the same conditional Put outside a transaction, at half the write units
        # (a transactional write is billed twice).
        try:
            _ddb().put_item(**actions[0]["Put"])
        except ClientError as exc:
            if ddb.is_condition_failure(exc):
                raise RunExists(run.id) from None
            ddb.raise_transient(exc)
            raise
        return
    try:
        _ddb().transact_write_items(TransactItems=actions)
    except ClientError as exc:
        codes = ddb.cancellation_codes(exc)
        if run.run_key and len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
            owner = run_id_for_key(run.project_id, run.run_key, _scope(run))
            if owner:
                raise RunKeyTaken(owner) from None
        if codes and codes[0] == "ConditionalCheckFailed":
            raise RunExists(run.id) from None
        ddb.raise_transient(exc)
        raise


def create_run_over_stale_key(run: Run, stale_run_id: str, *, now_epoch_s: int) -> bool:
    """Write a new run whose key still names `stale_run_id`, a run that no longer exists
    (its item expired, or was deleted without its key): the key moves to the new run in
    the run's own transaction, conditional on the old run still being absent and the key
    still naming it. False when either changed meanwhile."""
    assert run.run_key
    key_pk = items.run_key_pk_of(run)
    key_item: dict[str, Any] = {"pk": key_pk, "sk": "RUNKEY", "runId": run.id}
    key_item["ttl"] = now_epoch_s + CHILD_ITEM_TTL_SECONDS
    actions: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": _table(),
                "Item": ddb.to_item(items.run_values(run, started_event=ids.time_ordered_id())),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
        {
            "Put": {
                "TableName": _table(),
                "Item": ddb.to_item(key_item),
                "ConditionExpression": "runId = :stale",
                "ExpressionAttributeValues": {":stale": {"S": stale_run_id}},
            }
        },
        {
            "ConditionCheck": {
                "TableName": _table(),
                "Key": items.run_key(stale_run_id),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
    ]
    try:
        _ddb().transact_write_items(TransactItems=actions)
    except ClientError as exc:
        if "ConditionalCheckFailed" in ddb.cancellation_codes(exc):
            return False
        ddb.raise_transient(exc)
        raise
    return True


def _scope(run: Run) -> str:
    return items.run_key_scope(run.app_id, run.workflow)


def run_id_for_key(project_id: str, run_key: str, scope: str | None) -> str | None:
    """The run a key names within `scope` (`run_items.run_key_scope`; None: the key's
    project-wide item from before keys were scoped), or None."""
    answer = _ddb().get_item(
        TableName=_table(),
        Key=items.key(items.run_key_pk(project_id, run_key, scope), "RUNKEY"),
        ConsistentRead=True,
    )
    item = answer.get("Item")
    return str(ddb.from_item(item)["runId"]) if item else None


def _key_pk_naming(run: Run) -> str:
    """The run-key item naming `run`: its scoped one, or for a run started before keys were
    scoped, the project-wide one."""
    scoped = items.run_key_pk_of(run)
    if run_id_for_key(run.project_id, run.run_key or "", _scope(run)) == run.id:
        return scoped
    return items.run_key_pk(run.project_id, run.run_key or "", None)


# The run attempt whose launch made a parallel step's item.
RUN_ATTEMPT_ATTR = run_writes.RUN_ATTEMPT_ATTR


def get_run(run_id: str, *, with_steps: bool = True, unclaimed: bool = True) -> Run | None:
    """The run with its steps in the order they started (one query), or None. With
    `unclaimed`, also the parallel steps of the launch its item names that no branch
    message claimed yet (a second query, only while it names one): `waiting`, as they
    are (`Step.launched`)."""
    if not with_steps:
        answer = _ddb().get_item(TableName=_table(), Key=items.run_key(run_id), ConsistentRead=True)
        return items.run_from(ddb.from_item(answer["Item"])) if "Item" in answer else None
    run_values: dict[str, Any] | None = None
    step_items = []
    # "RUN" sorts after every "EVT#…" and before every "STEP#…": one range reads both.
    for values in _query_all(
        KeyConditionExpression="pk = :pk AND sk >= :run",
        ExpressionAttributeValues={":pk": {"S": items.run_pk(run_id)}, ":run": {"S": "RUN"}},
        ConsistentRead=True,
    ):
        if values["sk"] == items.RUN_SK:
            run_values = values
        elif values["sk"].startswith(items.STEP_PREFIX):
            step_items.append(values)
    if run_values is None:
        return None
    attempt = int(run_values.get("attempt", 1))
    step_items = [v for v in step_items if not stale_claim(v, attempt)]
    steps = [items.step_from(v) for v in step_items]
    if unclaimed:
        steps.extend(_unclaimed(run_id, run_values, {s.id for s in steps}))
    return items.run_from(run_values, tuple(items.with_started_next(steps, step_items, attempt)))


def stale_claim(step: dict[str, Any], run_attempt: int) -> bool:
    """Whether a step item is a pending parallel step that a branch message of an earlier
    run attempt created (delivered after a RetryRun reset the run's pending steps): no step
    of this attempt, and its claim removes it (`branches.invoke_branch`)."""
    made_by = int(step.get(RUN_ATTEMPT_ATTR, run_attempt))
    return made_by < run_attempt and step.get("status") in ("waiting", "running")


def _unclaimed(run_id: str, run_values: dict[str, Any], known: set[str]) -> list[Step]:
    """The parallel steps of the launch the run item names (`lastOut.l`, of this run
    attempt) that have no item: `waiting`, with their launch values."""
    mark = run_values.get(items.OUTCOME_ATTR)
    if not isinstance(mark, dict) or not mark.get("l"):
        return []
    attempt, entries = run_writes.launch_entries(run_id, str(mark["l"]))
    if attempt != int(run_values.get("attempt", 1)):
        return []
    out = []
    for entry in entries:
        branch = run_writes.branch_values(entry)
        if branch is None or branch[0] in known:
            continue
        values = {k: v for k, v in entry[0].items() if k != "$new"}
        out.append(replace(items.step_from(values), launched=values))
    return out


def step_values(run_id: str) -> list[dict[str, Any]]:
    """The run's step items as stored (plain values), read consistently."""
    return _query_all(
        KeyConditionExpression="pk = :pk AND sk > :run",
        ExpressionAttributeValues={":pk": {"S": items.run_pk(run_id)}, ":run": {"S": "RUN"}},
        ConsistentRead=True,
    )


def get_branch_run(run_id: str, step: dict[str, Any]) -> Run | None:
    """The run as a parallel step's branch invocation needs it: its item, and the steps of
    the history its launch kept (`run_writes.write_history`) with `step` (its own item, as
    its lease write answered) instead of all of the run's steps, its siblings among them
    (each branch reading every sibling made a wide gather's reads grow with its square).
    A step launched without that copy reads the whole run (`get_run`)."""
    launch = step.get("hist")
    if not launch:
        return get_run(run_id)  # its siblings too, claimed or not (as a main invocation)
    answer = _ddb().get_item(TableName=_table(), Key=items.run_key(run_id), ConsistentRead=True)
    if "Item" not in answer:
        return None
    run_values = ddb.from_item(answer["Item"])
    history = run_writes.read_history(run_id, str(launch)) if step.get("histChunks") else []
    values = [v for v in history if v.get("stepId") != step.get("stepId")] + [step]
    attempt = int(run_values.get("attempt", 1))
    steps = items.with_started_next([items.step_from(v) for v in values], values, attempt)
    return items.run_from(run_values, tuple(steps))


def _updated_if(**request: Any) -> bool:
    """One conditional UpdateItem of the runs table: False (nothing written) when its
    condition refused it."""
    return ddb.updated_if(_ddb(), TableName=_table(), **request)


def release_lease(run_id: str, *, epoch: int, lease_until_ms: int) -> bool:
    """End the invocation lease a dead process held: the one at `epoch`, live until
    `lease_until_ms`, exactly as read. False (nothing written) when the run no longer holds
    that lease: an invocation took the run meanwhile (a new epoch), it was answered or
    backed off (another `leaseUntil`), or the run ended.

    The write bumps the epoch as a takeover does, so whatever the dead invocation still
    had in flight (a late write of its invoker, a step call with its token) is refused;
    `leaseUntil` 0 is what the stream reacts to by sending the run's owed invocation."""
    return _updated_if(
        Key=items.run_key(run_id),
        UpdateExpression="SET epoch = epoch + :one, leaseUntil = :free, version = version + :one",
        ConditionExpression=f"{items.LIVE_CONDITION} AND epoch = :epoch AND leaseUntil = :seen",
        ExpressionAttributeNames=items.LIVE_NAMES,
        ExpressionAttributeValues={
            **items.LIVE_VALUES,
            ":one": {"N": "1"},
            ":free": {"N": "0"},
            ":epoch": {"N": str(epoch)},
            ":seen": {"N": str(lease_until_ms)},
        },
    )


@dataclass(frozen=True)
class BranchLease:
    """A parallel step's live branch lease as read: `epoch` holds it until `until_ms`."""

    run_id: str
    step_id: str
    status: str
    epoch: int
    until_ms: int


_BRANCH_LIVE = {":waiting": {"S": "waiting"}, ":running": {"S": "running"}}


def branch_leases(now_ms: int) -> list[BranchLease]:
    """Every parallel step (`waiting` or `running`) whose branch lease is live at `now_ms`:
    a Scan of the table (a start of `ezgh dev` from kept state reads it once)."""
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "FilterExpression": (
            "begins_with(sk, :step) AND branch = :true AND #status IN (:waiting, :running) "
            "AND branchLeaseUntil >= :now"
        ),
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            **_BRANCH_LIVE,
            ":step": {"S": items.STEP_PREFIX},
            ":true": {"BOOL": True},
            ":now": {"N": str(now_ms)},
        },
    }
    out: list[BranchLease] = []
    while True:
        answer = _ddb().scan(**kwargs)
        for values in (ddb.from_item(i) for i in answer.get("Items", [])):
            out.append(
                BranchLease(
                    run_id=str(values["pk"]).removeprefix(items.run_pk("")),
                    step_id=str(values["sk"]).removeprefix(items.STEP_PREFIX),
                    status=str(values["status"]),
                    epoch=int(values.get("branchEpoch", 0)),
                    until_ms=int(values["branchLeaseUntil"]),
                )
            )
        if "LastEvaluatedKey" not in answer:
            return out
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def release_branch_lease(lease: BranchLease) -> bool:
    """End a branch lease a dead process held, as `release_lease` does a run's: only if
    the step still holds exactly that lease and is `waiting` or `running`; the branch epoch
    moves on, so the dead branch invocation's token and writes are refused."""
    return _updated_if(
        Key=items.step_key(lease.run_id, lease.step_id),
        UpdateExpression="SET branchEpoch = branchEpoch + :one, branchLeaseUntil = :free",
        ConditionExpression=(
            "branch = :true AND #status IN (:waiting, :running) "
            "AND branchEpoch = :epoch AND branchLeaseUntil = :seen"
        ),
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={
            **_BRANCH_LIVE,
            ":true": {"BOOL": True},
            ":one": {"N": "1"},
            ":free": {"N": "0"},
            ":epoch": {"N": str(lease.epoch)},
            ":seen": {"N": str(lease.until_ms)},
        },
    )


def _query_all(**query: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": _table(), **query}
    while True:
        answer = _ddb().query(**kwargs)
        out.extend(ddb.from_item(i) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return out
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


# The most index items one SearchRuns request evaluates (`runs_index.READ_BUDGET`): a page
# ends with what it found and a cursor when its filters matched fewer runs in as many.
SEARCH_READ_BUDGET = runs_index.READ_BUDGET


def search_runs(
    project_id: str,
    *,
    filters: dict[str, str],
    created_after: str | None,
    created_before: str | None,
    limit: int,
    cursor: str | None,
    keep: Callable[[Run], bool] | None = None,
) -> tuple[list[Run], str | None]:
    """Runs of a project, newest first, matching every filter (attribute name → value:
    `appId`, `workflow`, `status`, `runKey`) and, with `keep`, that predicate (the runs a
    scoped key may read).

    A page reads the index that answers its filters (status, else workflow, else app, else
    the project's), every shard of it merged, and the run items it lists (one BatchGetItem):
    about `limit` entries when its filters are all in the index's key. A filter the index
    does not answer is tested on its entries, at most `SEARCH_READ_BUDGET` of them a page:
    a short (even empty) page with a cursor says the budget ran out first. A `runKey`
    search reads the key's items instead (`runs_by_key`)."""
    scope = json.dumps(["runs", project_id, filters, created_after, created_before], sort_keys=True)
    if "runKey" in filters:
        others = {k: v for k, v in filters.items() if k != "runKey"}
        found = runs_by_key(project_id, filters["runKey"], others)
        return _kept(found, others, created_after, created_before, keep)[:limit], None
    if settings().legacy_runs_index:
        return _search_whole_items(
            project_id, filters, created_after, created_before, limit, cursor, keep, scope
        )
    below = _position(cursor, scope) if cursor else created_before
    if created_before is not None and below is not None:
        below = min(below, created_before)
    bounds = runs_index.Bounds(below=below, above=created_after)

    def keep_entry(entry: dict[str, Any]) -> bool:
        return keep is None or keep(_entry_run(project_id, entry))

    try:
        page = runs_index.merged_page(
            _partitions(project_id, filters), bounds, want=limit, keep=keep_entry
        )
    except runs_index.IndexUnavailable:
        page = runs_index.merged_page(
            _partitions(project_id, filters, fallback=True), bounds, want=limit, keep=keep_entry
        )
    stored = runs_index.run_items([runs_index.run_id_of(e) for e in page.entries])
    listed = [stored[i] for i in map(runs_index.run_id_of, page.entries) if i in stored]
    runs = _kept([items.run_from(v) for v in listed], filters, None, None, keep)
    position = page.position
    return runs, ddb.encode_cursor({"below": {"S": position}}, scope=scope) if position else None


def _partitions(
    project_id: str, filters: dict[str, str], *, fallback: bool = False
) -> list[runs_index.Partition]:
    """What a listing with `filters` reads: the shards of the index that answers the most
    selective filter, the others tested on its entries, and the project's runs from before
    the narrow indexes. `fallback`: the project index only (the others are still being
    created), which can test an app or workflow but not a status."""
    rest = dict(filters)
    if fallback:
        if "status" in filters:
            raise TransientError("the runs indexes are still being created: try again soon")
        index, value = RUNS_INDEX, None
    elif "status" in rest:
        index, value = RUNS_BY_STATUS, rest.pop("status")
    elif "workflow" in rest:
        index, value = RUNS_BY_WORKFLOW, rest.pop("workflow")
    elif "appId" in rest:
        index, value = RUNS_BY_APP, rest.pop("appId")
    else:
        index, value = RUNS_INDEX, None
    tested = tuple(sorted(rest.items()))
    parts = [replace(p, filters=tested) for p in runs_index.partitions(index, project_id, value)]
    return [*parts, runs_index.legacy_partition(project_id, filters)]


def _position(cursor: str, scope: str) -> str:
    """Where a cursor's listing resumes: the sort key its last page stopped at (a cursor
    made before the sharded indexes held the whole-item index's key, with the same value)."""
    key = ddb.decode_cursor(cursor, scope=scope)
    for name in ("below", "gsi1sk"):
        value = key.get(name, {}).get("S")
        if isinstance(value, str):
            return value
    raise ValidationError("cursor is not valid: pass the nextCursor of this same query")


def _entry_run(project_id: str, entry: dict[str, Any]) -> Run:
    """The run an index entry lists, as far as the entry says (its app, workflow and app
    name: what `keep` decides on); a whole-item entry is the run."""
    if "type" in entry:
        return items.run_from(entry)
    created = str(entry[RUNS_SORT_KEY]).rpartition("#")[0]
    values = {
        "id": runs_index.run_id_of(entry),
        "projectId": project_id,
        "appId": entry.get("appId", ""),
        "appName": entry.get("appName"),
        "workflow": entry.get("workflow", ""),
        "status": entry.get("status", "running"),
        "createdAt": created,
    }
    return items.run_from(values)


def _kept(
    runs: list[Run],
    filters: dict[str, str],
    created_after: str | None,
    created_before: str | None,
    keep: Callable[[Run], bool] | None,
) -> list[Run]:
    """The runs (as read from their items) still matching the filters (an index entry lags
    its item a little), within the time range, that `keep` passes."""
    fields = {"appId": "app_id", "workflow": "workflow", "status": "status"}
    out = []
    for run in runs:
        if any(getattr(run, fields[k]) != v for k, v in filters.items() if k in fields):
            continue
        if created_after is not None and run.created_at < created_after:
            continue
        if created_before is not None and run.created_at >= created_before:
            continue
        if keep is None or keep(run):
            out.append(run)
    return out


def runs_by_key(project_id: str, run_key: str, filters: dict[str, str]) -> list[Run]:
    """The runs `run_key` names in the project, newest first: its item in each workflow's
    scope (of the project's apps, narrowed by an `appId` or `workflow` filter) and its
    project-wide item from before keys were scoped, read at once, then their runs."""
    scopes: list[str | None] = [None]
    for app in registry_store.list_apps(project_id):
        if filters.get("appId", app.id) != app.id:
            continue
        for workflow in app.workflows:
            if filters.get("workflow", workflow) == workflow:
                scopes.append(items.run_key_scope(app.id, workflow))
    keys = [items.key(items.run_key_pk(project_id, run_key, s), "RUNKEY") for s in scopes]
    run_ids: list[str] = []
    table = _table()
    for start in range(0, len(keys), 100):
        answer = _ddb().batch_get_item(RequestItems={table: {"Keys": keys[start : start + 100]}})
        if answer.get("UnprocessedKeys"):
            raise TransientError("DynamoDB is busy: run keys not read; try again")
        run_ids += [str(ddb.from_item(i)["runId"]) for i in answer["Responses"].get(table, [])]
    found = runs_index.run_items(run_ids)
    runs = [items.run_from(v) for v in found.values() if v.get("projectId") == project_id]
    return sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)


def _search_whole_items(
    project_id: str,
    filters: dict[str, str],
    created_after: str | None,
    created_before: str | None,
    limit: int,
    cursor: str | None,
    keep: Callable[[Run], bool] | None,
    scope: str,
) -> tuple[list[Run], str | None]:
    """SearchRuns on a stack part-way to the narrow indexes: the project's `gsi1` partition
    of whole items, filters tested on them (`config.Settings.legacy_runs_index`)."""
    values: dict[str, Any] = {":pk": {"S": items.runs_index_pk(project_id)}}
    condition = "gsi1pk = :pk"
    if created_after and created_before:
        condition += " AND gsi1sk BETWEEN :lo AND :hi"
        values[":lo"], values[":hi"] = {"S": created_after}, {"S": created_before}
    elif created_after:
        condition += " AND gsi1sk > :lo"
        values[":lo"] = {"S": created_after}
    elif created_before:
        condition += " AND gsi1sk < :hi"
        values[":hi"] = {"S": created_before}
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "IndexName": "gsi1",
        "KeyConditionExpression": condition,
        "ScanIndexForward": False,
    }
    if filters:
        names = {f"#f{i}": name for i, name in enumerate(filters)}
        for i, value in enumerate(filters.values()):
            values[f":f{i}"] = {"S": value}
        kwargs["FilterExpression"] = " AND ".join(f"#f{i} = :f{i}" for i in range(len(filters)))
        kwargs["ExpressionAttributeNames"] = names
    kwargs["ExpressionAttributeValues"] = values
    if cursor:
        kwargs["ExclusiveStartKey"] = ddb.decode_cursor(cursor, scope=scope)
    filtered = bool(filters) or keep is not None
    page_size = max(limit * 2, 25) if filtered else limit
    runs: list[Run] = []
    read = 0
    while True:
        kwargs["Limit"] = min(page_size, SEARCH_READ_BUDGET - read)
        answer = _ddb().query(**kwargs)
        found = answer.get("Items", [])
        read += int(answer.get("ScannedCount", len(found)))
        for raw in found:
            run = items.run_from(ddb.from_item(raw))
            if keep is not None and not keep(run):
                continue
            runs.append(run)
            if len(runs) == limit:
                more = raw is not found[-1] or "LastEvaluatedKey" in answer
                return runs, ddb.encode_cursor(_index_key(raw), scope=scope) if more else None
        if "LastEvaluatedKey" not in answer:
            return runs, None
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        if read >= SEARCH_READ_BUDGET:
            return runs, ddb.encode_cursor(_index_key(answer["LastEvaluatedKey"]), scope=scope)


def _index_key(item: dict[str, Any]) -> dict[str, Any]:
    """Where a query of the whole-item index resumes after `item` (table and index keys)."""
    return {k: item[k] for k in ("pk", "sk", "gsi1pk", "gsi1sk")}


def list_events(
    run_id: str, *, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the run's events in ID order, after the cursor's (`adapters.event_listing`:
    about a page of items read per page)."""
    after, start = _events_after(run_id, cursor)
    found = event_listing.page(run_id, after=after, start=start, limit=limit)
    if found.after is None:
        return found.events, None
    last: dict[str, Any] = {"after": {"S": found.after}}
    if found.start is not None:
        last["from"] = {"S": found.start}
    return found.events, ddb.encode_cursor(last, scope=f"events:{run_id}")


def _events_after(run_id: str, cursor: str | None) -> tuple[str, str | None]:
    """The ID of the last event a cursor's page held ("" for the first page), and the key
    of the event item to read from (None: from that ID)."""
    if not cursor:
        return "", None
    key = ddb.decode_cursor(cursor, scope=f"events:{run_id}")
    after = key.get("after", {}).get("S")
    if isinstance(after, str):
        start = key.get("from", {}).get("S")
        return after, start if isinstance(start, str) else None
    sk = key.get("sk", {}).get("S")  # a cursor of the first version: the last item's key
    if isinstance(sk, str) and sk.startswith(items.EVENT_PREFIX):
        return sk.removeprefix(items.EVENT_PREFIX), ""
    raise ValidationError("cursor is not valid")


def delete_run(run: Run) -> None:
    """Delete an ended run and free its key (one transaction), then its steps and events."""
    actions: list[dict[str, Any]] = [
        {
            "Delete": {
                "TableName": _table(),
                "Key": items.run_key(run.id),
                "ConditionExpression": "#s IN (:c, :f, :x, :t)",
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {
                    ":c": {"S": "completed"},
                    ":f": {"S": "failed"},
                    ":x": {"S": "cancelled"},
                    ":t": {"S": "timedOut"},
                },
            }
        }
    ]
    if run.run_key:
        actions.append(
            {
                "Delete": {
                    "TableName": _table(),
                    "Key": items.key(_key_pk_naming(run), "RUNKEY"),
                    "ConditionExpression": "runId = :id",
                    "ExpressionAttributeValues": {":id": {"S": run.id}},
                }
            }
        )
    _ddb().transact_write_items(TransactItems=actions)
    rest = _query_all(
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": items.run_pk(run.id)}},
        ProjectionExpression="pk, sk",
    )
    for start in range(0, len(rest), 25):
        batch = [
            {"DeleteRequest": {"Key": items.key(v["pk"], v["sk"])}}
            for v in rest[start : start + 25]
        ]
        _ddb().batch_write_item(RequestItems={_table(): batch})
