"""DynamoDB writes of step calls (docs/protocol.md section 2).

Builders answer one action per step write (`start_action`, `finish_action`,
`record_action`, `inline_end_action`, `with_next`), each an `expressions.Update` (kept by its
`UpdateAction`, so `with_next` extends it without editing text) or a conditional Put; the op
modules of `service.step_ops` plan with them and its executor writes them either with `write`
(the fast path: the steps' own conditions, no lease check) or with `transact` (one
transaction with a check that the caller's invocation still holds the run's lease). A refused
step condition means the step holds something else already: the caller gets the recorded step
back instead of a second effect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, waits_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update, UpdateAction
from ezgh_engine.config import settings
from ezgh_engine.core.models import RunError, Step
from ezgh_engine.errors import StaleInvocation
from ezgh_engine.protocol.ops import InlineStart


@dataclass(frozen=True)
class Lease:
    """An invocation's right to write: the run's lease `epoch`, or for a branch invocation
    (`branch_step`) that step's `branchEpoch` (the run need only be live)."""

    run_id: str
    epoch: int
    branch_step: str | None = None


class AlreadyRecorded(Exception):
    """The step's condition failed: it holds an outcome already (or another attempt's).

    `index` is the position of the refused action among the actions written (0-based, the
    lease check not counted)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(f"step action {index} refused")
        self.index = index


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def _lease_check(lease: Lease, *, bump: bool = False) -> dict[str, Any]:
    if lease.branch_step is not None:
        # A branch's step writes check its own branch epoch; the run need only be live. A
        # branch that ends its step asks for the run's next invocation in the same write.
        live: dict[str, Any] = {
            "TableName": _table(),
            "Key": items.run_key(lease.run_id),
            "ConditionExpression": items.LIVE_CONDITION,
            "ExpressionAttributeNames": items.LIVE_NAMES,
            "ExpressionAttributeValues": items.LIVE_VALUES,
        }
        if not bump:
            return {"ConditionCheck": live}
        live["UpdateExpression"] = "SET invokeSeq = invokeSeq + :one, version = version + :one"
        live["ExpressionAttributeValues"] = {**items.LIVE_VALUES, ":one": {"N": "1"}}
        return {"Update": live}
    # The lease is this invocation's only while it lasts: answering it (or backing off)
    # sets `leaseUntil` to 0 or a retry time, so its token then writes nothing.
    return {
        "ConditionCheck": {
            "TableName": _table(),
            "Key": items.run_key(lease.run_id),
            "ConditionExpression": (
                f"epoch = :epoch AND leaseUntil >= :now AND {items.LIVE_CONDITION}"
            ),
            "ExpressionAttributeNames": items.LIVE_NAMES,
            "ExpressionAttributeValues": {
                ":epoch": {"N": str(lease.epoch)},
                ":now": {"N": str(clock.now_ms())},
                **items.LIVE_VALUES,
            },
        }
    }


def transact(lease: Lease, actions: list[dict[str, Any]], *, bump: bool = False) -> None:
    """Write `actions` (step writes of one or several ops) in one transaction under the
    lease; with `bump` (a branch's step that ended) also ask for the run's next invocation.

    `StaleInvocation` when the lease was lost; `AlreadyRecorded(index)` when a step's
    condition refused the write (nothing was written)."""
    try:
        _ddb().transact_write_items(TransactItems=[_lease_check(lease, bump=bump), *actions])
    except ClientError as exc:
        codes = ddb.cancellation_codes(exc)
        if codes and codes[0] == "ConditionalCheckFailed":
            raise StaleInvocation(
                "the invocation's lease was taken over or the run ended"
            ) from None
        refused = [i for i, code in enumerate(codes[1:]) if code == "ConditionalCheckFailed"]
        if refused:
            raise AlreadyRecorded(refused[0]) from None
        ddb.raise_transient(exc)
        raise


def get_step(run_id: str, step_id: str) -> Step | None:
    answer = _ddb().get_item(
        TableName=_table(), Key=items.step_key(run_id, step_id), ConsistentRead=True
    )
    return items.step_from(ddb.from_item(answer["Item"])) if "Item" in answer else None


def start_action(
    lease: Lease,
    *,
    step_id: str,
    name: str,
    kind: str,
    order: str,
    at: str,
    expires: int,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The Update that starts a step. With `attempt` (protocol 1.3: the caller knows the
    recorded attempt) it is set exactly, conditional on the step holding `attempt - 1`, so no
    read is needed to answer it; without, the stored attempt counts up by one."""
    update = (
        Update()
        .set("type", "step")
        .set("runId", lease.run_id)
        .set("stepId", step_id)
        .set("name", name)
        .set("kind", kind)
        .set("status", "running")
        .set("startedAt", at)
        .set_raw("#order = if_not_exists(#order, :order)", order=order)
        .set_raw("#ttl = if_not_exists(#ttl, :ttl)", ttl=expires)
        .set_raw("startEpoch = :epoch", epoch=lease.epoch)
        .remove("error")
    )
    if lease.branch_step is not None:
        attempt = None  # a branch's step: its branch epoch decides, the count is the store's
    if attempt is None:
        update.set_raw("attempt = if_not_exists(attempt, :zero) + :one", zero=0, one=1)
        update.where(_start_condition(lease), **_start_values(lease))
    else:
        update.set("attempt", attempt)
        if attempt == 1:
            update.where("attribute_not_exists(pk)")
        else:
            # No item: a step started inline (a `next` mark) by an invocation that died.
            update.where(
                f"attribute_not_exists(pk) OR (attempt = :previous AND ({_start_condition(lease)}))",
                previous=attempt - 1,
                **_start_values(lease),
            )
    return UpdateAction(update, TableName=_table(), Key=items.step_key(lease.run_id, step_id))


def _start_values(lease: Lease) -> dict[str, Any]:
    """The values `_start_condition` uses (besides `:epoch`, which the update sets)."""
    values = {"running": "running", "retrying": "retrying"}
    if lease.branch_step is not None:
        values["waiting"] = "waiting"
    return values


def _start_condition(lease: Lease) -> str:
    """New, or running after a crash (another invocation started it), or a retry that is
    due (`retrying` without a wake time); a branch's step only under its branch epoch."""
    if lease.branch_step is not None:
        return (
            "branchEpoch = :epoch AND (#status = :waiting OR "
            "(#status = :running AND startEpoch <> :epoch) OR "
            "(#status = :retrying AND attribute_not_exists(#wakeAt)))"
        )
    return (
        "attribute_not_exists(pk) OR (#status = :running AND startEpoch <> :epoch) OR "
        "(#status = :retrying AND attribute_not_exists(#wakeAt))"
    )


def event_marks(event_id: str, run_attempt: int, deployment_id: str | None) -> dict[str, Any]:
    """Attributes that make a step item its own `step.completed` event (`runs_store`
    lists them among the run's events), instead of a separate event item per step."""
    marks: dict[str, Any] = {"evtId": event_id, "evtAttempt": run_attempt}
    if deployment_id is not None:
        marks["deploymentId"] = deployment_id
    return marks


def finish_action(
    lease: Lease,
    *,
    step_id: str,
    at: str,
    output_text: str | None,
    output_ref: str | None,
    error: RunError | None,
    retry_at: str | None = None,
    attempt: int | None = None,
    marks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Update that ends a step this invocation started (see `finish`)."""
    update = Update().set("status", "retrying" if retry_at else "failed" if error else "completed")
    if retry_at is not None:
        update.set("wakeAt", retry_at)  # not ended: it waits for its retry
    else:
        update.set("endedAt", at)
    update.where("#status = :running", running="running")
    if lease.branch_step is None:
        # Only the invocation that started it ends it: another one that took the run over
        # and started it again owns it now.
        update.where("startEpoch = :epoch", epoch=lease.epoch)
    if attempt is not None:
        update.where("attempt = :attempt", attempt=attempt)
    if lease.branch_step is not None:
        update.where("branchEpoch = :bepoch", bepoch=lease.epoch)
    if error is not None:
        update.set("error", error.to_api())
    elif output_ref is not None:
        update.set("outputRef", output_ref)
    else:
        update.set("output", output_text if output_text is not None else "null")
    for field, value in sorted((marks or {}).items()):
        update.set(field, value)
    return UpdateAction(update, TableName=_table(), Key=items.step_key(lease.run_id, step_id))


def record_action(
    lease: Lease,
    *,
    step_id: str,
    name: str,
    kind: str,
    order: str,
    at: str,
    output_text: str,
    expires: int,
    marks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Put of a value step, completed at once; refused if the step exists."""
    values = {
        "name": name,
        "kind": kind,
        "status": "completed",
        "attempt": 1,
        "order": order,
        "startedAt": at,
        "endedAt": at,
        "output": output_text,
        "ttl": expires,
        **(marks or {}),
    }
    return waits_store.step_put(lease.run_id, step_id, values)


def with_next(
    action: dict[str, Any],
    *,
    step_id: str,
    start: InlineStart,
    epoch: int,
    run_attempt: int = 1,
) -> dict[str, Any]:
    """`action` (the Put or Update of the step ending just before) that also starts
    `step_id` as attempt 1: a `next` mark, read back as a running step (`run_items`)."""
    mark = {
        "stepId": step_id,
        "name": start.name,
        "order": start.order,
        "startedAt": start.started_at,
        "startEpoch": epoch,
        "attempt": 1,
        # A retried run (RetryRun) deletes its failed steps: a mark of an earlier attempt
        # must not bring one back as running.
        "runAttempt": run_attempt,
    }
    # No TTL of its own: the mark lives and dies with the item that carries it.
    if "Put" in action:
        put = dict(action["Put"])
        put["Item"] = {**put["Item"], "next": ddb.to_attr(mark)}
        return {"Put": put}
    if not isinstance(action, UpdateAction):
        raise TypeError("with_next extends a Put or an UpdateAction (finish_action)")
    return UpdateAction(action.extended().set("next", mark), **action.target)


def inline_end_action(
    lease: Lease,
    *,
    step_id: str,
    start: InlineStart,
    at: str,
    output_text: str | None,
    output_ref: str | None,
    error: RunError | None,
    expires: int,
    retry_at: str | None = None,
    attempt: int | None = None,
    marks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Put of a whole step item for the end of a step started inline (see `with_next`):
    refused when the step has an item (another invocation started or recorded it)."""
    values: dict[str, Any] = {
        "name": start.name,
        "kind": "run",
        "status": "retrying" if retry_at else "failed" if error else "completed",
        "attempt": attempt or 1,
        "order": start.order,
        "startedAt": start.started_at,
        "startEpoch": lease.epoch,
        "ttl": expires,
        **(marks or {}),
    }
    if retry_at:
        values["wakeAt"] = retry_at
    else:
        values["endedAt"] = at
    if error is not None:
        values["error"] = error.to_api()
    elif output_ref is not None:
        values["outputRef"] = output_ref
    else:
        values["output"] = output_text if output_text is not None else "null"
    return waits_store.step_put(lease.run_id, step_id, values)


def write(actions: list[dict[str, Any]]) -> None:
    """Write step actions without the lease check (their own conditions hold the records
    together, see `service.steps`): one conditional write for one action, a transaction for
    more. `AlreadyRecorded(index)` when a condition refused (nothing was written)."""
    if len(actions) > 1:
        try:
            _ddb().transact_write_items(TransactItems=actions)
        except ClientError as exc:
            codes = ddb.cancellation_codes(exc)
            refused = [i for i, code in enumerate(codes) if code == "ConditionalCheckFailed"]
            if refused:
                raise AlreadyRecorded(refused[0]) from None
            ddb.raise_transient(exc)
            raise
        return
    ((kind, request),) = actions[0].items()
    try:
        if kind == "Put":
            _ddb().put_item(**request)
        else:
            _ddb().update_item(**request)
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise AlreadyRecorded(0) from None
        ddb.raise_transient(exc)
        raise


def run_state(run_id: str) -> tuple[str, int, int] | None:
    """The run's status, lease epoch and lease end (ms), read eventually consistent (half a
    read unit): enough to stop an invocation whose run ended, was taken over or that has
    answered, which its steps' own conditions would otherwise only catch when it touched a
    step another one owns."""
    answer = _ddb().get_item(
        TableName=_table(),
        Key=items.run_key(run_id),
        ProjectionExpression="#status, epoch, leaseUntil",
        ExpressionAttributeNames={"#status": "status"},
    )
    if "Item" not in answer:
        return None
    values = ddb.from_item(answer["Item"])
    return (
        str(values.get("status")),
        int(values.get("epoch", 0)),
        int(values.get("leaseUntil", 0)),
    )


def branch_lease(run_id: str, step_id: str) -> tuple[int, int]:
    """A branch step's lease: its `branchEpoch` and `branchLeaseUntil` (ms), read
    consistently; (-1, 0) when the step does not exist."""
    answer = _ddb().get_item(
        TableName=_table(),
        Key=items.step_key(run_id, step_id),
        ProjectionExpression="branchEpoch, branchLeaseUntil",
        ConsistentRead=True,
    )
    values = ddb.from_item(answer["Item"]) if "Item" in answer else {}
    return int(values.get("branchEpoch", -1)), int(values.get("branchLeaseUntil", 0))
