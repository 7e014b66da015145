"""The test kit's records (`ezgh_workflows.testing`): a run and its steps as the engine keeps
them, the views an invoke request and GetRun show of them, and the snapshots a test reads.

The kit's engine (`kit_engine`) changes these records as the engine changes its items: only
what the protocol and the API show is kept (no leases, epochs or events: one invocation runs
at a time, so none is ever stale).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .errors import ErrorBody, error_body
from .protocol_rules import RUN_ENDED_STATUSES, STEP_ENDED_STATUSES
from .values import parse_iso

# The engine's own errors, worded as it words them (ezgh_engine.core.models, service.timers).
CANCELLED_ERROR = error_body("workflows.cancelled", "RunCancelledError", "the run was cancelled")
TIMED_OUT_ERROR = error_body(
    "workflows.timed_out", "RunTimedOut", "the run went past its time limit"
)
YEAR_LIMIT_ERROR = error_body(
    "workflows.timed_out", "RunTimedOut", "the run went past its one-year limit (366 days)"
)
UNKNOWN_WORKFLOW = "workflows.unknown_workflow"
PENDING_STATUSES = frozenset({"running", "retrying", "sleeping", "waiting"})


@dataclass
class KitStep:
    """A recorded step (the engine's step item)."""

    id: str
    name: str
    kind: str
    status: str
    attempt: int
    started_at: str
    ended_at: str | None = None
    output: Any = None
    has_output: bool = False
    error: ErrorBody | None = None
    wake_at: str | None = None
    branch: bool = False  # a parallel step, run by a branch invocation of its own
    url: str | None = None  # a callback step's
    child_run_id: str | None = None  # an invoke step's
    attempt_started_at: str | None = None  # when its current attempt started

    @property
    def ended(self) -> bool:
        return self.status in STEP_ENDED_STATUSES

    def to_api(self) -> dict[str, Any]:
        """The step as GetRun shows it."""
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "attempt": self.attempt,
            "startedAt": self.started_at,
        }
        if self.ended_at:
            body["endedAt"] = self.ended_at
        if self.has_output:
            body["output"] = self.output
        if self.error is not None:
            body["error"] = dict(self.error)
        if self.wake_at:
            body["wakeAt"] = self.wake_at
        if self.child_run_id:
            body["childRunId"] = self.child_run_id
        return body

    def protocol_body(self) -> dict[str, Any]:
        """The step as an invoke request shows it (docs/protocol.md section 1.2)."""
        body = self.to_api()
        if self.url:
            body["url"] = self.url
        if self.branch:
            body["branch"] = True
        return body


@dataclass
class AttemptRecord:
    """One attempt of a ``run`` step: how it ended (``completed``, ``failed``, or
    ``retrying``: failed, and the step runs again) and when."""

    step_id: str
    name: str
    attempt: int
    status: str
    started_at: datetime
    ended_at: datetime
    output: Any = None
    error: ErrorBody | None = None


@dataclass
class KitRun:
    """A run (the engine's run item), its steps in the order they started."""

    id: str
    workflow: str
    input: Any
    status: str
    created_at: str
    attempt: int = 1
    output: Any = None
    has_output: bool = False
    error: ErrorBody | None = None
    ended_at: str | None = None
    run_key: str | None = None
    parent_run_id: str | None = None
    parent_step_id: str | None = None
    timeout_seconds: int | None = None
    deadline_at: str | None = None
    # Run by the test, not the kit: its workflow is not registered (a child's, say).
    external: bool = False
    steps: dict[str, KitStep] = field(default_factory=dict)
    # Reasons to invoke it, and the last one an invocation handled (the engine's
    # invokeSeq/handledSeq): it is owed an invocation while the first is ahead.
    invoke_seq: int = 1
    handled_seq: int = 0
    invocations: int = 0
    attempts: list[AttemptRecord] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.status in RUN_ENDED_STATUSES

    @property
    def owed(self) -> bool:
        return not self.ended and not self.external and self.invoke_seq > self.handled_seq

    def bump(self) -> None:
        """Something the run waits on happened: invoke it again."""
        if not self.ended:
            self.invoke_seq += 1

    def to_api(self) -> dict[str, Any]:
        """The run as GetRun shows it."""
        body: dict[str, Any] = {
            "id": self.id,
            "workflow": self.workflow,
            "status": self.status,
            "input": self.input,
            "attempt": self.attempt,
            "createdAt": self.created_at,
            "startedAt": self.created_at,
            "steps": [step.to_api() for step in self.steps.values()],
        }
        optional = {
            "runKey": self.run_key,
            "parentRunId": self.parent_run_id,
            "endedAt": self.ended_at,
            "error": dict(self.error) if self.error else None,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if self.has_output:
            body["output"] = self.output
        return body


@dataclass(frozen=True)
class StepRecord:
    """A step as recorded, as a test sees it: GetRun's fields, times as aware datetimes."""

    id: str
    name: str
    kind: str
    status: str
    attempt: int
    output: Any = None
    error: ErrorBody | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    wake_at: datetime | None = None
    child_run_id: str | None = None
    url: str | None = None

    @classmethod
    def of(cls, step: KitStep) -> StepRecord:
        return cls(
            id=step.id,
            name=step.name,
            kind=step.kind,
            status=step.status,
            attempt=step.attempt,
            output=step.output,
            error=dict(step.error) if step.error else None,
            started_at=_time(step.started_at),
            ended_at=_time(step.ended_at),
            wake_at=_time(step.wake_at),
            child_run_id=step.child_run_id,
            url=step.url,
        )


def _time(text: str | None) -> datetime | None:
    return parse_iso(text) if text else None
