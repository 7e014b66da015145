"""Operator checks over the engine's state: `find_stuck_runs`.

A run is *stuck* when it is `running` or `cancelling` and nothing will ever move it again:

- no live invocation lease (`leaseUntil` has passed),
- no invocation owed (`invokeSeq == handledSeq`: every reason to invoke was answered, so no
  message for it is in flight or due),
- no step that something pending will end (`sleeping` has a timer, `waiting` a callback,
  message or child run, `retrying` a retry timer, `running` an invocation that will record it).

Cost: with `project_id`, one query of the project's runs index (every run of the project,
filtered to `running`/`cancelling`); without it, a paged **Scan of the whole runs table**
(every run, step and event item is read and billed, only run items are kept). Then one query
per candidate for its steps. It is an operator command, not a request path: run it rarely,
and with `project_id` where you can.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run

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
    values = {":a": {"S": ACTIVE_STATUSES[0]}, ":b": {"S": ACTIVE_STATUSES[1]}}
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "FilterExpression": "#s IN (:a, :b)",
        "ExpressionAttributeNames": {"#s": "status"},
    }
    if project_id is not None:
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


def stuck_reason(run: Run, *, now_ms: int, older_than_seconds: float = 0) -> str | None:
    """Why `run` is stuck, or None when something pending will move it (or it is too recent)."""
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


def find_stuck_runs(
    project_id: str | None = None, *, older_than_seconds: float = DEFAULT_OLDER_THAN_SECONDS
) -> list[StuckRun]:
    """Runs that are `running`/`cancelling` with nothing pending (see the module's doc),
    quiet for at least `older_than_seconds` (created and lease ended that long ago), oldest
    first."""
    now = clock.now_ms()
    found: list[tuple[str, StuckRun]] = []
    for values in _active_run_items(project_id):
        head = items.run_from(values)
        if stuck_reason(head, now_ms=now, older_than_seconds=older_than_seconds) is None:
            continue  # cheap check on the run item first; steps only for candidates
        run = runs_store.get_run(head.id, with_steps=True)
        if run is None:
            continue
        why = stuck_reason(run, now_ms=now, older_than_seconds=older_than_seconds)
        if why is not None:
            found.append(
                (
                    run.created_at,
                    StuckRun(run.id, run.project_id, run.app_id, run.workflow, run.status, why),
                )
            )
    return [stuck for _, stuck in sorted(found, key=lambda pair: pair[0])]
