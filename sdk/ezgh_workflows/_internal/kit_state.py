"""The test kit's state: its clock, runs, timers and message waiters, and the writes every
part of the kit's engine shares (a wait ends, a run ends, a cancel is asked for).

Each write is the engine's decision for the same event (ezgh_engine.service.waits, timers,
outcomes), made on plain records instead of DynamoDB items: the behaviour suite
(tests/sdk/test_behaviours.py) runs one set of workflows on both and compares.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from . import clock
from .errors import ErrorBody, error_body
from .kit_model import (
    CANCELLED_ERROR,
    PENDING_STATUSES,
    KitRun,
    KitStep,
)
from .values import iso_utc, parse_iso

DEADLINE_STEP = "$deadline"  # the timer of a run's time limit (the engine's name)
YEAR_LIMIT = timedelta(days=366)  # every run ends by then (a day of grace past a year)
_DERIVED = uuid.UUID("5b0e8a44-5a8f-4e55-9a53-6d9b1c2f7e10")  # the kit's own namespace


@dataclass(order=True)
class Timer:
    """A timer: due at ``due``; it acts only if its step (or run) still holds ``wake_at``."""

    due: datetime
    order: int
    run_id: str = field(compare=False)
    step_id: str = field(compare=False)
    wake_at: str = field(compare=False)
    year_limit: bool = field(default=False, compare=False)  # a run's one-year limit


class KitState:
    """Everything the kit's engine holds, and the writes its parts share."""

    def __init__(self, start: datetime, seed: int | None) -> None:
        self.now = start.astimezone(UTC)
        self.runs: dict[str, KitRun] = {}
        self.timers: list[Timer] = []
        self.waiters: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._order = itertools.count()
        self._random = clock.random_source(seed)

    # -- time and randomness -------------------------------------------------------------

    def iso(self) -> str:
        return iso_utc(self.now)

    def later(self, seconds: float) -> str:
        return iso_utc(self.now + timedelta(seconds=seconds))

    def new_id(self) -> str:
        """A random UUID (version 4), from the seed when one was given."""
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def jitter(self) -> float:
        return self._random.random()

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The SDK reads this clock (``now`` steps, ``sleep_until``) and this randomness
        (``uuid`` steps) while workflow code runs under the kit."""
        saved = (clock.now, clock.new_uuid)
        clock.now, clock.new_uuid = (lambda: self.now), self.new_id
        try:
            yield
        finally:
            clock.now, clock.new_uuid = saved

    # -- timers --------------------------------------------------------------------------

    def add_timer(self, run_id: str, step_id: str, wake_at: str, *, year: bool = False) -> None:
        timer = Timer(parse_iso(wake_at), next(self._order), run_id, step_id, wake_at, year)
        heapq.heappush(self.timers, timer)

    def next_timer(self, *, year_limits: bool) -> Timer | None:
        """The first timer that can still act (one of a run that ended is dropped)."""
        while self.timers and self._stale(self.timers[0]):
            heapq.heappop(self.timers)
        live = [t for t in self.timers if (year_limits or not t.year_limit) and not self._stale(t)]
        return min(live) if live else None

    def _stale(self, timer: Timer) -> bool:
        run = self.runs.get(timer.run_id)
        return run is None or run.ended

    def pop_due(self) -> Timer | None:
        """The next timer due now, taken off the list."""
        if self.timers and self.timers[0].due <= self.now:
            return heapq.heappop(self.timers)
        return None

    def arm_limits(self, run: KitRun) -> None:
        """A live run's time limit (StartRun ``timeoutSeconds``) and its one-year limit."""
        if run.timeout_seconds is not None:
            run.deadline_at = self.later(run.timeout_seconds)
            self.add_timer(run.id, DEADLINE_STEP, run.deadline_at)
        year = iso_utc(parse_iso(run.created_at) + YEAR_LIMIT)
        self.add_timer(run.id, DEADLINE_STEP, year, year=True)

    # -- runs ----------------------------------------------------------------------------

    def child_run_id(self, parent: KitRun, step_id: str) -> str:
        """One child per parent step (per parent attempt after a RetryRun)."""
        parts = [parent.id, step_id] + ([str(parent.attempt)] if parent.attempt > 1 else [])
        return str(uuid.uuid5(_DERIVED, "\x1f".join(parts)))

    def end_wait(
        self,
        run: KitRun,
        step: KitStep,
        *,
        output: Any = None,
        error: ErrorBody | None = None,
        status: str | None = None,
    ) -> None:
        """A pending step ends (a wait, a sleep, a branch): its run is invoked again."""
        step.status = status or ("failed" if error is not None else "completed")
        step.ended_at, step.wake_at = self.iso(), None
        step.output, step.has_output = (output, error is None and step.status == "completed")
        step.error = error
        if step.kind == "message":
            self.drop_waiter(run.id, step.id)
        run.bump()

    def drop_waiter(self, run_id: str, step_id: str) -> None:
        for waiting in self.waiters.values():
            if (run_id, step_id) in waiting:
                waiting.remove((run_id, step_id))

    def request_cancel(self, run: KitRun) -> None:
        """CancelRun: ``cancelling``, invoked again; its running children are cancelled. A run
        the test runs itself (an external child) ends ``cancelled`` at once."""
        if run.ended or run.status == "cancelling":
            return
        if run.external:
            self.end_run(run, "cancelled")
            return
        run.status = "cancelling"
        run.bump()
        for step in run.steps.values():
            if step.kind == "invoke" and step.child_run_id and step.status == "waiting":
                self.request_cancel(self.runs[step.child_run_id])

    def end_run(
        self, run: KitRun, status: str, *, output: Any = None, error: ErrorBody | None = None
    ) -> None:
        """The run ends: its pending steps end ``cancelled`` (their children cancelled, their
        message waits dropped), and a child's end ends its parent's step."""
        run.status, run.ended_at, run.error = status, self.iso(), error
        run.output, run.has_output = output, status == "completed"
        for step in run.steps.values():
            if step.status in PENDING_STATUSES:
                step.status, step.ended_at, step.wake_at = "cancelled", self.iso(), None
                step.error = dict(CANCELLED_ERROR)
                self.drop_waiter(run.id, step.id)
                if step.kind == "invoke" and step.child_run_id:
                    self.request_cancel(self.runs[step.child_run_id])
        if run.parent_run_id and run.parent_step_id:
            self._end_parent_step(run)

    def _end_parent_step(self, child: KitRun) -> None:
        """The child's end, on its parent's ``invoke`` step (waits._end_parent_step)."""
        parent = self.runs.get(child.parent_run_id or "")
        step = parent.steps.get(child.parent_step_id or "") if parent else None
        if parent is None or step is None or step.status != "waiting" or parent.ended:
            return
        if child.status == "completed":
            self.end_wait(parent, step, output=child.output)
        elif child.status == "cancelled" and parent.status == "cancelling":
            self.end_wait(parent, step, error=dict(CANCELLED_ERROR), status="cancelled")
        else:
            self.end_wait(parent, step, error=child_error(child))

    def find(self, run_id: str) -> KitRun:
        run = self.runs.get(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r} in this environment")
        return run


def child_error(child: KitRun) -> ErrorBody:
    """The parent step's error for a child that failed, timed out or was cancelled."""
    inner = child.error or error_body(f"workflows.{child.status}", "ChildRunError", "")
    cancelled = child.status == "cancelled"
    message = f"child run {child.id} ended {child.status}"
    if inner.get("message"):
        message += f": {inner['message']}"
    return error_body(
        "workflows.child_cancelled" if cancelled else inner.get("code", "user"),
        "ChildRunCancelled" if cancelled else inner.get("name", "Error"),
        message,
    )
