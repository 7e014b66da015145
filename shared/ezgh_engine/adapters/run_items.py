"""How runs, steps and events are laid out as items of the `runs` table (docs/architecture.md)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from ezgh_engine.config import settings
from ezgh_engine.core import events, task_claims
from ezgh_engine.core.events import EVENT_PREFIX, RUN_SK, STEP_PREFIX
from ezgh_engine.core.flows.jobs import interpreter_app_id
from ezgh_engine.core.models import Run, RunError, Step
from ezgh_engine.topology import (
    RUNS_BY_APP,
    RUNS_BY_STATUS,
    RUNS_BY_WORKFLOW,
    RUNS_INDEX,
    RUNS_INDEX_SHARDS,
    RUNS_SORT_KEY,
    Index,
)

__all__ = ["EVENT_PREFIX", "RUN_SK", "STEP_PREFIX"]

# The condition that a run is live (running or cancelling), for every conditional write that
# needs it; its names map `#status`, its values `:running` and `:cancelling`.
LIVE_CONDITION = "#status IN (:running, :cancelling)"
LIVE_NAMES = {"#status": "status"}
LIVE_VALUES = {":running": {"S": "running"}, ":cancelling": {"S": "cancelling"}}
# The run item's copy of its last committed outcome event (`outcome_mark`).
OUTCOME_ATTR = events.OUTCOME_ATTR
# Whether a run may have payloads other than its input (`runs_store.put_payload`).
PAYLOADS_ATTR = "payloads"
PAYLOADS_NONE = "none"


def run_pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def run_key_scope(app_id: str, workflow: str) -> str:
    """What a run key is unique within: one app's workflow, so the callers of one workflow
    can never take a key another workflow's callers will need."""
    return f"{app_id}/{workflow}"


def run_key_pk(project_id: str, run_key: str, scope: str | None) -> str:
    """The run-key item's key: `RUNKEY#<projectId>#<appId>/<workflow>#<runKey>`. With no
    `scope`, the project-wide item of a key taken before keys were scoped (read and freed,
    never written: such keys still answer their own workflow's starts until their runs go)."""
    if scope is None:
        return f"RUNKEY#{project_id}#{run_key}"
    return f"RUNKEY#{project_id}#{scope}#{run_key}"


def run_key_pk_of(run: Run) -> str:
    """The (scoped) run-key item's key of a run started with a key."""
    return run_key_pk(run.project_id, run.run_key or "", run_key_scope(run.app_id, run.workflow))


def runs_index_pk(project_id: str) -> str:
    """The whole-item index's (`gsi1`) key of a project's runs written before the narrow
    indexes (and while a stack is part-way to them: `config.Settings.legacy_runs_index`)."""
    return f"RUNS#{project_id}"


def shard_of(run_id: str) -> int:
    """Which of the `RUNS_INDEX_SHARDS` keys lists a run: fixed by its ID, so a project's
    index writes spread evenly over them (every reader merges them all)."""
    return zlib.crc32(run_id.encode()) % RUNS_INDEX_SHARDS


def index_sort(created_at: str, run_id: str) -> str:
    """Where a run sorts in every runs index: by creation, then ID (unique)."""
    return f"{created_at}#{run_id}"


def index_pk(index: Index, project_id: str, value: str | None, shard: int) -> str:
    """Shard `shard` of a runs index's key for a project (and the filter's `value`: a
    status, workflow or app ID; None for `RUNS_INDEX`)."""
    prefix = {
        RUNS_INDEX.name: "RUNS",
        RUNS_BY_STATUS.name: "RUNST",
        RUNS_BY_WORKFLOW.name: "RUNWF",
        RUNS_BY_APP.name: "RUNAPP",
    }[index.name]
    middle = "" if value is None else f"{value}#"
    return f"{prefix}#{project_id}#{middle}{shard}"


def status_index_pk(run: Run, status: str) -> str:
    """The run's status-index key for `status`: every write that sets a run's status sets
    this too (its entry moves: a delete and a put in the index). A job's (an EzFlow run's)
    status entries are under `JOBST#`, which no run listing reads."""
    key = index_pk(RUNS_BY_STATUS, run.project_id, status, shard_of(run.id))
    return "JOBST" + key.removeprefix("RUNST") if is_job(run) else key


