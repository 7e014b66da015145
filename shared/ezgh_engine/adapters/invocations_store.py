"""DynamoDB writes of the invocation lifecycle: take a lease, answer it, back off, wake timers.

A run has at most one live invocation. Taking the lease bumps `epoch` under a condition; every
later write of that invocation is conditional on the same epoch, so a stale invoker's writes
change nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, waits_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update, UpdateAction
from ezgh_engine.adapters.runs_store import (
    CHILD_ITEM_TTL_SECONDS,
    RETENTION_SECONDS,
    outcome_event_put,
)
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run, RunError
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


def _run_update(
    run: Run, update: Update, *, seen_status: str | None = None, answers: int | None = None
) -> dict[str, Any]:
    """A transaction Update of the run item (`update` and a version bump), conditional on the
    invocation's epoch; with `seen_status`, on the status the invocation saw (an end computed
    from `running` must not overwrite a cancel that came meanwhile); with `answers` (the
    `seq` of the invocation whose answer this is), on that reason being still
    unanswered, so one answer is applied once, however often it is posted."""
    update.set_raw("version = version + :one", one=1)
    update.where(f"epoch = :epoch AND {_LIVE_CONDITION}", epoch=run.epoch)
    update.bind(typed=True, **{k.removeprefix(":"): v for k, v in _LIVE.items()})
    if seen_status is not None:
        update.where("#status = :seen", seen=seen_status)
    if answers is not None:
        update.where("handledSeq < :answered", answered=answers)
    return UpdateAction(update, TableName=_table(), Key=items.run_key(run.id))


class StepsRefused(Exception):
    """A step write the answer carried (its held step ends) was refused: nothing was
    written; the caller applies those ends one by one to learn why."""


def _transact(actions: list[dict[str, Any]], step_writes: int = 0) -> None:
    """Write `actions`; the first is the run's update under the lease, the next
    `step_writes` are the answer's step ends."""
    try:
        _ddb().transact_write_items(TransactItems=actions)
    except ClientError as exc:
        codes = ddb.cancellation_codes(exc)
        if codes and codes[0] == "ConditionalCheckFailed":
            raise StaleInvocation(
                "the invocation's lease was taken over or the run ended"
            ) from None
        if "ConditionalCheckFailed" in codes[1 : 1 + step_writes]:
            raise StepsRefused() from None
        ddb.raise_transient(exc)
        raise


def _end_changes(
    *,
    status: str,
    ended_at: str,
    ended_epoch_s: int,
    seq: int,
    output_text: str | None,
    output_ref: str | None,
    error: RunError | None,
    notify: bool | None,
) -> Update:
    end = (
        Update()
        .set("status", status)
        .set("endedAt", ended_at)
        .set("handledSeq", seq)
        .set("leaseUntil", 0)
        .set("ttl", ended_epoch_s + RETENTION_SECONDS)
    )
    if output_text is not None:
        end.set("output", output_text)
    if output_ref is not None:
        end.set("outputRef", output_ref)
    if error is not None:
        end.set("error", error.to_api())
    if notify is not None:
        end.set("notifyEnd", "yes" if notify else "no")
    return end


def end_run(
    run: Run,
    seq: int,
    *,
    status: str,
    ended_at: str,
    ended_epoch_s: int,
    output_text: str | None = None,
    output_ref: str | None = None,
    error: RunError | None = None,
    events: list[dict[str, Any]] | None = None,
    step_writes: Sequence[dict[str, Any]] = (),
    notify: bool | None = None,
    mark: dict[str, Any] | None = None,
) -> None:
    """End the run (completed/failed/…) for the invocation holding `run.epoch`, while its
    status is still `run.status` (`StaleInvocation` otherwise). `notify` False marks a run
    whose app has no notifications, so the outbox sends it nowhere (None: unknown, the
    notify function decides).

    With `mark` (the outcome's event, `run_items.outcome_mark`) the end is one conditional
    write of the run item, which carries the event (`commit_outcome`); else one transaction
    with `events` and the step ends the answer carried (`StepsRefused` when one is
    refused)."""
    end = _end_changes(
        status=status,
        ended_at=ended_at,
        ended_epoch_s=ended_epoch_s,
        seq=seq,
        output_text=output_text,
        output_ref=output_ref,
        error=error,
        notify=notify,
    )
    if mark is not None:
        commit_outcome(run, seq, end, mark=mark, seen_status=run.status)
        return
    update = _run_update(run, end, seen_status=run.status, answers=seq)
    _transact([update, *step_writes, *(events or [])], len(step_writes))


