"""Waits: steps that end in a later invocation (callbacks, child runs, messages, retries,
parallel branches): their keys, reads, and the write intents that record and end them
(`adapters.run_writes` writes them).

Ending a wait is always one transaction: a conditional update of the step (so a wait ends
once, whoever races) and an `invokeSeq` bump of its live run (so the stream sends the
invocation that continues it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ezgh_engine.adapters import ddb, run_writes
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.intents import (
    AskRun,
    DeleteItem,
    Intent,
    NewItem,
    NewStep,
    StepChange,
)
from ezgh_engine.config import settings


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def msgwait_pk(project_id: str, queue_id: str, key: str) -> str:
    return f"MSGWAIT#{project_id}#{queue_id}#{key}"


def callback_pk(token_hash: str) -> str:
    return f"CALLBACK#{token_hash}"


def step_put(run_id: str, step_id: str, values: dict[str, Any]) -> NewStep:
    """A new step item (refused if it exists)."""
    return NewStep(run_id, step_id, values)


def plain_put(values: dict[str, Any], *, only_new: bool = True) -> NewItem:
    """Any other item, whole (`values` hold its key)."""
    return NewItem(values, only_new)


def delete(pk: str, sk: str) -> DeleteItem:
    return DeleteItem(pk, sk)


def bump_run(run_id: str) -> AskRun:
    """Ask for an invocation of the live run (the stream sends it)."""
    return AskRun(run_id)


def step_update(
    run_id: str,
    step_id: str,
    *,
    sets: dict[str, Any],
    when: str,
    when_values: dict[str, Any],
    remove: tuple[str, ...] = (),
) -> StepChange:
    """A step's update: SET plain `sets`, REMOVE `remove`, if `when`.

    `when` names attributes as `#name` (e.g. `#status`, `#wakeAt`) and its values as
    `:key` in `when_values` (plain values).
    """
    return StepChange(run_id, step_id, sets, when, when_values, remove)


def transact(intents: Sequence[Intent]) -> bool:
    """Write all or nothing; False when a condition was refused (the race was lost)."""
    return run_writes.transact(intents)


def get(pk: str, sk: str) -> dict[str, Any] | None:
    answer = _ddb().get_item(TableName=_table(), Key=items.key(pk, sk), ConsistentRead=True)
    return ddb.from_item(answer["Item"]) if "Item" in answer else None


def query_pk(pk: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
        "ConsistentRead": True,
    }
    while True:
        answer = _ddb().query(**kwargs)
        out.extend(ddb.from_item(i) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return out
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
