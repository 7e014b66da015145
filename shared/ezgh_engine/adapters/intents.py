"""What the engine asks to write in the `runs` table, in its own words: typed write intents.

Step ops (`service.step_ops`), outcomes (`service.outcomes`), waits and branches decide what
is written and produce these values; `adapters.run_writes` alone turns them into DynamoDB
requests, and alone decides how they are written (one conditional write, a transaction,
ahead of an outcome's commit or after it) and what they may weigh. Nothing here does I/O,
reads the clock or knows a request's shape: an intent says which item, what changes, and
on what condition in the engine's terms (an epoch, an attempt, a status).

Values are plain Python values (as `adapters.ddb.to_item` takes them); `Mapping` fields are
not copied, so build a new one rather than change one an intent holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ezgh_engine.core.models import Run, RunError
from ezgh_engine.protocol.ops import InlineStart

# --- who writes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """An invocation's right to write: the run's lease `epoch`, or for a branch invocation
    (`branch_step`) that step's `branchEpoch` (the run need only be live)."""

    run_id: str
    epoch: int
    branch_step: str | None = None


# --- a step's own item ----------------------------------------------------------------------


@dataclass(frozen=True)
class NextStart:
    """A step started by the write that ends the step before it (protocol 1.3): attempt 1,
    kept as a `next` mark on that item until the step ends with an item of its own. A mark
    of an earlier run attempt (`run_attempt`) is not a running step (a RetryRun deleted it)."""

    step_id: str
    name: str
    order: str
    started_at: str
    epoch: int
    run_attempt: int = 1


@dataclass(frozen=True)
class StepStart:
    """A `run` step runs: its attempt set exactly (`attempt`, on the condition that the step
    holds the one before: no read needed) or, with None, counted up by the store; new, or
    running after a crash, or a retry that is due; a branch's step only under its lease."""

    lease: Lease
    step_id: str
    name: str
    kind: str
    order: str
    at: str
    expires: int
    attempt: int | None = None


@dataclass(frozen=True)
class StepEnd:
    """A `run` step's attempt ends: `completed` (an output, inline or a payload path),
    `failed` (`error`), or `retrying` until `retry_at`; only while the attempt this
    invocation started (`attempt`, its epoch or branch epoch) still runs it. A step started
    inline (`inline`) has no item yet: its end writes the whole item, refused when one
    exists. `marks` make the item its own `step.completed` event; `then` is the next step's
    start riding this write. `answered`: a branch invocation's answer carried the end (its
    lease started the step: `lease.epoch` is that attempt's `startEpoch`); the write also
    releases the step's lease and carries that invocation's events (an `outcome_mark`)."""

    lease: Lease
    step_id: str
    at: str
    output_text: str | None = None
    output_ref: str | None = None
    error: RunError | None = None
    retry_at: str | None = None
    attempt: int | None = None
    marks: Mapping[str, Any] = field(default_factory=dict)
    inline: InlineStart | None = None
    expires: int = 0  # the item's expiry, when the end writes it whole (`inline`)
    then: NextStart | None = None
    answered: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ValueRecord:
    """A `value` step, completed at once: its whole item, refused when the step exists;
    `then` is the next step's start riding this write."""

    lease: Lease
    step_id: str
    name: str
    kind: str
    order: str
    at: str
    output_text: str
    expires: int
    marks: Mapping[str, Any] = field(default_factory=dict)
    then: NextStart | None = None


@dataclass(frozen=True)
class NewStep:
    """A step item written whole (a sleep, a wait, a callback, a step ended at once),
    refused when the step exists."""

    run_id: str
    step_id: str
    values: Mapping[str, Any]


@dataclass(frozen=True)
class StepChange:
    """A step's item changes: `sets` set, `remove` removed, if `when` holds: a condition
    on the step as text, naming attributes `#name` and values `:key` (`when_values`)."""

    run_id: str
    step_id: str
    sets: Mapping[str, Any]
    when: str
    when_values: Mapping[str, Any] = field(default_factory=dict)
    remove: tuple[str, ...] = ()


# --- other items of a run -------------------------------------------------------------------


@dataclass(frozen=True)
class NewEvent:
    """One event item of the run (`EVT#<event_id>`; None fields are left out)."""

    run_id: str
    attempt: int
    type: str
    at: str
    expires: int
    event_id: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NewItem:
    """Any other item, whole (`values` hold its `pk` and `sk`): a callback's or a message
    waiter's index entry, a child run, a message a run took. `only_new`: refused when the
    item exists."""

    values: Mapping[str, Any]
    only_new: bool = True


@dataclass(frozen=True)
class DeleteItem:
    """An item goes (no condition: gone already is the same)."""

    pk: str
    sk: str


@dataclass(frozen=True)
class AskRun:
    """The live run is asked for its next invocation (`invokeSeq` + 1): the outbox sends it.
    `unless_owed`: not when an invocation is owed already that has not begun (no lease,
    `invokeSeq` > `handledSeq`): it begins later and sees what asked (refused then)."""

    run_id: str
    unless_owed: bool = False


StepWrite = StepStart | StepEnd | ValueRecord | NewStep | StepChange
Intent = StepWrite | NewEvent | NewItem | DeleteItem | AskRun


# --- an outcome -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """A new wait of a suspend that sets other machinery going (a parallel step's branch
    invocation, a child run, a waiter `send` finds): its items, made by the outbox once the
    suspend has committed and never before (so a suspend that never commits starts
    nothing), each only if new, in order (the step before what ends it)."""

    items: tuple[NewStep | NewItem, ...]


@dataclass(frozen=True)
class EventSegments:
    """The run's step events up to `through` (an event ID), kept in order as segment items
    for ListRunEvents, written ahead of a commit that records `through` on the run item."""

    items: tuple[NewItem, ...]
    through: str


@dataclass(frozen=True)
class SuspendCommit:
    """An invocation answered `suspended`: the run waits. `ahead`: new steps written before
    the commit, inert until it (sleeps: a retry of the outcome finds them recorded; a wait
    that ended at once); `launches`: what starts once it committed; `again`: a new wait
    ended at once, so the same commit asks for the next invocation."""

    run: Run
    seq: int
    mark: Mapping[str, Any]
    ahead: tuple[NewStep, ...] = ()
    launches: tuple[Launch, ...] = ()
    again: bool = False
    events: EventSegments | None = None


@dataclass(frozen=True)
class EndCommit:
    """An invocation ended the run with `status`, while the run is still as the invocation
    saw it (`run.status`). `notify` False marks a run whose app has no notifications (None:
    unknown, the notify function decides)."""

    run: Run
    seq: int
    mark: Mapping[str, Any]
    status: str
    ended_at: str
    ended_epoch_s: int
    output_text: str | None = None
    output_ref: str | None = None
    error: RunError | None = None
    notify: bool | None = None
    events: EventSegments | None = None


OutcomeCommit = SuspendCommit | EndCommit