def is_job(run: Run) -> bool:
    """A run of the project's EzFlow interpreter: listed by `GET /jobs`, never by runs lists."""
    return run.app_id == interpreter_app_id(run.project_id)


def index_values(run: Run) -> dict[str, str]:
    """The runs-index attributes of a new run item (`topology.RUNS_NARROW_INDEXES`); a job
    is in the status index only (the one-year sweep and operators read it)."""
    shard = shard_of(run.id)
    values = {
        RUNS_SORT_KEY: index_sort(run.created_at, run.id),
        RUNS_BY_STATUS.partition_key: status_index_pk(run, run.status),
    }
    if not is_job(run):
        values[RUNS_INDEX.partition_key] = index_pk(RUNS_INDEX, run.project_id, None, shard)
        values[RUNS_BY_WORKFLOW.partition_key] = index_pk(
            RUNS_BY_WORKFLOW, run.project_id, run.workflow, shard
        )
        values[RUNS_BY_APP.partition_key] = index_pk(RUNS_BY_APP, run.project_id, run.app_id, shard)
    return values


def key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def run_key(run_id: str) -> dict[str, dict[str, str]]:
    return key(run_pk(run_id), RUN_SK)


def step_key(run_id: str, step_id: str) -> dict[str, dict[str, str]]:
    return key(run_pk(run_id), STEP_PREFIX + step_id)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _error(data: Any) -> RunError | None:
    return RunError.from_api(data) if isinstance(data, dict) else None


def run_values(run: Run, *, started_event: str | None = None) -> dict[str, Any]:
    """The plain attribute values of a new run item (without steps). With `started_event`
    (an event ID) the item is also its own `run.started` event (`runs_store.list_events`)."""
    values = {
        "pk": run_pk(run.id),
        "sk": RUN_SK,
        "type": "run",
        "id": run.id,
        "orgId": run.org_id,
        "projectId": run.project_id,
        "appId": run.app_id,
        "appName": run.app_name,
        "workflow": run.workflow,
        "status": run.status,
        "input": None if run.input_ref else dumps(run.input),
        "inputRef": run.input_ref,
        "attempt": run.attempt,
        "runKey": run.run_key,
        "parentRunId": run.parent_run_id,
        "scheduleId": run.schedule_id,
        "parentStepId": run.parent_step_id,
        "deadlineAt": run.deadline_at,
        "createdAt": run.created_at,
        "startedAt": run.started_at,
        "version": run.version,
        "invokeSeq": run.invoke_seq,
        "handledSeq": run.handled_seq,
        "epoch": run.epoch,
        "leaseUntil": run.lease_until_ms,
        "invokeFailures": run.invoke_failures,
        **index_values(run),
    }
    if settings().legacy_runs_index:  # a stack part-way to the narrow indexes
        values["gsi1pk"] = runs_index_pk(run.project_id)
        values["gsi1sk"] = index_sort(run.created_at, run.id)
    if started_event is not None:
        values["startEvtId"] = started_event
    # Payloads other than its input are marked on the run item before they are stored
    # (`runs_store.put_payload`), so the purge lists S3 only for runs that stored one.
    values[PAYLOADS_ATTR] = PAYLOADS_NONE
    values[events.KEYED_BY_START] = 1  # its events list a page at a time
    return values


# Throttled deliveries in a row (the app answered `throttled`), kept apart from
# `invokeFailures`: written only by such a delivery's backoff, removed by the next outcome.
INVOKE_THROTTLES_ATTR = "invokeThrottles"


