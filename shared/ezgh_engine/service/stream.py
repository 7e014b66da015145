"""The outbox: reactions to committed changes of the `runs` table, read from its stream.

A run write that leaves a reason to invoke unanswered and no lease sends an invocation; a
suspend's commit makes what its new waits start (`service.launches`); a step that starts
sleeping gets its timer. Reactions are idempotent, so duplicate or repeated records
(at-least-once delivery; moto may even show an upsert as two INSERTs) do no harm.
"""

from __future__ import annotations

import logging
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, messages, run_writes
from ezgh_engine.adapters.intents import AskRun
from ezgh_engine.core.leases import wants_invocation as wants_invocation  # the one predicate
from ezgh_engine.core.models import ENDED_STATUSES, LIVE_STATUSES
from ezgh_engine.core.protocol_rules import STEP_ENDED_STATUSES
from ezgh_engine.service import launches, notifications, retention, waits
from ezgh_engine.service.timers import DEADLINE_STEP, year_limit

log = logging.getLogger(__name__)


def _image(record: dict[str, Any], which: str) -> dict[str, Any] | None:
    raw = record.get("dynamodb", {}).get(which)
    return ddb.from_item(raw) if raw else None


def _on_run(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    _on_run_waits(old, new)
    launched = launches.launched_by(old, new) if new else None
    if launched and new:  # a suspend committed: what its new waits start is made now
        launches.launch(str(new["id"]), launched)
    if not wants_invocation(new):
        return
    assert new is not None
    if wants_invocation(old) and old and old.get("invokeSeq") == new.get("invokeSeq"):
        return  # the earlier write already sent this one
    messages.send_invocation(str(new["id"]), int(new["invokeSeq"]))


def _on_step(old: dict[str, Any] | None, new: dict[str, Any] | None, asked: set[str]) -> None:
    if not new:
        return
    # A parallel step waiting for its branch invocation (new, or a retry that came due).
    waiting = new.get("branch") and new.get("status") == "waiting"
    if waiting and (not old or old.get("status") != "waiting"):
        messages.send_branch(str(new["runId"]), str(new["stepId"]))
    # A parallel step that ended resumes its run: one ask per run in a batch however many
    # of its steps ended in it (the ask comes after all of them were written), and none
    # while an invocation is owed that has not begun (it will read this end).
    ended = new.get("branch") and new.get("status") in STEP_ENDED_STATUSES
    if ended and (not old or old.get("status") not in STEP_ENDED_STATUSES):
        run_id = str(new["runId"])
        if run_id not in asked:
            asked.add(run_id)
            # Refused: owed already, or the run ended meanwhile.
            run_writes.transact([AskRun(run_id, unless_owed=True)])
    # Sleeps, retries and waits with a deadline get a timer for their (new) wake time.
    if new.get("status") not in ("sleeping", "retrying", "waiting") or not new.get("wakeAt"):
        return
    if old and old.get("wakeAt") == new.get("wakeAt") and old.get("status") == new["status"]:
        return
    messages.schedule_timer(str(new["runId"]), str(new["stepId"]), clock.parse_iso(new["wakeAt"]))


def _on_run_waits(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """Issue 3: a run's time limit gets its timer; a run that ends resumes its parent."""
    if not new:
        return
    deadline = new.get("deadlineAt")
    if deadline and (not old or old.get("deadlineAt") != deadline):
        messages.schedule_timer(str(new["id"]), "$deadline", clock.parse_iso(deadline))
    _year_limit_timer(old, new)
    ended = new.get("status") in ENDED_STATUSES
    if ended and (not old or old.get("status") not in ENDED_STATUSES):
        waits.on_run_ended(new)


def _year_limit_timer(old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    """Every live run holds a timer for its one-year limit: armed when it is written live
    (at its start, and again by a RetryRun), deleted when it ends, so the Scheduler holds one
    schedule per live run. A name per run and time: a repeated record changes nothing."""
    if not new.get("createdAt"):
        return
    run_id, limit = str(new["id"]), year_limit(str(new["createdAt"]))
    live = str(new.get("status")) in LIVE_STATUSES
    was_live = old is not None and str(old.get("status")) in LIVE_STATUSES
    if live and not was_live:
        messages.schedule_timer(run_id, DEADLINE_STEP, clock.parse_iso(limit))
    elif was_live and not live:
        messages.drop_timer(run_id, DEADLINE_STEP, limit)
        if new.get("deadlineAt"):
            messages.drop_timer(run_id, DEADLINE_STEP, str(new["deadlineAt"]))


def handle_record(record: dict[str, Any], asked: set[str] | None = None) -> None:
    """React to one stream record of the `runs` table (`asked`: the runs asked for an
    invocation by the batch's earlier records). Only run and step items are reacted to (the
    topology's filter lets no other through on AWS): others are not even decoded."""
    change = record.get("dynamodb", {})
    image = change.get("NewImage") or change.get("OldImage") or {}
    if (image.get("type") or {}).get("S") not in ("run", "step"):
        return
    if record.get("eventName") == "REMOVE":
        removed = _image(record, "OldImage")
        if removed and removed.get("type") == "run":  # its TTL (or DeleteRun): the rest goes
            retention.on_run_removed(removed)
        return
    new, old = _image(record, "NewImage"), _image(record, "OldImage")
    item = new or old or {}
    item_type = item.get("type")
    if item_type == "run":
        _on_run(old, new)
        notifications.on_run_change(old, new)  # issue 4: run-result notifications
    elif item_type == "step":
        _on_step(old, new, set() if asked is None else asked)


def handle_batch(records: list[dict[str, Any]]) -> list[str]:
    """Handle records in order; on the first failure answer its sequence number (and stop),
    so the event source retries from there."""
    asked: set[str] = set()
    for record in records:
        try:
            handle_record(record, asked)
        except Exception:
            log.exception("stream record failed; retrying from it")
            return [str(record.get("dynamodb", {}).get("SequenceNumber", ""))]
    return []
