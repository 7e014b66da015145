"""A step call the driver holds until it resolves, and how a workflow function ended."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .errors import (
    ErrorBody,
    InvocationSignal,
    RunCancelledError,
    StepError,
    WorkflowRuleError,
    error_body,
)
from .protocol import RecordedStep
from .protocol_rules import STEP_ENDED_STATUSES
from .runner import Resolution
from .steps import StepRequest


@dataclass
class PendingStep:
    step_id: str
    request: StepRequest
    recorded: RecordedStep | None
    future: asyncio.Future[Any]
    parallel: bool = False  # left to a branch invocation of its own
    retry_at: str | None = None  # failed in this invocation; the engine retries it then

    @property
    def ended(self) -> bool:
        return self.recorded is not None and self.recorded.status in STEP_ENDED_STATUSES

    @property
    def is_wait(self) -> bool:
        """Not ended, and can only end in a later invocation: a wait, a pending retry, or a
        step another (branch) invocation runs."""
        if self.ended or self.request.reject is not None:
            return False
        if self.request.wait is not None:
            return True
        rec = self.recorded
        return bool(self.parallel or self.retry_at or (rec and (rec.branch or rec.pending_retry)))

    def wait_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"stepId": self.step_id, "name": self.request.name}
        entry = {**entry, "kind": self.request.kind, **(self.request.wait or {})}
        if self.parallel:
            entry["parallel"] = True
        return entry


@dataclass(frozen=True)
class Finished:
    """How the workflow function ended: its return value, or what it raised."""

    value: Any = None
    error: BaseException | None = field(default=None)


FRESH = RecordedStep(id="", name="", kind="", status="", attempt=0)


def apply_resolution(pending: PendingStep, resolution: Resolution) -> None:
    if pending.future.done():
        return
    if resolution.error is not None:
        pending.future.set_exception(resolution.error)
    else:
        pending.future.set_result(resolution.value)


def set_result(future: asyncio.Future[Finished], finished: Finished) -> None:
    if not future.done():
        future.set_result(finished)


def run_error(error: BaseException) -> ErrorBody:
    """The run's error for what the workflow raised."""
    if isinstance(error, StepError | WorkflowRuleError | RunCancelledError):
        return error.to_body()
    if isinstance(error, InvocationSignal):
        return error_body("user", type(error).__name__, "the workflow raised an SDK signal")
    return error_body("user", type(error).__name__, str(error))
