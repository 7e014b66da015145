"""DynamoDB writes of step calls (docs/protocol.md section 2).

Each op is one transaction: a check that the caller's invocation still holds the run's lease,
and a conditional write of the step item (plus its event). A refused step condition means the
step was recorded already: the caller gets the recorded step back instead of a second effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core.models import RunError, Step
from ezgh_engine.errors import StaleInvocation


@dataclass(frozen=True)
class Lease:
    run_id: str
    epoch: int


class AlreadyRecorded(Exception):
    """The step's condition failed: it holds an outcome already (or another attempt's)."""


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def _lease_check(lease: Lease) -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": _table(),
            "Key": items.run_key(lease.run_id),
            "ConditionExpression": "epoch = :epoch AND #status IN (:running, :cancelling)",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                ":epoch": {"N": str(lease.epoch)},
                ":running": {"S": "running"},
                ":cancelling": {"S": "cancelling"},
            },
        }
    }


def _transact(lease: Lease, actions: list[dict[str, Any]]) -> None:
    try:
        _ddb().transact_write_items(TransactItems=[_lease_check(lease), *actions])
    except ClientError as exc:
        codes = ddb.cancellation_codes(exc)
        if codes and codes[0] == "ConditionalCheckFailed":
            raise StaleInvocation(
                "the invocation's lease was taken over or the run ended"
            ) from None
        if len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
            raise AlreadyRecorded() from None
        ddb.raise_transient(exc)
        raise


def get_step(run_id: str, step_id: str) -> Step | None:
    answer = _ddb().get_item(
        TableName=_table(), Key=items.step_key(run_id, step_id), ConsistentRead=True
    )
    return items.step_from(ddb.from_item(answer["Item"])) if "Item" in answer else None


def start(
    lease: Lease, *, step_id: str, name: str, kind: str, order: str, at: str, expires: int
) -> int:
    """Mark a step `running` (again, after a crash, with attempt + 1); answer its attempt.

    Refused (`AlreadyRecorded`) when the step has ended. A repeated start from the same
    invocation (a resent request) answers the same attempt without counting another.
    """
    _transact(
        lease,
        [
            {
                "Update": {
                    "TableName": _table(),
                    "Key": items.step_key(lease.run_id, step_id),
                    "UpdateExpression": (
                        "SET #type = :step, runId = :run, stepId = :id, #name = :name, "
                        "kind = :kind, #status = :running, startedAt = :at, "
                        "#order = if_not_exists(#order, :order), #ttl = if_not_exists(#ttl, :ttl), "
                        "startEpoch = :epoch, attempt = if_not_exists(attempt, :zero) + :one"
                    ),
                    "ConditionExpression": (
                        "attribute_not_exists(pk) OR (#status = :running AND startEpoch <> :epoch)"
                    ),
                    "ExpressionAttributeNames": {
                        "#type": "type",
                        "#name": "name",
                        "#status": "status",
                        "#order": "order",
                        "#ttl": "ttl",
                    },
                    "ExpressionAttributeValues": {
                        ":step": {"S": "step"},
                        ":run": {"S": lease.run_id},
                        ":id": {"S": step_id},
                        ":name": {"S": name},
                        ":kind": {"S": kind},
                        ":running": {"S": "running"},
                        ":at": {"S": at},
                        ":order": {"S": order},
                        ":ttl": {"N": str(expires)},
                        ":epoch": {"N": str(lease.epoch)},
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                    },
                }
            }
        ],
    )
    step = get_step(lease.run_id, step_id)
    return step.attempt if step else 1


def finish(
    lease: Lease,
    *,
    step_id: str,
    at: str,
    output_text: str | None,
    output_ref: str | None,
    error: RunError | None,
    event: dict[str, Any],
) -> None:
    """Record a running step's end: its output (inline or by reference) or its error."""
    values: dict[str, Any] = {
        ":running": {"S": "running"},
        ":at": {"S": at},
        ":status": {"S": "failed" if error else "completed"},
    }
    expression = "SET #status = :status, endedAt = :at"
    names = {"#status": "status"}
    if error is not None:
        expression += ", #error = :error"
        values[":error"] = ddb.to_attr(error.to_api())
        names["#error"] = "error"
    elif output_ref is not None:
        expression += ", outputRef = :ref"
        values[":ref"] = {"S": output_ref}
    else:
        expression += ", #output = :output"
        values[":output"] = {"S": output_text if output_text is not None else "null"}
        names["#output"] = "output"
    update = {
        "Update": {
            "TableName": _table(),
            "Key": items.step_key(lease.run_id, step_id),
            "UpdateExpression": expression,
            "ConditionExpression": "#status = :running",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
    }
    _transact(lease, [update, event])


def record(
    lease: Lease,
    *,
    step_id: str,
    name: str,
    kind: str,
    order: str,
    at: str,
    output_text: str,
    expires: int,
    event: dict[str, Any],
) -> None:
    """Record a value step (now, uuid) completed in one write; refused if it exists."""
    values = {
        "pk": items.run_pk(lease.run_id),
        "sk": items.STEP_PREFIX + step_id,
        "type": "step",
        "runId": lease.run_id,
        "stepId": step_id,
        "name": name,
        "kind": kind,
        "status": "completed",
        "attempt": 1,
        "order": order,
        "startedAt": at,
        "endedAt": at,
        "output": output_text,
        "ttl": expires,
    }
    put = {
        "Put": {
            "TableName": _table(),
            "Item": ddb.to_item(values),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    _transact(lease, [put, event])
