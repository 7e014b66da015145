"""Schedules: their records in the `registry` table and their EventBridge Scheduler schedules.

Items (docs/architecture.md, "registry"):

- `SCHEDULE#<id>` / `SCHEDULE`: every field, `keyId` (the key it acts for: the one that
  created or last changed it; absent on a schedule made before keys were recorded); gsi1
  `SCHEDULES#<projectId>` / `<createdAt>#<id>`. `lastError` / `lastErrorAt`: why its last
  fire started nothing, written by the fire without a version check (so a concurrent change
  never loses it, nor the reverse) and gone with the next fire that starts its run or the
  next change (a change writes the item whole).
- `SCHEDSLUG#<slug>` / `SCHEDSLUG`: `scheduleId` (get by `wfs_` slug).

Each schedule has one EventBridge Scheduler schedule `c-<id>` in the engine's schedule group:
`cron(...)` with `ScheduleExpressionTimezone`, targeting the invoker function (Scheduler
invokes it asynchronously with the input as its event: no SQS request to pay for), or the
invocations queue where this function does not know the invoker's ARN, with the input
`{"type": "cron", "scheduleId", "scheduledTime": "<aws.scheduler.scheduled-time>"}`, which
Scheduler fills in for any target ("Adding context attributes", Scheduler user guide).
Schedules made before still target the queue until they are next written; the invoker
answers both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import ddb as ddb_util
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.registry_store import ddb, get_item, item_key, table
from ezgh_engine.config import settings
from ezgh_engine.core import cron
from ezgh_engine.core import messages as wire
from ezgh_engine.errors import Conflict, NotFound

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"  # a Scheduler context attribute


@dataclass(frozen=True)
class Schedule:
    id: str
    slug: str
    org_id: str
    project_id: str
    app_id: str
    workflow: str
    cron: str
    timezone: str
    input: Any
    status: Literal["active", "paused"]
    created_at: str
    updated_at: str
    version: int = 1
    # The key its runs start for (None: made before schedules recorded one).
    key_id: str | None = None
    # Why its last fire started nothing (None: it did, or it has not fired since a change).
    last_error: str | None = None
    last_error_at: str | None = None

    def to_api(self, next_run_at: str | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "appId": self.app_id,
            "workflow": self.workflow,
            "cron": self.cron,
            "timezone": self.timezone,
            "input": self.input,
            "status": self.status,
            "nextRunAt": next_run_at,
            "keyId": self.key_id,
            "lastError": self.last_error_api(),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }

    def last_error_api(self) -> dict[str, Any] | None:
        """`{message, at}` of the last fire that started nothing, or None."""
        if self.last_error is None:
            return None
        return {"message": self.last_error, "at": self.last_error_at}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _item(s: Schedule) -> dict[str, Any]:
    return {
        **item_key(f"SCHEDULE#{s.id}", "SCHEDULE"),
        "id": _s(s.id),
        "slug": _s(s.slug),
        "orgId": _s(s.org_id),
        "projectId": _s(s.project_id),
        "appId": _s(s.app_id),
        "workflow": _s(s.workflow),
        "cron": _s(s.cron),
        "timezone": _s(s.timezone),
        "input": _s(json.dumps(s.input, separators=(",", ":"), ensure_ascii=False)),
        "status": _s(s.status),
        "createdAt": _s(s.created_at),
        "updatedAt": _s(s.updated_at),
        "version": {"N": str(s.version)},
        "gsi1pk": _s(f"SCHEDULES#{s.project_id}"),
        "gsi1sk": _s(f"{s.created_at}#{s.id}"),
        **({"keyId": _s(s.key_id)} if s.key_id else {}),
    }


def _from(item: dict[str, Any]) -> Schedule:
    v = ddb_util.from_item(item)
    return Schedule(
        id=v["id"],
        slug=v["slug"],
        org_id=v["orgId"],
        project_id=v["projectId"],
        app_id=v["appId"],
        workflow=v["workflow"],
        cron=v["cron"],
        timezone=v["timezone"],
        input=json.loads(v["input"]),
        status=v["status"],
        created_at=v["createdAt"],
        updated_at=v.get("updatedAt", v["createdAt"]),
        version=int(v.get("version", 1)),
        key_id=v.get("keyId"),
        last_error=v.get("lastError"),
        last_error_at=v.get("lastErrorAt"),
    )


def create(s: Schedule) -> None:
    slug_item = {**item_key(f"SCHEDSLUG#{s.slug}", "SCHEDSLUG"), "scheduleId": _s(s.id)}
    ddb().transact_write_items(
        TransactItems=[
            {
                "Put": {
                    "TableName": table(),
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
            for item in (_item(s), slug_item)
        ]
    )


def get(schedule_id: str) -> Schedule | None:
    item = get_item(f"SCHEDULE#{schedule_id}", "SCHEDULE")
    return _from(item) if item else None


def find(project_id: str, ref: str) -> Schedule | None:
    """A schedule of the project by UUID or `wfs_` slug, or None."""
    schedule_id = ref
    if ref.startswith("wfs_"):
        pointer = get_item(f"SCHEDSLUG#{ref}", "SCHEDSLUG")
        if not pointer:
            return None
        schedule_id = pointer["scheduleId"]["S"]
    found = get(schedule_id)
    return found if found and found.project_id == project_id else None


def list_for(project_id: str) -> list[Schedule]:
    out: list[Schedule] = []
    kwargs: dict[str, Any] = {
        "TableName": table(),
        "IndexName": "gsi1",
        "KeyConditionExpression": "gsi1pk = :p",
        "ExpressionAttributeValues": {":p": _s(f"SCHEDULES#{project_id}")},
    }
    while True:
        page = ddb().query(**kwargs)
        out.extend(_from(i) for i in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def save(old: Schedule, new: Schedule) -> Schedule:
    """Write `new` over `old` if nobody changed it meanwhile (its version). The item is
    written whole: a fire's error before the change is gone with it."""
    saved = replace(new, version=old.version + 1, last_error=None, last_error_at=None)
    try:
        ddb().put_item(
            TableName=table(),
            Item=_item(saved),
            ConditionExpression="version = :v",
            ExpressionAttributeValues={":v": {"N": str(old.version)}},
        )
    except ClientError as err:
        if ddb_util.is_condition_failure(err):
            raise Conflict(f"schedule {old.id} changed or was deleted meanwhile; retry") from err
        raise
    return saved