def run_from(values: dict[str, Any], steps: tuple[Step, ...] = ()) -> Run:
    has_output = "output" in values
    return Run(
        id=values["id"],
        org_id=values.get("orgId", ""),
        project_id=values["projectId"],
        app_id=values["appId"],
        workflow=values["workflow"],
        status=values["status"],
        input=json.loads(values["input"]) if "input" in values else None,
        input_ref=values.get("inputRef"),
        attempt=int(values.get("attempt", 1)),
        created_at=values["createdAt"],
        started_at=values.get("startedAt", values["createdAt"]),
        version=int(values.get("version", 1)),
        output=json.loads(values["output"]) if has_output else None,
        has_output=has_output,
        output_ref=values.get("outputRef"),
        error=_error(values.get("error")),
        run_key=values.get("runKey"),
        parent_run_id=values.get("parentRunId"),
        schedule_id=values.get("scheduleId"),
        ended_at=values.get("endedAt"),
        parent_step_id=values.get("parentStepId"),
        deadline_at=values.get("deadlineAt"),
        invoke_seq=int(values.get("invokeSeq", 1)),
        handled_seq=int(values.get("handledSeq", 0)),
        epoch=int(values.get("epoch", 0)),
        lease_until_ms=int(values.get("leaseUntil", 0)),
        invoke_failures=int(values.get("invokeFailures", 0)),
        invoke_throttles=int(values.get(INVOKE_THROTTLES_ATTR, 0)),
        app_name=values.get("appName"),
        steps=steps,
        last_outcome=values.get(OUTCOME_ATTR),
        woke=values.get("wk"),  # invocations_store.WAKE_ATTR
        task_key_id=task_claims.polled_key(values.get("tc"), int(values.get("epoch", 0))),
        events_through=values.get("evB"),  # run_writes.EVENTS_THROUGH_ATTR
    )


def step_from(values: dict[str, Any]) -> Step:
    has_output = "output" in values
    return Step(
        id=values["stepId"],
        name=values["name"],
        kind=values["kind"],
        status=values["status"],
        attempt=int(values.get("attempt", 1)),
        order=values.get("order", ""),
        started_at=values.get("startedAt"),
        ended_at=values.get("endedAt"),
        output=json.loads(values["output"]) if has_output else None,
        has_output=has_output,
        output_ref=values.get("outputRef"),
        error=_error(values.get("error")),
        wake_at=values.get("wakeAt"),
        branch=bool(values.get("branch")),
        callback_salt=values.get("cbSalt"),
        child_run_id=values.get("childRunId"),
        woke=values.get("wk"),  # invocations_store.WAKE_ATTR
        events=tuple(events.events_of(values)),
    )


def started_next(values: dict[str, Any]) -> Step | None:
    """The step a step item's `next` mark started (protocol 1.3: a step's end and the next
    step's start in one write), as the running step it is until it has an item of its own."""
    mark = values.get("next")
    if not isinstance(mark, dict):
        return None
    return Step(
        id=mark["stepId"],
        name=mark["name"],
        kind="run",
        status="running",
        attempt=int(mark.get("attempt", 1)),
        order=mark.get("order", ""),
        started_at=mark.get("startedAt"),
        inline=True,
    )


def with_started_next(
    steps: list[Step], items: list[dict[str, Any]], run_attempt: int = 1
) -> list[Step]:
    """`steps` (from `items`) plus the running steps their `next` marks started that have
    no item yet, in start order: marks of this run attempt only."""
    known = {step.id for step in steps}
    current = [i for i in items if int((i.get("next") or {}).get("runAttempt", 1)) >= run_attempt]
    marked = [s for s in map(started_next, current) if s is not None and s.id not in known]
    return sorted([*steps, *marked], key=lambda s: (s.order, s.id))


def expand_event(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The events one event item stands for, with their IDs (`core.events`: an invocation's
    outcome item also holds its `invocation.started` and, when it ended the run, the run's
    end)."""
    return events.events_of(values)


def outcome_mark(
    *,
    event_id: str,
    kind: str,
    at: str,
    attempt: int,
    invocation_id: str,
    started_at: str,
    deployment_id: str | None,
    run_end: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An invocation's outcome event as the run item carries it (`lastOut`), in short names:
    the run item is written several times a run and every write pays for its whole size.
    It is the commit point of the outcome (one conditional write of the run item), and the
    next outcome writes it out as an event item before replacing it (`outcome_event`)."""
    mark: dict[str, Any] = {
        "i": event_id,
        "k": kind,
        "a": at,
        "n": attempt,
        "v": invocation_id,
        "s": started_at,
    }
    if deployment_id is not None:
        mark["d"] = deployment_id
    if run_end is not None:
        mark["e"] = run_end
    return mark


def outcome_event(run_id: str, mark: dict[str, Any]) -> dict[str, Any]:
    """The event item a run item's `lastOut` stands for (without `ttl`): see
    `core.events.outcome_values`."""
    return {"pk": run_pk(run_id), **events.outcome_values(mark)}
