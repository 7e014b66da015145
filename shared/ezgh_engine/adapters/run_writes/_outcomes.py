"""An invocation's outcome: written ahead, each alone, then committed by one conditional
write of the run item."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.expressions import Update
from ezgh_engine.adapters.intents import (
    EndCommit,
    Intent,
    NewItem,
    OutcomeCommit,
    SuspendCommit,
)
from ezgh_engine.adapters.run_writes._base import (
    RETENTION_SECONDS,
    STALE,
    _expires,
    _live_values,
    _table,
)
from ezgh_engine.adapters.run_writes._launches import RUN_ATTEMPT_ATTR, launch_chunks
from ezgh_engine.adapters.run_writes._segments import EVENTS_THROUGH_ATTR
from ezgh_engine.adapters.run_writes._writing import _single, write_each
from ezgh_engine.core.models import Run
from ezgh_engine.errors import StaleInvocation
from ezgh_engine.topology import RUNS_BY_STATUS


def outcome_event_values(run_id: str, mark: Mapping[str, Any], expires: int) -> dict[str, Any]:
    """The event item a run item's last outcome (`lastOut`) stands for: written by the next
    outcome before it replaces that mark, unconditionally (the same item each time, so a
    retry or a crash between the two writes leaves one event)."""
    return {**items.outcome_event(run_id, dict(mark)), "ttl": expires}


def commit(outcome: OutcomeCommit) -> None:
    """Record an invocation's outcome (docs/architecture.md, "An outcome's writes"): ahead
    of the commit, each alone, the run's previous outcome event as its own item, the new
    steps (`SuspendCommit.ahead`) and what the new waits start (`launches`, kept in chunk
    items the outbox reads once the commit is there); then the commit, one conditional
    write of the run item under the invocation's epoch, once per `seq`, carrying the
    outcome's own event. `StaleInvocation` when refused (the lease was lost, the run ended
    or changed status, or this answer was applied already): what was written ahead is
    inert, and a retry of the outcome finds it (or writes it again)."""
    run, mark = outcome.run, dict(outcome.mark)
    ahead: list[Intent] = []
    if isinstance(run.last_outcome, dict):
        ahead.append(NewItem(outcome_event_values(run.id, run.last_outcome, _expires()), False))
    ahead.extend(unclaimed_items(run))
    if isinstance(outcome, SuspendCommit):
        ahead.extend(outcome.ahead)
        chunks = list(launch_chunks(run, outcome.launches, str(mark["i"])))
        ahead.extend(chunks)
        if chunks:
            mark["l"], mark["lc"] = mark["i"], len(chunks)
        changes = Update().set("handledSeq", outcome.seq).set("leaseUntil", 0)
        changes.set("invokeFailures", 0).remove(items.INVOKE_THROTTLES_ATTR)
        if outcome.again:
            changes.set_raw("invokeSeq = invokeSeq + :again", again=1)
        seen = None
    else:
        changes = _end_changes(outcome)
        # Its status-index entry moves with its status (the only index write of an end).
        changes.set(RUNS_BY_STATUS.partition_key, items.status_index_pk(run, outcome.status))
        seen = run.status
    if outcome.events is not None:  # the run's step events kept in order up to here
        ahead.extend(outcome.events.items)
        changes.set(EVENTS_THROUGH_ATTR, outcome.events.through)
    write_each(ahead)
    _commit_run(run, outcome.seq, changes, mark, seen_status=seen)


def unclaimed_items(run: Run) -> list[NewItem]:
    """The parallel steps of the run's current launch that no branch message claimed yet
    (`Step.launched`: they exist only in the launch the run item names), as `waiting`
    items, each only if new: written ahead of a commit that replaces that name, so that
    they stay the run's steps (their messages' claims then take the items as they would
    any `waiting` step; the stream sends each one more branch message)."""
    return [
        NewItem({**step.launched, RUN_ATTEMPT_ATTR: run.attempt}, only_new=True)
        for step in run.steps
        if step.launched is not None
    ]


def _end_changes(end: EndCommit) -> Update:
    changes = (
        Update()
        .set("status", end.status)
        .set("endedAt", end.ended_at)
        .set("handledSeq", end.seq)
        .set("leaseUntil", 0)
        .set("ttl", end.ended_epoch_s + RETENTION_SECONDS)
    )
    if end.output_text is not None:
        changes.set("output", end.output_text)
    if end.output_ref is not None:
        changes.set("outputRef", end.output_ref)
    if end.error is not None:
        changes.set("error", end.error.to_api())
    if end.notify is not None:
        changes.set("notifyEnd", "yes" if end.notify else "no")
    return changes


def _commit_run(
    run: Run, seq: int, changes: Update, mark: dict[str, Any], *, seen_status: str | None
) -> None:
    """The commit: `changes` and the outcome's event (`mark`, which replaces the previous
    outcome's, written out ahead) on the run item, under the invocation's epoch, while the
    run is live (and still `seen_status`), once per `seq` (`handledSeq < seq`). The
    condition on the previous mark holds the order: no outcome replaces an event that was
    not written out."""
    changes.set(items.OUTCOME_ATTR, mark)
    previous = run.last_outcome
    if isinstance(previous, dict):
        changes.where("lastOut.i = :prevOut", prevOut=str(previous["i"]))
    else:
        changes.where("attribute_not_exists(lastOut)")
    changes.set_raw("version = version + :one", one=1)
    changes.where(f"epoch = :epoch AND {items.LIVE_CONDITION}", epoch=run.epoch)
    changes.bind(typed=True, **_live_values())
    if seen_status is not None:
        changes.where("#status = :seen", seen=seen_status)
    changes.where("handledSeq < :answered", answered=seq)
    try:
        _single({"Update": changes.request(TableName=_table(), Key=items.run_key(run.id))})
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise StaleInvocation(STALE) from None
        raise