# A fire's error as the schedule shows it, at most (the reason, not a payload).
MAX_ERROR_CHARS = 1000


def record_fire_error(schedule_id: str, message: str, at: str) -> None:
    """Remember why a fire started nothing (no version check: a change made meanwhile
    keeps its own fields; nothing for a schedule deleted meanwhile)."""
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(f"SCHEDULE#{schedule_id}", "SCHEDULE"),
            UpdateExpression="SET lastError = :e, lastErrorAt = :a",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":e": _s(message[:MAX_ERROR_CHARS]), ":a": _s(at)},
        )
    except ClientError as err:
        if not ddb_util.is_condition_failure(err):
            raise


def clear_fire_error(s: Schedule) -> None:
    """A fire started its run after the error `s` shows: forget the error (only an error as
    old as that one: a newer fire's stays)."""
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(f"SCHEDULE#{s.id}", "SCHEDULE"),
            UpdateExpression="REMOVE lastError, lastErrorAt",
            ConditionExpression="lastErrorAt = :a",
            ExpressionAttributeValues={":a": _s(s.last_error_at or "")},
        )
    except ClientError as err:
        if not ddb_util.is_condition_failure(err):
            raise


def delete(s: Schedule) -> None:
    ddb().transact_write_items(
        TransactItems=[
            {"Delete": {"TableName": table(), "Key": item_key(f"SCHEDULE#{s.id}", "SCHEDULE")}},
            {"Delete": {"TableName": table(), "Key": item_key(f"SCHEDSLUG#{s.slug}", "SCHEDSLUG")}},
        ]
    )


# --- EventBridge Scheduler -------------------------------------------------------------------


def schedule_name(schedule_id: str) -> str:
    return f"c-{schedule_id}"


def _definition(s: Schedule) -> dict[str, Any]:
    cfg = settings()
    return {
        "Name": schedule_name(s.id),
        "GroupName": cfg.scheduler_group,
        "ScheduleExpression": cron.to_aws(s.cron),
        "ScheduleExpressionTimezone": s.timezone,
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": "ENABLED" if s.status == "active" else "DISABLED",
        # Fire from now on: occurrences missed before (or while paused) are not made up.
        "StartDate": clock.now().replace(microsecond=0),
        "Description": f"ezgh schedule {s.slug}: {s.workflow}",
        "Target": {
            "Arn": cfg.invoker_function_arn or cfg.invocations_queue_arn,
            "RoleArn": cfg.scheduler_role_arn,
            "Input": wire.dumps(wire.Cron(s.id, SCHEDULED_TIME)),
            # A fire that cannot be delivered is retried by Scheduler (a Lambda target is
            # refused only when throttled), a fire the invoker fails on by Lambda's event
            # queue (then the invocations queue); the run ID is derived from the planned
            # time, so a retried fire starts nothing twice.
            "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 10},
        },
    }


def put_timer(s: Schedule, *, create: bool) -> None:
    """Create (or update) the Scheduler schedule of `s`."""
    scheduler = client("scheduler")
    definition = _definition(s)
    if create:
        try:
            scheduler.create_schedule(**definition)
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConflictException":
                raise
    try:
        scheduler.update_schedule(**definition)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        scheduler.create_schedule(**definition)


def delete_timer(schedule_id: str) -> None:
    try:
        client("scheduler").delete_schedule(
            Name=schedule_name(schedule_id), GroupName=settings().scheduler_group
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise


def not_found(ref: str) -> NotFound:
    return NotFound(f"schedule {ref} not found")
