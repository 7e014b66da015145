"""Operator checks over the engine's state: `find_stuck_runs`.

A run is *stuck* when it is `running` or `cancelling` and nothing will ever move it again:

- no live invocation lease (`leaseUntil` has passed),
- no invocation owed (`invokeSeq == handledSeq`: every reason to invoke was answered, so no
  message for it is in flight or due),
- no step that something pending will end (`sleeping` has a timer, `waiting` a callback,
  message or child run, `retrying` a retry timer, `running` an invocation that will record it).

It is also stuck when something pending will never move it: its app was deleted and steps
are pending (nothing will run them), a sleep, retry or wait is still pending long past its
wake time (its timer was dropped), or a child wait names a child run that has ended or is
gone (its end was refused while the parent was ended).

Cost: with `project_id`, a query of each shard of the status index's live keys (the
project's live runs only) and a BatchGetItem per 100 of them; without it, a paged **Scan of the whole runs table**
(every run, step and event item is read and billed, only run items are kept). Then one query
per candidate for its steps. It is an operator command, not a request path: run it rarely,
and with `project_id` where you can.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, registry_store, runs_index, runs_store, year_limit_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core.models import ENDED_STATUSES, Run, Step
from ezgh_engine.service.flow_hosting import is_interpreter_run

ACTIVE_STATUSES = ("running", "cancelling")
PENDING_STEP_STATUSES = frozenset({"sleeping", "waiting", "retrying", "running"})
DEFAULT_OLDER_THAN_SECONDS = 300


@dataclass(frozen=True)
class StuckRun:
    run_id: str
    project_id: str
    app_id: str
    workflow: str
    status: str
    why: str

    def to_json(self) -> dict[str, str]:
        return {
            "runId": self.run_id,
            "projectId": self.project_id,
            "appId": self.app_id,
            "workflow": self.workflow,
            "status": self.status,
            "why": self.why,
        }


def _active_run_items(project_id: str | None) -> list[dict[str, Any]]:
    """Run items (no steps) whose status is running or cancelling."""
    if project_id is not None and not settings().legacy_runs_index:
        # The status index's live keys, every shard (and older runs' whole-item index).
        listed = runs_index.entries(
            year_limit_store.live_partitions(project_id), runs_index.Bounds()
        )
        ids = [runs_index.run_id_of(entry) for entry in listed]
        found = runs_index.run_items(ids)
        return [v for v in found.values() if v.get("status") in ACTIVE_STATUSES]
    values = {":a": {"S": ACTIVE_STATUSES[0]}, ":b": {"S": ACTIVE_STATUSES[1]}}
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "FilterExpression": "#s IN (:a, :b)",
        "ExpressionAttributeNames": {"#s": "status"},
    }
    if project_id is not None:  # a stack part-way to the narrow indexes
        operation = client("dynamodb").query
        kwargs.update(
            IndexName="gsi1",
            KeyConditionExpression="gsi1pk = :pk",
            ExpressionAttributeValues={**values, ":pk": {"S": items.runs_index_pk(project_id)}},
        )
    else:
        operation = client("dynamodb").scan
        kwargs["FilterExpression"] += " AND sk = :run"
        kwargs["ExpressionAttributeValues"] = {**values, ":run": {"S": items.RUN_SK}}
    out: list[dict[str, Any]] = []
    while True:
        answer = operation(**kwargs)
        out.extend(ddb.from_item(i) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return out
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def _dead_step(
    step: Step, quiet_since_ms: int, child_status: Callable[[str], str | None]
) -> str | None:
    """Why a pending step will never end, or None: a sleep, retry or wait whose wake time
    passed long ago (its timer was dropped, e.g. while the run was ended), or a child wait
    whose child run has ended (or is gone) without ending it."""
    due = step.wake_at is not None and clock.parse_iso(step.wake_at).timestamp() * 1000
    if step.status in ("sleeping", "retrying", "waiting") and due and due <= quiet_since_ms:
        return f"step {step.id} {step.status} past its wake time {step.wake_at} (timer lost)"
    if step.kind == "invoke" and step.status == "waiting" and step.child_run_id:
        child = child_status(step.child_run_id)
        if child is None or child in ENDED_STATUSES:
            state = "is gone" if child is None else f"ended {child}"
            return f"step {step.id} waits on child run {step.child_run_id}, which {state}"
    return None


def stuck_reason(
    run: Run,
    *,
    now_ms: int,
    older_than_seconds: float = 0,
    app_exists: bool = True,
    child_status: Callable[[str], str | None] = lambda _id: "running",
) -> str | None:
    """Why `run` is stuck, or None when something pending will move it (or it is too recent).

    Besides "nothing pending": pending steps of a run whose app was deleted (`app_exists`),
    and pending steps nothing will end (`_dead_step`; `child_status` answers a child
    run's status, None when it is gone)."""
    if run.status not in ACTIVE_STATUSES:
        return None
    quiet_since_ms = now_ms - int(older_than_seconds * 1000)
    if run.lease_until_ms > quiet_since_ms:
        return None  # a live lease, or one that ended too recently to judge
    if clock.parse_iso(run.created_at).timestamp() * 1000 > quiet_since_ms:
        return None
    if run.invoke_seq != run.handled_seq:
        return None  # an invocation is owed: its message is in flight or due
    pending = [s for s in run.steps if s.status in PENDING_STEP_STATUSES]
    if pending and not app_exists:
        return (
            f"status {run.status}; its app {run.app_id} was deleted: nothing will run its "
            f"{len(pending)} pending step(s) ({', '.join(s.id for s in pending[:5])})"
        )
    for step in pending:
        why = _dead_step(step, quiet_since_ms, child_status)
        if why is not None:
            return f"status {run.status}; no live lease; {why}"
    if pending:
        return None
    lease = (
        f"lease ended {clock.iso(datetime.fromtimestamp(run.lease_until_ms / 1000, UTC))}"
        if run.lease_until_ms
        else "never leased"
    )
    return (
        f"status {run.status}; no live lease ({lease}); "
        f"invokeSeq == handledSeq == {run.handled_seq}; "
        f"no step sleeping, waiting, retrying or running ({len(run.steps)} steps)"
    )


def _child_status(run_id: str) -> str | None:
    child = runs_store.get_run(run_id, with_steps=False)
    return child.status if child is not None else None


def find_stuck_runs(
    project_id: str | None = None, *, older_than_seconds: float = DEFAULT_OLDER_THAN_SECONDS
) -> list[StuckRun]:
    """Runs that are `running`/`cancelling` with nothing pending (see the module's doc),
    quiet for at least `older_than_seconds` (created and lease ended that long ago), oldest
    first."""
    now = clock.now_ms()
    found: list[tuple[str, StuckRun]] = []
    apps: dict[tuple[str, str], bool] = {}  # (project, app): an app is found in its project
    for values in _active_run_items(project_id):
        head = items.run_from(values)
        if stuck_reason(head, now_ms=now, older_than_seconds=older_than_seconds) is None:
            continue  # cheap check on the run item first; steps only for candidates
        run = runs_store.get_run(head.id, with_steps=True)
        if run is None:
            continue
        app_key = (run.project_id, run.app_id)
        if app_key not in apps:
            # A job's app (the interpreter) has no record: it is always there.
            stored = registry_store.get_app(run.project_id, run.app_id) is not None
            apps[app_key] = stored or is_interpreter_run(run)
        why = stuck_reason(
            run,
            now_ms=now,
            older_than_seconds=older_than_seconds,
            app_exists=apps[app_key],
            child_status=_child_status,
        )
        if why is not None:
            found.append(
                (
                    run.created_at,
                    StuckRun(run.id, run.project_id, run.app_id, run.workflow, run.status, why),
                )
            )
    return [stuck for _, stuck in sorted(found, key=lambda pair: pair[0])]
