"""The year-limit buckets: which projects had runs created in which hour.

One item per (creation hour, project) that had a live run, `YEARLIMIT#<day>#<n>` /
`<hour>#<projectId>` in the `runs` table (no `type`: the stream's filter passes none of
them), expiring after the hour's year limit and the retention that follows. `<n>` is one of
`SHARDS` write shards, a hash of the project: a bucket is written once per stream
environment, hour and project (`service.year_limits.arm`), so one project puts a handful of
writes an hour on its day's key, but at the top of each hour every environment writes a new
bucket for every project at once, which on one key would meet DynamoDB's 1,000 writes a
second per key at about 60 busy projects (16 environments each); spread over 8 keys, at about
500. The hourly sweep (`service.year_limits`) reads every shard of the day of the hour whose
runs reach their limit (and the one unsharded key, `YEARLIMIT#<day>`, that stacks wrote
before the shards), then each project's live runs created in that hour from the status
index's live keys (every shard, sorted by `<createdAt>#<runId>`): O(projects that started
runs then + their runs still live), nothing per live run before its limit, nothing per ended
run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, runs_index
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.topology import RUNS_BY_STATUS

PREFIX = "YEARLIMIT#"
# The day key's write shards (see the module's doc); a project's buckets are all on one.
SHARDS = 8


def hour_of(moment: datetime) -> str:
    """The hour a moment falls in, as bucket keys name it (`2026-01-31T17`, UTC)."""
    return clock.iso(moment)[:13]


def _day_pk(hour: str, shard: int | None) -> str:
    """The day's key: shard `shard`, or (None) the unsharded key of older stacks."""
    day = PREFIX + hour[:10]
    return day if shard is None else f"{day}#{shard}"


def shard_of(project_id: str) -> int:
    """The write shard of a project's buckets (a stable hash: the same in every process)."""
    return int.from_bytes(hashlib.sha256(project_id.encode()).digest()[:4], "big") % SHARDS


def bucket_key(hour: str, project_id: str, *, legacy: bool = False) -> dict[str, Any]:
    """The bucket's key on its project's shard (`legacy`: on the unsharded key)."""
    shard = None if legacy else shard_of(project_id)
    return items.key(_day_pk(hour, shard), f"{hour}#{project_id}")


def put_bucket(hour: str, project_id: str, expires_at: datetime) -> None:
    """Note that `project_id` had a live run created in `hour` (idempotent)."""
    client("dynamodb").put_item(
        TableName=settings().runs_table,
        Item={
            **bucket_key(hour, project_id),
            "ttl": {"N": str(int(expires_at.timestamp()))},
        },
    )


def bucket_exists(hour: str, project_id: str) -> bool:
    got = client("dynamodb").get_item(
        TableName=settings().runs_table, Key=bucket_key(hour, project_id), ConsistentRead=True
    )
    return "Item" in got


def delete_bucket(hour: str, project_id: str) -> None:
    """Delete the bucket, on its shard and on the unsharded key (where an older stack wrote
    it): a delete of an item that is not there writes nothing."""
    for legacy in (False, True):
        client("dynamodb").delete_item(
            TableName=settings().runs_table, Key=bucket_key(hour, project_id, legacy=legacy)
        )


def buckets_up_to(day: datetime, last_hour: str) -> Iterator[tuple[str, str]]:
    """(hour, project) of the buckets of `day` (UTC) up to `last_hour` included: every shard's,
    and the unsharded key's (one query each)."""
    seen: set[tuple[str, str]] = set()
    for shard in (*range(SHARDS), None):
        for bucket in _buckets_of(_day_pk(hour_of(day), shard), last_hour):
            if bucket not in seen:
                seen.add(bucket)
                yield bucket


def _buckets_of(pk: str, last_hour: str) -> Iterator[tuple[str, str]]:
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "KeyConditionExpression": "pk = :pk AND sk <= :last",
        "ExpressionAttributeValues": {
            ":pk": {"S": pk},
            ":last": {"S": f"{last_hour}#\uffff"},
        },
        "ConsistentRead": True,
    }
    while True:
        page = client("dynamodb").query(**kwargs)
        for item in page.get("Items", []):
            bucket_hour, _, project = item["sk"]["S"].partition("#")
            yield bucket_hour, project
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def live_runs_created(project_id: str, start: datetime, end: datetime) -> Iterator[dict[str, Any]]:
    """The project's live run items (running, cancelling: runs and jobs) created in
    [`start`, `end`]: listed by every shard of the status index's live keys and by the
    whole-item index (runs from before the narrow indexes), then read 100 at a time."""
    if settings().legacy_runs_index:
        yield from _live_whole_items(project_id, start, end)
        return
    bounds = runs_index.Bounds(below=clock.iso(end) + "#\uffff", above=clock.iso(start))
    parts = live_partitions(project_id)
    batch: list[str] = []
    for entry in runs_index.entries(parts, bounds):
        batch.append(runs_index.run_id_of(entry))
        if len(batch) == 100:
            yield from _live(batch)
            batch = []
    yield from _live(batch)


def live_partitions(project_id: str) -> list[runs_index.Partition]:
    """Where a project's live runs are listed: each live status's shards (runs and jobs)
    and the runs written before the narrow indexes (filtered to live ones)."""
    parts: list[runs_index.Partition] = []
    for status in ("running", "cancelling"):
        parts += runs_index.partitions(RUNS_BY_STATUS, project_id, status)
        parts += runs_index.job_status_partitions(project_id, status)
    legacy = runs_index.legacy_partition(project_id, {})
    parts += [replace(legacy, filters=(("status", s),)) for s in ("running", "cancelling")]
    return parts


def _live(run_ids: list[str]) -> Iterator[dict[str, Any]]:
    found = runs_index.run_items(run_ids) if run_ids else {}
    for run_id in run_ids:
        values = found.get(run_id)
        if values is not None and values.get("status") in ("running", "cancelling"):
            yield values


def _live_whole_items(project_id: str, start: datetime, end: datetime) -> Iterator[dict[str, Any]]:
    """`live_runs_created` on a stack part-way to the narrow indexes (`gsi1` whole items)."""
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "IndexName": "gsi1",
        "KeyConditionExpression": "gsi1pk = :pk AND gsi1sk BETWEEN :from AND :to",
        "FilterExpression": items.LIVE_CONDITION,
        "ExpressionAttributeNames": dict(items.LIVE_NAMES),
        "ExpressionAttributeValues": {
            ":pk": {"S": items.runs_index_pk(project_id)},
            ":from": {"S": clock.iso(start)},
            ":to": {"S": clock.iso(end) + "#\uffff"},
            **items.LIVE_VALUES,
        },
    }
    while True:
        page = client("dynamodb").query(**kwargs)
        for item in page.get("Items", []):
            yield ddb.from_item(item)
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def next_hour(hour: str) -> datetime:
    """When the bucket hour `hour` ends."""
    return clock.parse_iso(hour + ":00:00Z") + timedelta(hours=1)
