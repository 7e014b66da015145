"""The one writer of a run's steps and outcomes: typed intents (`adapters.intents`) in,
DynamoDB requests out (docs/architecture.md, "The write path").

Step ops, outcomes, waits and branches say what to write; this module alone builds the
requests and owns every decision about how they are written:

- **one write or a transaction.** A step call's batch is written on the steps' own
  conditions (`write`: one conditional write for one item, else one transaction); an op
  under the lease (`write_leased`) is a transaction with the lease's check; a wait's end,
  a resume, a cancel are all-or-nothing (`transact`). An outcome (`commit`) is never a
  transaction: its items are written ahead, each alone and harmless to repeat, and one
  conditional write of the run item commits it; what its new waits start is made by the
  outbox after that commit (`launch`), never before.
- **how much at once.** At most `MAX_TRANSACTION_ITEMS` items and `MAX_TRANSACTION_BYTES`
  in one transaction, `MAX_ITEM_BYTES` in one item (DynamoDB's limits): a write past them is
  refused before anything is written (`WriteTooLarge`), and what a suspend starts is kept
  in chunks of at most `LAUNCH_CHUNK_BYTES` (any number of new waits).
- **where a value goes.** Inline in its item up to `settings().payload_inline_bytes`, else
  to the run's payloads in S3 (`place_value`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update
from ezgh_engine.adapters.intents import (
    AskRun,
    DeleteItem,
    EndCommit,
    EventSegments,
    Intent,
    Launch,
    Lease,
    NewEvent,
    NewItem,
    NewStep,
    NextStart,
    OutcomeCommit,
    StepChange,
    StepEnd,
    StepStart,
    SuspendCommit,
    ValueRecord,
)
from ezgh_engine.config import settings
from ezgh_engine.core.leases import NO_LEASE
from ezgh_engine.core.models import Run
from ezgh_engine.errors import StaleInvocation, ValidationError

# DynamoDB's own limits (the Developer Guide's "Service, account, and table quotas").
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
MAX_ITEM_BYTES = 400 * 1024
# What a suspend starts is kept in items of at most this size (well under an item's limit).
LAUNCH_CHUNK_BYTES = 256 * 1024
LAUNCH_PREFIX = "LAUNCH#"
# A wide launch's parallel steps replay from a copy of the history before it, in chunks.
HISTORY_PREFIX = "HIST#"
HISTORY_CHUNK_BYTES = 256 * 1024
# DynamoDB's price of a byte written against a byte read eventually consistent: a write
# unit is 1 KB at $0.625 per million, a read unit 4 KB at half of $0.125 per million.
WRITE_READ_PRICE_RATIO = 40
# Below this many parallel steps a launch keeps no copy: what its branches read of their
# siblings is small, and their requests stay those of the protocol's recorded exchanges.
HISTORY_MIN_BRANCHES = 16
# Steps and events outlive the longest run (a year) plus retention (runs_store's).
RETENTION_SECONDS = 30 * 24 * 3600
CHILD_ITEM_TTL_SECONDS = 366 * 24 * 3600 + RETENTION_SECONDS

STALE = "the invocation's lease was taken over or the run ended"


class AlreadyRecorded(Exception):
    """A step's condition failed: it holds an outcome already (or another attempt's).

    `index` is the position of the refused intent among those written (0-based, a lease
    check not counted)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(f"step write {index} refused")
        self.index = index


class WriteTooLarge(ValidationError):
    """A write past DynamoDB's limits, refused before anything was written."""


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


# --- where a value goes ---------------------------------------------------------------------


def inline(text: str) -> bool:
    """Whether a JSON value's text is kept in its item (else in the run's payloads)."""
    return len(text.encode()) <= settings().payload_inline_bytes


# --- intents as requests ----------------------------------------------------------------------


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
        # Under the branch invocation's lease, which an end (not a retry) also releases:
        # nothing more is written for the step, and the outbox asks for its run's next
        # invocation when it sees a branch's step end (`service.stream`).
        update.where("branchEpoch = :bepoch AND branchLeaseUntil >= :now", bepoch=lease.epoch)
        update.bind(now=clock.now_ms())
        if intent.retry_at is None:
            update.set("branchLeaseUntil", 0)
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


def _live_values() -> dict[str, Any]:
    return {k.removeprefix(":"): v for k, v in items.LIVE_VALUES.items()}


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


# --- sizes ----------------------------------------------------------------------------------


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


# --- writing ----------------------------------------------------------------------------------


def _single(action: dict[str, Any]) -> None:
    """One conditional write; `ClientError` as DynamoDB answered (throttling made
    transient)."""
    ((kind, body),) = action.items()
    try:
        if kind == "Put":
            _ddb().put_item(**body)
        elif kind == "Update":
            _ddb().update_item(**body)
        elif kind == "Delete":
            _ddb().delete_item(**body)
        else:
            raise TypeError(f"{kind} is only written in a transaction")
    except ClientError as exc:
        if not ddb.is_condition_failure(exc):
            ddb.raise_transient(exc)
        raise


