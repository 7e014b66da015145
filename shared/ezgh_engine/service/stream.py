"""The outbox: reactions to committed changes of the `runs` table, read from its stream.

A run write that leaves a reason to invoke unanswered and no lease sends an invocation; a
suspend's commit makes what its new waits start (`service.launches`); a step that starts
sleeping gets its timer. Reactions are idempotent, so duplicate or repeated records
(at-least-once delivery; moto may even show an upsert as two INSERTs) do no harm.

A throttle does not cost a record: the calls that have a way round one take it
(`adapters.messages`: an invoke or a schedule still throttled after the client's retries
goes through the invocations queue), and a record whose reaction is still throttled (a
DynamoDB write, an SQS send) is tried again here, with backoff and jitter, while the
invocation has time (`handle_batch`), before it is left to the mapping's retries. Nothing
here makes a call per run that a burst of starts could throttle: a run's one-year limit is
kept by an hourly sweep (`service.year_limits`), not by a schedule per run.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import aws, ddb, messages, run_writes
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.intents import AskRun
from ezgh_engine.core.leases import wants_invocation as wants_invocation  # the one predicate
from ezgh_engine.core.models import ENDED_STATUSES, LIVE_STATUSES
from ezgh_engine.core.protocol_rules import STEP_ENDED_STATUSES
from ezgh_engine.errors import TransientError
from ezgh_engine.observability import logs
from ezgh_engine.service import launches, notifications, retention, waits, year_limits
from ezgh_engine.service.timers import DEADLINE_STEP

log = logging.getLogger(__name__)


def _image(record: dict[str, Any], which: str) -> dict[str, Any] | None:
    raw = record.get("dynamodb", {}).get(which)
    return ddb.from_item(raw) if raw else None


def _run_of(record: dict[str, Any]) -> str | None:
    """The run a record is about (a run item's `id`, a step's `runId`), for its log lines."""
    change = record.get("dynamodb", {})
    image = change.get("NewImage") or change.get("OldImage") or {}
    found = image.get("runId") or image.get("id") or {}
    return found.get("S") if isinstance(found, dict) else None


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
    # A parallel step item waiting for its branch invocation (a retry that came due, or one
    # an outcome wrote while unclaimed): a message in the old shape, which takes the item.
    # A launch's steps have no item: the launch sent theirs, and their claims create the
    # items `running`, which sends nothing here.
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
            _ask_run(run_id)  # noted once done (a throttled ask is tried again with its record)
            asked.add(run_id)
    # Sleeps, retries and waits with a deadline get a timer for their (new) wake time.
    if new.get("status") not in ("sleeping", "retrying", "waiting") or not new.get("wakeAt"):
        return
    if old and old.get("wakeAt") == new.get("wakeAt") and old.get("status") == new["status"]:
        return
    messages.schedule_timer(str(new["runId"]), str(new["stepId"]), clock.parse_iso(new["wakeAt"]))


def _on_run_waits(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """A run's time limit gets its timer; a run that ends resumes its parent. A
    live run is counted in its creation hour's year-limit bucket (`year_limits.arm`: one
    write per hour and project per environment, none per run)."""
    if not new:
        return
    deadline = new.get("deadlineAt")
    if deadline and (not old or old.get("deadlineAt") != deadline):
        messages.schedule_timer(str(new["id"]), DEADLINE_STEP, clock.parse_iso(deadline))
    live = str(new.get("status")) in LIVE_STATUSES
    if live:
        year_limits.arm(new)
    was_live = old is not None and str(old.get("status")) in LIVE_STATUSES
    if was_live and not live and new.get("deadlineAt"):
        # Its own time limit's timer is not needed any more (a long one is a schedule).
        messages.drop_timer(str(new["id"]), DEADLINE_STEP, str(new["deadlineAt"]))
    ended = new.get("status") in ENDED_STATUSES
    if ended and (not old or old.get("status") not in ENDED_STATUSES):
        waits.on_run_ended(new)


def _ask_run(run_id: str) -> None:
    """Ask for the run's next invocation after a parallel step's end, unless one is owed
    already that has not begun (it reads this end when it does) or the run ended. A
    consistent read of the run first: most asks of a wide gather come while the last ask's
    invocation is still owed, and the write they would make is refused anyway but billed
    as a write of the whole run item (2 WRU past 1 KB); the read is 1 RRU. The write keeps
    its own condition for a run that changed between the two."""
    run = ws.get(items.run_pk(run_id), items.RUN_SK)
    if run is None or run.get("status") not in LIVE_STATUSES or wants_invocation(run):
        return
    run_writes.transact([AskRun(run_id, unless_owed=True)])


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
        notifications.on_run_change(old, new)  # run-result notifications
    elif item_type == "step":
        _on_step(old, new, set() if asked is None else asked)


# A record whose reaction is throttled is tried again here while the invocation has more
# than this left (a try may take the client's whole retry budget, about 15 s), waiting
# `THROTTLE_BACKOFF` seconds doubling up to `THROTTLE_BACKOFF_MAX`, with equal jitter.
THROTTLE_RESERVE_SECONDS = 20.0
THROTTLE_BACKOFF = 0.2
THROTTLE_BACKOFF_MAX = 5.0


def _throttled(error: BaseException) -> bool:
    """A throttle (or a DynamoDB conflict) after the client's retries, raw or as the
    `TransientError` the stores raise for it."""
    return isinstance(error, TransientError) or aws.is_throttle(error)


def _handle_patiently(
    record: dict[str, Any], time_left: Callable[[], float] | None, asked: set[str]
) -> None:
    """`handle_record`, tried again while it is throttled and the invocation has time."""
    for tried in itertools.count():
        try:
            with logs.bound(run_id=_run_of(record)):
                handle_record(record, asked)
            return
        except Exception as error:
            wait = min(THROTTLE_BACKOFF * 2**tried, THROTTLE_BACKOFF_MAX)
            wait *= 0.5 + 0.5 * ids.random_fraction()
            if not _throttled(error) or time_left is None:
                raise
            if time_left() - wait < THROTTLE_RESERVE_SECONDS:
                raise
            log.warning("stream record throttled (%s); again in %.1f s", error, wait)
            time.sleep(wait)


def handle_batch(
    records: list[dict[str, Any]], time_left: Callable[[], float] | None = None
) -> list[str]:
    """Handle records in order; on the first failure answer its sequence number (and stop),
    so the event source retries from there. `time_left()`: the invocation's seconds left;
    with it, a throttled record is tried again in place while there is time.

    The invocations the records ask for start in groups (`messages.gathering`): one
    invoker environment answers a group at once. A group that could not be sent fails
    its earliest record, so that record and the ones after it are handled again."""
    with messages.gathering() as outbox:
        failed = _handle_in_order(records, time_left, outbox)
        unsent = outbox.flush()
    if unsent is not None:
        return [str(unsent)]
    return [failed] if failed is not None else []


def _handle_in_order(
    records: list[dict[str, Any]], time_left: Callable[[], float] | None, outbox: messages.Outbox
) -> str | None:
    """Handle records until one fails (answer its sequence number) or a group of starts
    could not be sent (the batch is failed from that group's first record: see
    `handle_batch`). `asked`: the runs whose resume this batch has written already."""
    asked: set[str] = set()
    for record in records:
        sequence = str(record.get("dynamodb", {}).get("SequenceNumber", ""))
        outbox.mark(sequence)
        try:
            _handle_patiently(record, time_left, asked)
        except Exception:
            log.exception("stream record failed; retrying from it")
            return sequence
        if outbox.unsent is not None:
            return None
    return None
