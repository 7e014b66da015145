"""Write intents as DynamoDB requests: the one place a step's, an event's or a run's write
is spelled as DynamoDB takes it, and checked against DynamoDB's size limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.expressions import Update
from ezgh_engine.adapters.intents import (
    AskRun,
    DeleteItem,
    Intent,
    Lease,
    NewEvent,
    NewItem,
    NewStep,
    NextStart,
    StepChange,
    StepEnd,
    StepStart,
    ValueRecord,
)
from ezgh_engine.adapters.run_writes._base import (
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    WriteTooLarge,
    _live_values,
    _table,
)
from ezgh_engine.core.events import BRANCH_OUTCOMES_ATTR
from ezgh_engine.core.leases import NO_LEASE


def request(intent: Intent) -> dict[str, Any]:
    """The transaction action (`{"Put"|"Update"|"Delete": {...}}`) that writes `intent`."""
    if isinstance(intent, StepStart):
        return {"Update": _start(intent).request(**_step_target(intent.lease.run_id, intent))}
    if isinstance(intent, StepEnd):
        if intent.inline is not None:
            return _put(_inline_end_values(intent), only_new=True)
        return {"Update": _finish(intent).request(**_step_target(intent.lease.run_id, intent))}
    if isinstance(intent, ValueRecord):
        return _put(_record_values(intent), only_new=True)
    if isinstance(intent, NewStep):
        return _put(_step_values(intent.run_id, intent.step_id, intent.values), only_new=True)
    if isinstance(intent, StepChange):
        return {"Update": _change(intent).request(**_step_target(intent.run_id, intent))}
    if isinstance(intent, NewEvent):
        return _put(_event_values(intent), only_new=False)
    if isinstance(intent, NewItem):
        return _put(dict(intent.values), only_new=intent.only_new)
    if isinstance(intent, DeleteItem):
        return {"Delete": {"TableName": _table(), "Key": items.key(intent.pk, intent.sk)}}
    if isinstance(intent, AskRun):
        return {"Update": _ask(intent)}
    raise TypeError(f"not a write intent: {intent!r}")


def _step_target(run_id: str, intent: Any) -> dict[str, Any]:
    return {"TableName": _table(), "Key": items.step_key(run_id, intent.step_id)}


def _put(values: Mapping[str, Any], *, only_new: bool) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": _table(), "Item": ddb.to_item(dict(values))}
    if only_new:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
    return {"Put": put}


def _step_values(run_id: str, step_id: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "pk": items.run_pk(run_id),
        "sk": items.STEP_PREFIX + step_id,
        "type": "step",
        "runId": run_id,
        "stepId": step_id,
        **values,
    }


def _next_mark(start: NextStart) -> dict[str, Any]:
    """The `next` mark of a step started riding the previous step's end (read back as a
    running step by `run_items.started_next`). No TTL of its own: it lives and dies with
    the item that carries it."""
    return {
        "stepId": start.step_id,
        "name": start.name,
        "order": start.order,
        "startedAt": start.started_at,
        "startEpoch": start.epoch,
        "attempt": 1,
        # A retried run (RetryRun) deletes its failed steps: a mark of an earlier attempt
        # must not bring one back as running.
        "runAttempt": start.run_attempt,
    }


def _start(intent: StepStart) -> Update:
    """The update that starts a step (see `StepStart`)."""
    lease = intent.lease
    update = (
        Update()
        .set("type", "step")
        .set("runId", lease.run_id)
        .set("stepId", intent.step_id)
        .set("name", intent.name)
        .set("kind", intent.kind)
        .set("status", "running")
        .set("startedAt", intent.at)
        .set_raw("#order = if_not_exists(#order, :order)", order=intent.order)
        .set_raw("#ttl = if_not_exists(#ttl, :ttl)", ttl=intent.expires)
        .set_raw("startEpoch = :epoch", epoch=lease.epoch)
        .remove("error")
    )
    attempt = None if lease.branch_step is not None else intent.attempt
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
    return update


def _start_values(lease: Lease) -> dict[str, Any]:
    """The values `_start_condition` uses (besides `:epoch`, which the update sets)."""
    values: dict[str, Any] = {"running": "running", "retrying": "retrying"}
    if lease.branch_step is not None:
        values.update(waiting="waiting", now=clock.now_ms())
    return values


def _start_condition(lease: Lease) -> str:
    """New, or running after a crash (another invocation started it), or a retry that is
    due (`retrying` without a wake time); a branch's step only under its branch lease."""
    if lease.branch_step is not None:
        return (
            "branchEpoch = :epoch AND branchLeaseUntil >= :now AND (#status = :waiting OR "
            "(#status = :running AND startEpoch <> :epoch) OR "
            "(#status = :retrying AND attribute_not_exists(#wakeAt)))"
        )
    return (
        "attribute_not_exists(pk) OR (#status = :running AND startEpoch <> :epoch) OR "
        "(#status = :retrying AND attribute_not_exists(#wakeAt))"
    )