def _transaction(actions: Sequence[dict[str, Any]]) -> list[str]:
    """Write `actions` all or nothing: [] when written, else each action's cancellation
    code ('None' where it was fine) when a condition refused."""
    _check_sizes(actions)
    try:
        _ddb().transact_write_items(TransactItems=list(actions))
    except ClientError as exc:
        codes = ddb.cancellation_codes(exc)
        if "ConditionalCheckFailed" in codes:
            return codes
        ddb.raise_transient(exc)
        raise
    return []


def _first_refused(codes: Sequence[str]) -> int:
    return next(i for i, code in enumerate(codes) if code == "ConditionalCheckFailed")


def write(intents: Sequence[Intent]) -> None:
    """Step writes on their own conditions (no lease check: they hold the records
    together, see `service.steps`): one conditional write for one, else one transaction.
    `AlreadyRecorded(index)` when a condition refused (nothing was written)."""
    actions = [request(i) for i in intents]
    if len(actions) == 1:
        _check_sizes(actions)
        try:
            _single(actions[0])
        except ClientError as exc:
            if ddb.is_condition_failure(exc):
                raise AlreadyRecorded(0) from None
            raise
        return
    codes = _transaction(actions)
    if codes:
        raise AlreadyRecorded(_first_refused(codes))


def write_leased(lease: Lease, intents: Sequence[Intent]) -> dict[str, Any]:
    """Step writes of one op under `lease`; answer what a single update wrote (its new
    values: a start's attempt the store counted), else {}.

    A main invocation's: one transaction with the check that it still holds the run's lease
    (`StaleInvocation` when it does not). A branch invocation's: its step's own conditions
    hold the step's branch lease, so the op is one conditional write (a failure with its
    event: one transaction) and the caller checks the run is live. `AlreadyRecorded(index)`
    when a step's condition refused (nothing was written)."""
    if lease.branch_step is not None:
        return _write_returning([request(i) for i in intents])
    codes = _transaction([_lease_check(lease), *(request(i) for i in intents)])
    if not codes:
        return {}
    if codes[0] == "ConditionalCheckFailed":
        raise StaleInvocation(STALE)
    raise AlreadyRecorded(_first_refused(codes[1:]))


def _write_returning(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """Like `write`, answering a single update's new values ({} otherwise)."""
    if len(actions) != 1:
        codes = _transaction(actions)
        if codes:
            raise AlreadyRecorded(_first_refused(codes))
        return {}
    _check_sizes(actions)
    ((kind, body),) = actions[0].items()
    try:
        if kind != "Update":
            _single(actions[0])
            return {}
        answer = _ddb().update_item(**body, ReturnValues="UPDATED_NEW")
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise AlreadyRecorded(0) from None
        ddb.raise_transient(exc)
        raise
    return ddb.from_item(answer.get("Attributes") or {})


def transact(intents: Sequence[Intent]) -> bool:
    """Write all or nothing; False when a condition refused (the race was lost). One item
    is one conditional write (a transaction bills each item twice)."""
    actions = [request(i) for i in intents]
    if len(actions) != 1:
        return not _transaction(actions)
    _check_sizes(actions)
    try:
        _single(actions[0])
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            return False
        raise
    return True


def write_each(intents: Sequence[Intent]) -> None:
    """Each alone, each harmless to repeat: an item refused because it exists (an
    earlier try wrote it) is left as it is."""
    for intent in intents:
        action = request(intent)
        _check_sizes([action])
        try:
            _single(action)
        except ClientError as exc:
            if not ddb.is_condition_failure(exc):
                raise


# --- an outcome -------------------------------------------------------------------------------


def _expires() -> int:
    return int(clock.now().timestamp()) + CHILD_ITEM_TTL_SECONDS


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
    if isinstance(outcome, SuspendCommit):
        ahead.extend(outcome.ahead)
        chunks = list(_launch_chunks(run, outcome.launches, str(mark["i"])))
        ahead.extend(chunks)
        if chunks:
            mark["l"], mark["lc"] = mark["i"], len(chunks)
        changes = Update().set("handledSeq", outcome.seq).set("leaseUntil", 0)
        changes.set("invokeFailures", 0)
        if outcome.again:
            changes.set_raw("invokeSeq = invokeSeq + :again", again=1)
        seen = None
    else:
        changes = _end_changes(outcome)
        seen = run.status
    if outcome.events is not None:  # the run's step events kept in order up to here
        ahead.extend(outcome.events.items)
        changes.set(EVENTS_THROUGH_ATTR, outcome.events.through)
    write_each(ahead)
    _commit_run(run, outcome.seq, changes, mark, seen_status=seen)


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


# --- what a suspend starts: launches ----------------------------------------------------------


def _pack(value: Any) -> bytes:
    """A chunk's values as compressed JSON (a binary attribute): a launch's items repeat
    their names and most values, so a wide one writes a fraction of the units."""
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)