def suspend(
    run: Run,
    seq: int,
    *,
    step_puts: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
    step_writes: Sequence[dict[str, Any]] = (),
    again: bool = False,
    mark: dict[str, Any] | None = None,
) -> None:
    """Answer the invocation `suspended`: record the new waits and release the lease.
    `again`: a new wait ended at once (failed), so the same write asks for the next
    invocation. With `mark`, `step_puts` are written first, one by one, and the run item's
    conditional write commits the outcome (`commit_outcome`); else one transaction with
    `events` and the step ends the answer carried (`StepsRefused` when one is refused)."""
    changes = Update().set("handledSeq", seq).set("leaseUntil", 0).set("invokeFailures", 0)
    if again:
        changes.set_raw("invokeSeq = invokeSeq + :again", typed=True, again={"N": "1"})
    if mark is not None:
        write_ahead(run, step_puts)
        commit_outcome(run, seq, changes, mark=mark)
        return
    update = _run_update(run, changes, answers=seq)
    _transact([update, *step_writes, *step_puts, *(events or [])], len(step_writes))


def write_ahead(run: Run, puts: Sequence[dict[str, Any]] = ()) -> None:
    """The writes an outcome makes before its commit (`commit_outcome`), each a plain
    conditional write that is harmless to repeat: the run's previous outcome event as its
    own item (the commit replaces the run item's copy), and new step items (`Put`s refused
    when the item exists: an earlier try of this same outcome wrote it, and its run's
    retry, replaying to the same step, finds it recorded). Nothing written here is a
    change of the run's state: until the commit, the run still answers to the old lease."""
    if isinstance(run.last_outcome, dict):
        expires = int(clock.now().timestamp()) + CHILD_ITEM_TTL_SECONDS
        _ddb().put_item(**outcome_event_put(run.id, run.last_outcome, expires)["Put"])
    for put in puts:
        try:
            _ddb().put_item(**put["Put"])
        except ClientError as exc:
            if not ddb.is_condition_failure(exc):
                ddb.raise_transient(exc)
                raise


def commit_outcome(
    run: Run,
    seq: int,
    changes: Update,
    *,
    mark: dict[str, Any],
    seen_status: str | None = None,
) -> None:
    """Commit an invocation's outcome with one conditional write of the run item: `changes`
    and the outcome's event (`mark`, which replaces the previous outcome's, written out by
    `write_ahead`), under the invocation's epoch, once per `seq`. The condition on the
    previous mark holds the order: no outcome replaces an event that was not written out.
    `StaleInvocation` when refused (the lease was lost, the run ended or changed status, or
    this answer was applied already)."""
    changes.set(items.OUTCOME_ATTR, mark)
    previous = run.last_outcome
    if isinstance(previous, dict):
        changes.where("lastOut.i = :prevOut", prevOut=str(previous["i"]))
    else:
        changes.where("attribute_not_exists(lastOut)")
    action = _run_update(run, changes, seen_status=seen_status, answers=seq)
    try:
        _ddb().update_item(**action["Update"])
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise StaleInvocation(
                "the invocation's lease was taken over or the run ended"
            ) from None
        ddb.raise_transient(exc)
        raise


def back_off(run: Run, *, failures: int, retry_at_ms: int) -> None:
    """Keep the lease until `retry_at_ms` after a failed delivery, counting the failure."""
    update = _run_update(
        run, Update().set("leaseUntil", retry_at_ms).set("invokeFailures", failures)
    )
    _transact([update])


def put_sleep_step(
    run: Run, *, step_id: str, name: str, order: str, started_at: str, wake_at: str, expires: int
) -> dict[str, Any]:
    """A transaction Put of a new `sleeping` step (created once: the lease is ours)."""
    values = {
        "name": name,
        "kind": "sleep",
        "status": "sleeping",
        "attempt": 1,
        "order": order,
        "startedAt": started_at,
        "wakeAt": wake_at,
        "ttl": expires,
    }
    return waits_store.step_put(run.id, step_id, values)


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
    the run is no longer live. Two single writes (issue 18: a transaction bills each item
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
    step = waits_store.step_update(
        run_id,
        step_id,
        sets={
            "status": "completed",
            "endedAt": ended_at,
            "output": "null",
            WAKE_ATTR: mark,
            **marks,
        },
        when="#status = :sleeping",
        when_values={":sleeping": "sleeping"},
    )
    try:
        _ddb().update_item(**step["Update"])
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            return None  # woken already (that timer's handler asks for the invocation)
        ddb.raise_transient(exc)
        raise
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