def _end_status(intent: StepEnd) -> str:
    return "retrying" if intent.retry_at else "failed" if intent.error else "completed"


def _finish(intent: StepEnd) -> Update:
    """The update that ends a step this invocation started (see `StepEnd`)."""
    lease = intent.lease
    update = Update().set("status", _end_status(intent))
    if intent.retry_at is not None:
        update.set("wakeAt", intent.retry_at)  # not ended: it waits for its retry
    else:
        update.set("endedAt", intent.at)
    update.where("#status = :running", running="running")
    if lease.branch_step is None:
        # Only the invocation that started it ends it: another one that took the run over
        # and started it again owns it now.
        update.where("startEpoch = :epoch", epoch=lease.epoch)
    if intent.attempt is not None:
        update.where("attempt = :attempt", attempt=intent.attempt)
    if lease.branch_step is not None:
        _branch_end(update, intent)
    if intent.error is not None:
        update.set("error", intent.error.to_api())
    elif intent.output_ref is not None:
        update.set("outputRef", intent.output_ref)
    else:
        update.set("output", intent.output_text if intent.output_text is not None else "null")
    for name, value in sorted(intent.marks.items()):
        update.set(name, value)
    if intent.then is not None:
        update.set("next", _next_mark(intent.then))
    return update


def _branch_end(update: Update, intent: StepEnd) -> None:
    """A branch's step ends under its branch lease, which an end (not a retry) also
    releases: nothing more is written for the step, and the outbox asks for its run's next
    invocation when it sees a branch's step end (`service.stream`). An end its invocation's
    answer carried (`answered`) holds while that branch epoch still holds the attempt its
    lease started, even past the lease's end (no other delivery took it: an answer the
    invoker read in time is a fact), releases the lease whatever the end, and carries the
    invocation's events: its one write."""
    epoch = intent.lease.epoch
    if intent.answered is None:
        update.where("branchEpoch = :bepoch AND branchLeaseUntil >= :now", bepoch=epoch)
        update.bind(now=clock.now_ms())
        if intent.retry_at is None:
            update.set("branchLeaseUntil", 0)
        return
    update.where("branchEpoch = :bepoch AND startEpoch = :bepoch", bepoch=epoch)
    update.set("branchLeaseUntil", 0).remove("branchFailures")
    update.set_raw(
        f"{BRANCH_OUTCOMES_ATTR} = list_append(if_not_exists({BRANCH_OUTCOMES_ATTR}, :none), "
        ":answered)",
        none=[],
        answered=[dict(intent.answered)],
    )


