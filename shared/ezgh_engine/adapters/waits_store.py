"""DynamoDB writes of waits: steps that end in a later invocation (callbacks, child runs,
messages, retries, parallel branches), and the writes that end them.

Ending a wait is always one transaction: a conditional update of the step (so a wait ends
once, whoever races) and an `invokeSeq` bump of its live run (so the stream sends the
invocation that continues it).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update, UpdateAction
from ezgh_engine.config import settings

LIVE = items.LIVE_VALUES
LIVE_CONDITION = items.LIVE_CONDITION


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def msgwait_pk(project_id: str, queue_id: str, key: str) -> str:
    return f"MSGWAIT#{project_id}#{queue_id}#{key}"


def callback_pk(token_hash: str) -> str:
    return f"CALLBACK#{token_hash}"


def step_put(run_id: str, step_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """A transaction Put of a new step item (refused if it exists)."""
    item = {
        "pk": items.run_pk(run_id),
        "sk": items.STEP_PREFIX + step_id,
        "type": "step",
        "runId": run_id,
        "stepId": step_id,
        **values,
    }
    return {
        "Put": {
            "TableName": _table(),
            "Item": ddb.to_item(item),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


def plain_put(values: dict[str, Any], *, only_new: bool = True) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": _table(), "Item": ddb.to_item(values)}
    if only_new:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
    return {"Put": put}


def delete(pk: str, sk: str) -> dict[str, Any]:
    return {"Delete": {"TableName": _table(), "Key": items.key(pk, sk)}}


def bump_run(run_id: str) -> dict[str, Any]:
    """Ask for an invocation of the live run (the stream sends it)."""
    return {
        "Update": {
            "TableName": _table(),
            "Key": items.run_key(run_id),
            "UpdateExpression": "SET invokeSeq = invokeSeq + :one, version = version + :one",
            "ConditionExpression": LIVE_CONDITION,
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {**LIVE, ":one": {"N": "1"}},
        }
    }


def step_update(
    run_id: str,
    step_id: str,
    *,
    sets: dict[str, Any],
    when: str,
    when_values: dict[str, Any],
    remove: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A transaction Update of a step: SET plain `sets`, REMOVE `remove`, if `when`.

    `when` names attributes as `#name` (e.g. `#status`, `#wakeAt`) and its values as
    `:key` in `when_values` (plain values).
    """
    update = Update().where(when, **{k.removeprefix(":"): v for k, v in when_values.items()})
    for name, value in sets.items():
        update.set(name, value)
    update.remove(*remove)
    return UpdateAction(update, TableName=_table(), Key=items.step_key(run_id, step_id))


def transact(actions: list[dict[str, Any]]) -> bool:
    """Write all or nothing; False when a condition was refused (the race was lost)."""
    try:
        _ddb().transact_write_items(TransactItems=actions)
    except ClientError as exc:
        if "ConditionalCheckFailed" in ddb.cancellation_codes(exc):
            return False
        ddb.raise_transient(exc)
        raise
    return True


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
