"""The template every step op follows, and what its planner is given (docs/architecture.md,
"Step ops"). Pure: nothing here reads the clock, randomness or a table.

An op goes check → prepare → plan → write → re-plan on refusal:

- check: `protocol.ops.parse_op` makes the op a typed request (at the edge, once);
- prepare: the op's module reads or stores what its plan needs (a large output's payload,
  the step a cancel ends, a callback's secret): the only I/O before the write;
- plan: `plan(caller, fresh, request, prepared, leased=...)` decides, from its arguments
  alone, the writes (`Plan.item`, the step's own item, and `Plan.others`) and the result
  they answer when they commit;
- write: `step_ops.executor` writes the plan: a batch of plans on the steps' own conditions
  (the fast path), or one plan under the invocation's lease;
- re-plan: when a condition refuses, the executor re-reads the step and the module's
  `replan(plan, step, at)` answers a plan without writes (what is recorded), so it ends
  there; a refused batch is planned again op by op under the lease first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from ezgh_engine import clock, ids
from ezgh_engine.adapters import run_writes
from ezgh_engine.adapters import steps_store as store
from ezgh_engine.adapters.intents import (
    Intent,
    NewEvent,
    NextStart,
    StepEnd,
    StepWrite,
    ValueRecord,
)
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Step
from ezgh_engine.protocol.ops import InlineStart
from ezgh_engine.protocol.results import Recorded, Result, RetryAt, Started


@dataclass(frozen=True)
class Caller:
    """The invocation making the call (its token's claims) and the app's deployment."""

    claims: tokens.InvocationClaims
    deployment_id: str | None = None

    @property
    def run_id(self) -> str:
        return self.claims.run_id

    @property
    def branch_step(self) -> str | None:
        """The step a branch invocation runs (None: the run's main invocation)."""
        return self.claims.step_id

    @property
    def lease(self) -> store.Lease:
        return store.Lease(self.claims.run_id, self.claims.epoch, self.claims.step_id)


@dataclass(frozen=True)
class Fresh:
    """What a plan may not read itself, drawn once per op before it is planned (`draw`): the
    time, a step order and an event ID (time-ordered, so an op's sort before the next op's),
    a random fraction (retry jitter) and the child items' expiry."""

    now: datetime
    order: str
    event_id: str
    fraction: float
    expires: int

    @property
    def at(self) -> str:
        return clock.iso(self.now)

    @classmethod
    def draw(cls) -> Fresh:
        now = clock.now()
        order, event_id = ids.time_ordered_id(), ids.time_ordered_id()
        expires = int(now.timestamp()) + run_writes.CHILD_ITEM_TTL_SECONDS
        return cls(now, order, event_id, ids.random_fraction(), expires)


@dataclass(frozen=True)
class Plan:
    """An op's decision on its step (`step_id`): its writes and the result they answer when
    they commit.

    `item` is the write of the op's own step item (None: nothing to write, `result` is the
    answer); `others` its other writes (a failure's event, a callback's index item). `result`
    None: the step's attempt, read back once written (a start the store counted). `carries`:
    a new step's start right after may ride `item` (its `then`, `ride`); `rides`: this start
    may ride the previous op's `item`. `recorded`: the step read when a plan answers
    `Recorded`.
    `cancel_child`: a child run to cancel once written."""

    step_id: str
    result: Result | None
    item: StepWrite | None = None
    others: tuple[Intent, ...] = ()
    carries: bool = False
    rides: InlineStart | None = None
    recorded: Step | None = field(default=None, compare=False)
    cancel_child: str | None = None

    @property
    def writes(self) -> list[Intent]:
        return [] if self.item is None else [self.item, *self.others]


def answered(result: Result, step: Step | None = None) -> Plan:
    """A plan without writes: `result` is the answer (`step`: the step read, if any)."""
    return Plan(result.step_id, result, recorded=step)


def recorded(step_id: str, step: Step | None) -> Plan:
    """The answer of an op whose step holds something already."""
    return answered(Recorded(step_id), step)


def ride(carrier: Plan, start: Plan, caller: Caller) -> tuple[Plan, Started]:
    """`carrier` (an end) whose item also starts `start`'s step (attempt 1, a `next` mark),
    and the result that start answers."""
    assert start.rides is not None and isinstance(start.result, Started)
    if not isinstance(carrier.item, StepEnd | ValueRecord):
        raise TypeError("a start rides an end or a value record only")
    then = NextStart(
        start.result.step_id,
        start.rides.name,
        start.rides.order,
        start.rides.started_at,
        caller.claims.epoch,
        caller.claims.attempt,
    )
    return replace(carrier, item=replace(carrier.item, then=then)), replace(
        start.result, inline=start.rides
    )


def is_retry(plan: Plan) -> bool:
    return isinstance(plan.result, RetryAt)


class OpModule(Protocol):
    """What each op's module (`step_ops.start`, `end`, `record`, `callback`, `cancel`) has."""

    def prepare(self, caller: Caller, fresh: Fresh, request: Any) -> Any:
        """Read or store what the plan needs (may do I/O); None when nothing."""
        ...

    def plan(
        self, caller: Caller, fresh: Fresh, request: Any, prepared: Any, *, leased: bool
    ) -> Plan:
        """The op's writes and result (pure). `leased`: written alone under the lease."""
        ...

    def replan(self, plan: Plan, step: Step | None, at: str) -> Plan:
        """After `plan`'s write was refused, with the step as read: a plan without writes."""
        ...


def event(caller: Caller, fresh: Fresh, event_type: str, step_id: str, **fields: Any) -> NewEvent:
    """A run event item about a step (`fresh.event_id` sorts it)."""
    return NewEvent(
        caller.run_id,
        caller.claims.attempt,
        event_type,
        fresh.at,
        fresh.expires,
        fresh.event_id,
        {"stepId": step_id, "deploymentId": caller.deployment_id, **fields},
    )


def marks(caller: Caller, fresh: Fresh) -> dict[str, Any]:
    """A completion as its step's own `step.completed` event (no event item)."""
    return store.event_marks(fresh.event_id, caller.claims.attempt, caller.deployment_id)
