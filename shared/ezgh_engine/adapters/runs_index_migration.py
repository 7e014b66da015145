"""Moving runs written before the narrow runs indexes into them (`ezgh ops runs-index`).

Such a run item is listed by the whole-item index `gsi1` (`RUNS#<project>`) and copied
there whole at every write. Moving it sets its narrow index attributes (`run_items.
index_values`, its status entry as its status is now) and removes its `gsi1` keys in one
conditional write: listings read both indexes and the run keeps its sort key, so it is
listed throughout, once. Only once every narrow index is ACTIVE (a listing of a status
would miss a moved run while its index is still being created).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.topology import RUNS_NARROW_INDEXES


@dataclass
class Moved:
    """What a backfill found and did."""

    found: int = 0  # run items still in the whole-item index
    moved: int = 0
    changed: int = 0  # changed under the write every time it was tried: left for a rerun


def indexes_missing() -> list[str]:
    """The narrow runs indexes that are not ACTIVE (absent, or still being created)."""
    table = client("dynamodb").describe_table(TableName=settings().runs_table)["Table"]
    active = {
        i["IndexName"]
        for i in table.get("GlobalSecondaryIndexes") or []
        if i.get("IndexStatus", "ACTIVE") == "ACTIVE" and not i.get("Backfilling")
    }
    return [i.name for i in RUNS_NARROW_INDEXES if i.name not in active]


def legacy_runs(project_id: str | None) -> list[dict[str, Any]]:
    """Run items still listed by the whole-item index: a query of the project's partition,
    or (no project) a Scan of the table for them."""
    request: dict[str, Any] = {
        "TableName": settings().runs_table,
        "ExpressionAttributeValues": {":run": {"S": items.RUN_SK}},
    }
    if project_id is not None:
        operation = client("dynamodb").query
        request.update(
            IndexName="gsi1",
            KeyConditionExpression="gsi1pk = :pk",
            FilterExpression="sk = :run",
        )
        request["ExpressionAttributeValues"][":pk"] = {"S": items.runs_index_pk(project_id)}
    else:
        operation = client("dynamodb").scan
        request["FilterExpression"] = "sk = :run AND begins_with(gsi1pk, :runs)"
        request["ExpressionAttributeValues"][":runs"] = {"S": items.runs_index_pk("")}
    out: list[dict[str, Any]] = []
    while True:
        answer = operation(**request)
        out += [ddb.from_item(i) for i in answer.get("Items", [])]
        if "LastEvaluatedKey" not in answer:
            return out
        request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def move(values: dict[str, Any]) -> bool:
    """Move one run item (as read) into the narrow indexes; False when it changed status or
    went meanwhile (read it again)."""
    run = items.run_from(values)
    sets = items.index_values(run)
    names = {f"#a{i}": name for i, name in enumerate(sets)}
    update_values = {f":a{i}": {"S": value} for i, value in enumerate(sets.values())}
    assignments = ", ".join(f"#a{i} = :a{i}" for i in range(len(sets)))
    return ddb.updated_if(
        client("dynamodb"),
        TableName=settings().runs_table,
        Key=items.run_key(run.id),
        UpdateExpression=f"SET {assignments} REMOVE gsi1pk, gsi1sk",
        ConditionExpression="#status = :seen",
        ExpressionAttributeNames={**names, "#status": "status"},
        ExpressionAttributeValues={**update_values, ":seen": {"S": run.status}},
    )


def backfill(project_id: str | None = None, *, apply: bool = True) -> Moved:
    """Move every run item of the whole-item index (a project's, or all) into the narrow
    indexes; with `apply` False, only count them. Idempotent: a moved run is no longer
    found; a run that kept changing is counted in `changed` and moved by a rerun."""
    missing = indexes_missing()
    if missing and apply:
        raise RuntimeError(
            f"the runs indexes {', '.join(missing)} are not ACTIVE yet: deploy them "
            "(docs/deploy.md) and wait until DynamoDB has built them"
        )
    result = Moved()
    for values in legacy_runs(project_id):
        result.found += 1
        if not apply:
            continue
        for _try in range(3):
            if move(values):
                result.moved += 1
                break
            fresh = (
                client("dynamodb")
                .get_item(
                    TableName=settings().runs_table,
                    Key=items.run_key(str(values["id"])),
                    ConsistentRead=True,
                )
                .get("Item")
            )
            if fresh is None:
                break  # deleted or expired meanwhile: nothing to move
            values = ddb.from_item(fresh)
        else:
            result.changed += 1
    return result