def _inline_end_values(intent: StepEnd) -> dict[str, Any]:
    """The whole item of a step started inline, at its end (see `StepEnd.inline`)."""
    start = intent.inline
    assert start is not None
    values: dict[str, Any] = {
        "name": start.name,
        "kind": "run",
        "status": _end_status(intent),
        "attempt": intent.attempt or 1,
        "order": start.order,
        "startedAt": start.started_at,
        "startEpoch": intent.lease.epoch,
        "ttl": intent.expires,
        **intent.marks,
    }
    if intent.retry_at:
        values["wakeAt"] = intent.retry_at
    else:
        values["endedAt"] = intent.at
    if intent.error is not None:
        values["error"] = intent.error.to_api()
    elif intent.output_ref is not None:
        values["outputRef"] = intent.output_ref
    else:
        values["output"] = intent.output_text if intent.output_text is not None else "null"
    if intent.then is not None:
        values["next"] = _next_mark(intent.then)
    return _step_values(intent.lease.run_id, intent.step_id, values)


def _record_values(intent: ValueRecord) -> dict[str, Any]:
    values: dict[str, Any] = {
        "name": intent.name,
        "kind": intent.kind,
        "status": "completed",
        "attempt": 1,
        "order": intent.order,
        "startedAt": intent.at,
        "endedAt": intent.at,
        "output": intent.output_text,
        "ttl": intent.expires,
        **intent.marks,
    }
    if intent.then is not None:
        values["next"] = _next_mark(intent.then)
    return _step_values(intent.lease.run_id, intent.step_id, values)


def _change(intent: StepChange) -> Update:
    when_values = {k.removeprefix(":"): v for k, v in intent.when_values.items()}
    update = Update().where(intent.when, **when_values)
    for name, value in intent.sets.items():
        update.set(name, value)
    update.remove(*intent.remove)
    return update


def _event_values(intent: NewEvent) -> dict[str, Any]:
    return {
        "pk": items.run_pk(intent.run_id),
        "sk": items.EVENT_PREFIX + intent.event_id,
        "type": intent.type,
        "at": intent.at,
        "attempt": intent.attempt,
        "ttl": intent.expires,
        **{k: v for k, v in intent.fields.items() if v is not None},
    }


def _ask(intent: AskRun) -> dict[str, Any]:
    """`invokeSeq` + 1 of the live run (the stream sends the invocation)."""
    ask = (
        Update()
        .set_raw("invokeSeq = invokeSeq + :one, version = version + :one", one=1)
        .where(items.LIVE_CONDITION)
        .bind(typed=True, **_live_values())
    )
    if intent.unless_owed:
        ask.where("leaseUntil <> :free OR invokeSeq <= handledSeq", free=NO_LEASE)
    return ask.request(TableName=_table(), Key=items.run_key(intent.run_id))


def _lease_check(lease: Lease) -> dict[str, Any]:
    """The run's side of a main invocation's write under `lease`: it still holds the run.
    The lease is this invocation's only while it lasts: answering it (or backing off) sets
    `leaseUntil` to 0 or a retry time, so its token then writes nothing."""
    check = (
        Update()
        .where(items.LIVE_CONDITION)
        .bind(typed=True, **_live_values())
        .where("epoch = :epoch AND leaseUntil >= :now", epoch=lease.epoch)
        .bind(now=clock.now_ms())
    )
    return {"ConditionCheck": check.request(TableName=_table(), Key=items.run_key(lease.run_id))}


def _check_sizes(actions: Sequence[dict[str, Any]]) -> None:
    """`WriteTooLarge` for a transaction or an item past DynamoDB's limits."""
    if len(actions) > MAX_TRANSACTION_ITEMS:
        raise WriteTooLarge(
            f"{len(actions)} items in one transaction; DynamoDB takes at most "
            f"{MAX_TRANSACTION_ITEMS}"
        )
    total = 0
    for action in actions:
        ((_, body),) = action.items()
        size = ddb.item_bytes(body.get("Item") or body.get("ExpressionAttributeValues") or {})
        if size > MAX_ITEM_BYTES:
            raise WriteTooLarge(
                f"an item of {size:,} bytes; DynamoDB takes at most {MAX_ITEM_BYTES:,}"
            )
        total += size
    if total > MAX_TRANSACTION_BYTES:
        raise WriteTooLarge(
            f"{total:,} bytes in one transaction; DynamoDB takes at most {MAX_TRANSACTION_BYTES:,}"
        )