def _unpack(raw: Any) -> Any:
    return json.loads(zlib.decompress(bytes(getattr(raw, "value", raw))))


def _launch_chunks(run: Run, launches: Sequence[Launch], launch_id: str) -> Iterator[NewItem]:
    """The chunk items that keep `launches` until the outbox makes them: their items as
    plain values, in order, at most `LAUNCH_CHUNK_BYTES` of JSON text each."""
    chunk: list[list[dict[str, Any]]] = []
    size = 0
    index = 0
    for launch in launches:
        entry = [_launch_values(run.id, item) for item in launch.items]
        text_size = len(json.dumps(entry, separators=(",", ":")).encode())
        if chunk and size + text_size > LAUNCH_CHUNK_BYTES:
            yield _launch_chunk(run, launch_id, index, chunk)
            chunk, size, index = [], 0, index + 1
        chunk.append(entry)
        size += text_size
    if chunk:
        yield _launch_chunk(run, launch_id, index, chunk)


def _launch_values(run_id: str, item: NewStep | NewItem) -> dict[str, Any]:
    if isinstance(item, NewStep):
        return _step_values(run_id, item.step_id, item.values) | {"$new": True}
    return dict(item.values) | {"$new": item.only_new}


def _launch_chunk(
    run: Run, launch_id: str, index: int, entries: list[list[dict[str, Any]]]
) -> NewItem:
    return NewItem(
        {
            "pk": items.run_pk(run.id),
            "sk": f"{LAUNCH_PREFIX}{launch_id}#{index:05d}",
            "type": "launch",
            "attempt": run.attempt,
            "entries": _pack(entries),
            "ttl": _expires(),
        },
        only_new=False,
    )


def launch_entries(run_id: str, launch_id: str) -> tuple[int, list[list[dict[str, Any]]]]:
    """A committed suspend's launches as kept (`commit`): the run attempt that made them,
    and each launch's items as plain values (`$new`: only if new)."""
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :launch)",
        "ExpressionAttributeValues": {
            ":pk": {"S": items.run_pk(run_id)},
            ":launch": {"S": f"{LAUNCH_PREFIX}{launch_id}#"},
        },
        "ConsistentRead": True,
    }
    attempt, entries = 0, []
    while True:
        answer = _ddb().query(**kwargs)
        for raw in answer.get("Items", []):
            chunk = ddb.from_item(raw)
            attempt = int(chunk.get("attempt", 1))
            entries.extend(_unpack(chunk["entries"]))
        if "LastEvaluatedKey" not in answer:
            return attempt, entries
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def make_launched(entries: Sequence[list[dict[str, Any]]]) -> int:
    """Write each launch's items, launch after launch in the order the workflow asked for
    them (so their branch invocations are sent in that order), each alone and only if new;
    answer how many launches were written now. A launch whose first item exists with other
    values (the step was recorded otherwise meanwhile: a cancel, another try's launch)
    stops there: what follows it would start machinery for a step that is not this
    launch's."""
    return sum(_make_one(entry) for entry in entries)


def _make_one(entry: list[dict[str, Any]]) -> int:
    made = 0
    for position, raw in enumerate(entry):
        values = {k: v for k, v in raw.items() if k != "$new"}
        try:
            _single(_put(values, only_new=bool(raw.get("$new", True))))
            made = 1
        except ClientError as exc:
            if not ddb.is_condition_failure(exc):
                raise
            if position == 0 and not _same_item(values):
                return 0
    return made


def _same_item(values: dict[str, Any]) -> bool:
    """Whether the item `values` would write exists as they say (an earlier try of the
    same launch wrote it): the same `order`, minted when the suspend was answered."""
    answer = _ddb().get_item(
        TableName=_table(), Key=items.key(values["pk"], values["sk"]), ConsistentRead=True
    )
    existing = ddb.from_item(answer["Item"]) if "Item" in answer else {}
    return bool(existing) and existing.get("order") == values.get("order")


# --- the history a wide launch's parallel steps replay ----------------------------------------


def history_pays(branches: int, history_bytes: int, branch_bytes: int = 300) -> bool:
    """Whether a launch of `branches` parallel steps is cheaper with a copy of the history
    before it (`history_bytes` written once) than without (each branch invocation reads
    the whole run: its `branches` siblings too). An empty history always pays: nothing to
    copy, and no branch reads another."""
    if branches < HISTORY_MIN_BRANCHES:
        return False
    saved = branches * branches * branch_bytes
    return history_bytes == 0 or saved > WRITE_READ_PRICE_RATIO * history_bytes


