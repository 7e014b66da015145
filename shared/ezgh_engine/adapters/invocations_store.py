"""DynamoDB writes of the invocation lifecycle: take a lease, back off, wake a sleep. (An
invocation's answer is committed by `adapters.run_writes.commit`.)

A run has at most one live invocation. Taking the lease bumps `epoch` under a condition; every
later write of that invocation is conditional on the same epoch, so a stale invoker's writes
change nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb, run_writes
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update
from ezgh_engine.adapters.intents import StepChange
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run
from ezgh_engine.errors import StaleInvocation

_LIVE = items.LIVE_VALUES
_LIVE_CONDITION = items.LIVE_CONDITION


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def take_lease(run_id: str, seq: int, *, now_ms: int, lease_ms: int) -> Run | None:
    """Lease the run for one invocation answering `seq`, or None when the condition fails
    (ended, already handled, or leased by a live invocation)."""
    try:
        answer = _ddb().update_item(
            TableName=_table(),
            Key=items.run_key(run_id),
            UpdateExpression=(
                "SET epoch = epoch + :one, leaseUntil = :until, version = version + :one"
            ),
            ConditionExpression=(
                f"{_LIVE_CONDITION} AND handledSeq < :seq AND invokeSeq >= :seq "
                "AND leaseUntil < :now"
            ),
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                **_LIVE,
                ":one": {"N": "1"},
                ":seq": {"N": str(seq)},
                ":now": {"N": str(now_ms)},
                ":until": {"N": str(now_ms + lease_ms)},
            },
            ReturnValues="ALL_NEW",
        )
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            return None
        ddb.raise_transient(exc)
        raise
    return items.run_from(ddb.from_item(answer["Attributes"]))


def back_off(run: Run, *, failures: int, retry_at_ms: int, throttles: int | None = None) -> None:
    """Keep the lease until `retry_at_ms` after a failed delivery, counting the failure (and
    `throttles`, the throttled deliveries in a row, when given: `INVOKE_THROTTLES_ATTR`);
    `StaleInvocation` when the invocation no longer holds the run."""
    update = (
        Update()
        .set("leaseUntil", retry_at_ms)
        .set("invokeFailures", failures)
        .set_raw("version = version + :one", one=1)
        .where(f"epoch = :epoch AND {_LIVE_CONDITION}", epoch=run.epoch)
        .bind(typed=True, **{k.removeprefix(":"): v for k, v in _LIVE.items()})
    )
    if throttles is not None:
        update.set(items.INVOKE_THROTTLES_ATTR, throttles)
    try:
        _ddb().update_item(**update.request(TableName=_table(), Key=items.run_key(run.id)))
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise StaleInvocation(
                "the invocation's lease was taken over or the run ended"
            ) from None
        ddb.raise_transient(exc)
        raise


# The run item's mark of its last sleep wake-up (`wake_mark`): which sleep and wake time.
WAKE_ATTR = "wk"


def wake_mark(step_id: str, wake_at: str) -> str:
    """What a sleep's wake-up writes on its run item (`WAKE_ATTR`): short, so the run item,
    written several times a run, stays in as few write units as before."""
    return hashlib.sha256(f"{step_id}@{wake_at}".encode()).hexdigest()[:12]


def wake_sleep(
    run_id: str,
    step_id: str,
    *,
    wake_at: str,
    ended_at: str,
    marks: dict[str, Any],
    lease: tuple[int, int, int] | None = None,
) -> str | None:
    """Complete a sleeping step and ask for an invocation, once: None when already woken or
    the run is no longer live. Two single writes (a transaction would bill each item
    twice), the step first, so whatever invocation the second one asks for replays the sleep
    completed; the second (`ask_after_wake`) marks the run item with this wake-up, so a
    timer delivered again after a crash between the two knows whether to ask still
    (`service.timers.fire_timer`). With `lease` (`now_ms`, `lease_ms`, `epoch`) the second
    write also takes the run's lease when it is free and still at epoch `epoch` (the lease
    taken is `epoch` + 1, which the caller must hold to: "leased": the caller invokes at
    once, and the outbox, which skips leased runs, sends nothing); else, or when another
    invocation holds the run, it only asks ("woke": the outbox sends the invocation)."""
    # The step is its own `step.completed` event (`marks`, see steps_store.event_marks); it
    # carries the mark too, so `service.repair` can tell an ask that never came.
    mark = wake_mark(step_id, wake_at)
    step = StepChange(
        run_id,
        step_id,
        {"status": "completed", "endedAt": ended_at, "output": "null", WAKE_ATTR: mark, **marks},
        "#status = :sleeping",
        {":sleeping": "sleeping"},
    )
    if not run_writes.transact([step]):  # one conditional write
        return None  # woken already (that timer's handler asks for the invocation)
    return ask_after_wake(run_id, mark, lease)


def ask_after_wake(run_id: str, mark: str, lease: tuple[int, int, int] | None) -> str | None:
    """The run item's half of a sleep's wake-up (`wake_sleep`): `invokeSeq` + 1 and the
    wake-up's `mark`, once per mark, if the run is live; with `lease`, the free lease too
    (falling back to asking only when another invocation holds it). "leased", "woke", or
    None when the run ended or this wake-up asked already."""
    run = (
        Update()
        .set_raw(f"invokeSeq = invokeSeq + :one, version = version + :one, {WAKE_ATTR} = :wk")
        .bind(one=1, wk=mark)
        .where(_LIVE_CONDITION)
        .bind(typed=True, **{k.removeprefix(":"): v for k, v in _LIVE.items()})
        .where(f"attribute_not_exists({WAKE_ATTR}) OR {WAKE_ATTR} <> :wk")
    )
    if lease is not None:  # the same write takes the free lease, from the epoch it read
        now_ms, lease_ms, epoch = lease
        run.set("epoch", epoch + 1).set("leaseUntil", now_ms + lease_ms)
        run.where("leaseUntil < :now AND epoch = :seenEpoch", now=now_ms, seenEpoch=epoch)
    try:
        _ddb().update_item(**run.request(TableName=_table(), Key=items.run_key(run_id)))
    except ClientError as exc:
        if not ddb.is_condition_failure(exc):
            ddb.raise_transient(exc)
            raise
        if lease is None:
            return None  # the run ended, or this wake-up asked already
        return ask_after_wake(run_id, mark, None)  # leased or moved on: ask only
    return "leased" if lease is not None else "woke"
