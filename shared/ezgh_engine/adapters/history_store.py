"""A run's steps read page by page for the history call (protocol 1.5), in the table's
order of their keys (`STEP#<stepId>`), so a page costs its own items, not the run's."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core.models import Step


def steps_page(
    run_id: str, *, after: dict[str, Any] | None, limit: int
) -> tuple[list[tuple[Step, dict[str, Any]]], dict[str, Any] | None]:
    """Up to `limit` of the run's steps after the item key `after` (None: from the first),
    each with its item's key, and the last key read when more may follow. Strongly
    consistent: an end recorded before the invoke request was built is never read as
    still pending."""
    query: dict[str, Any] = {
        "TableName": settings().runs_table,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :step)",
        "ExpressionAttributeValues": {
            ":pk": {"S": items.run_pk(run_id)},
            ":step": {"S": items.STEP_PREFIX},
        },
        "ConsistentRead": True,
        "Limit": limit,
    }
    if after is not None:
        query["ExclusiveStartKey"] = after
    answer = client("dynamodb").query(**query)
    steps = [
        (items.step_from(ddb.from_item(raw)), {"pk": raw["pk"], "sk": raw["sk"]})
        for raw in answer.get("Items", [])
    ]
    return steps, answer.get("LastEvaluatedKey")