def write_history(run_id: str, launch_id: str, values: Sequence[Mapping[str, Any]]) -> int:
    """Keep `values` (a run's step items as read before a launch) for that launch's
    parallel steps to replay from, in chunk items; answer how many (0: empty)."""
    chunks: list[list[Mapping[str, Any]]] = [[]]
    size = 0
    for item in values:
        item_size = len(json.dumps(item, separators=(",", ":")).encode())
        if chunks[-1] and size + item_size > HISTORY_CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += item_size
    if not chunks[-1]:
        return 0
    expires = _expires()
    write_each(
        [
            NewItem(
                {
                    "pk": items.run_pk(run_id),
                    "sk": f"{HISTORY_PREFIX}{launch_id}#{index:05d}",
                    "type": "history",
                    "steps": _pack(chunk),
                    "ttl": expires,
                },
                only_new=False,
            )
            for index, chunk in enumerate(chunks)
        ]
    )
    return len(chunks)


def read_history(run_id: str, launch_id: str) -> list[dict[str, Any]]:
    """The step items `write_history` kept for a launch."""
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :hist)",
        "ExpressionAttributeValues": {
            ":pk": {"S": items.run_pk(run_id)},
            ":hist": {"S": f"{HISTORY_PREFIX}{launch_id}#"},
        },
        "ConsistentRead": True,
    }
    found: list[dict[str, Any]] = []
    while True:
        answer = _ddb().query(**kwargs)
        for raw in answer.get("Items", []):
            found.extend(_unpack(ddb.from_item(raw)["steps"]))
        if "LastEvaluatedKey" not in answer:
            return found
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


# --- a run's step events kept in order (ListRunEvents) ----------------------------------------

# A step's `step.completed` is carried by its own item (no event item: one write a step), and
# step items are keyed by step ID, not by when they ended: listing events in order would read
# every step for every page. So the events older than `EVENTS_FINAL_AFTER` (when no write
# minted before can still land: no function runs longer than 15 minutes) are also kept in
# segment items (`EVS#<through>`) in order, and the run item says up to where
# (`EVENTS_THROUGH_ATTR`): a listing reads those in order and the steps only past them.
EVENTS_PREFIX = "EVS#"
EVENTS_THROUGH_ATTR = "evB"
EVENTS_FINAL_AFTER_MS = 16 * 60 * 1000
# A segment is written once this many final events are not kept yet, at most this many each.
SEGMENT_MIN_EVENTS = 100
SEGMENT_MAX_EVENTS = 2000


def events_final_through(now_ms: int) -> str:
    """The event ID up to which no event can still be written (see `EVENTS_FINAL_AFTER_MS`)."""
    return ids.time_bound(now_ms - EVENTS_FINAL_AFTER_MS)


def event_segments(
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    kept_through: str,
    now_ms: int,
    *,
    at_least: int = SEGMENT_MIN_EVENTS,
) -> EventSegments | None:
    """Segments of the step `events` (as `core.events` gives them) after `kept_through`
    and final now, when there are `at_least` of them (None: not yet)."""
    through = events_final_through(now_ms)
    fresh = sorted(
        (e for e in events if kept_through < str(e["id"]) <= through), key=lambda e: str(e["id"])
    )
    if len(fresh) < max(1, at_least) or through <= kept_through:
        return None
    segments: list[NewItem] = []
    low = kept_through
    for start in range(0, len(fresh), SEGMENT_MAX_EVENTS):
        part = fresh[start : start + SEGMENT_MAX_EVENTS]
        last = start + SEGMENT_MAX_EVENTS >= len(fresh)
        high = through if last else str(part[-1]["id"])
        segments.append(
            NewItem(
                {
                    "pk": items.run_pk(run_id),
                    "sk": EVENTS_PREFIX + high,
                    "type": "events",
                    "from": low,
                    "events": _pack(part),
                    "ttl": _expires(),
                },
                only_new=False,
            )
        )
        low = high
    return EventSegments(tuple(segments), through)


def keep_events(run_id: str, segments: EventSegments) -> None:
    """Write `segments` and move the run item's mark to their end (only forward): what a
    listing that read past the mark found final (the invoker keeps them as a run goes)."""
    write_each(segments.items)
    update = (
        Update()
        .set(EVENTS_THROUGH_ATTR, segments.through)
        .where("attribute_exists(pk)")
        .where(
            f"attribute_not_exists({EVENTS_THROUGH_ATTR}) OR {EVENTS_THROUGH_ATTR} < :through",
            through=segments.through,
        )
    )
    try:
        _single({"Update": update.request(TableName=_table(), Key=items.run_key(run_id))})
    except ClientError as exc:
        if not ddb.is_condition_failure(exc):
            raise


def segment_events(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events a segment item keeps."""
    return list(_unpack(raw["events"]))
