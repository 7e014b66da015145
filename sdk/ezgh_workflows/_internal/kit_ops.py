"""The test kit's steps API: the step calls of an invocation (docs/protocol.md section 2),
answered in process by `KitTransport` as the engine answers them.

Every op is the engine's decision for it (ezgh_engine.service.step_ops): a step ended already
answers what is recorded; a retryable failure within its budget waits for its retry
(`retrying`, a timer at the backoff the engine uses); a branch invocation may only start and
end its own step; a branch step's end invokes its run again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .errors import ErrorBody, TransportError
from .kit_model import CANCELLED_ERROR, AttemptRecord, KitRun, KitStep
from .kit_state import KitState
from .protocol import Op
from .protocol_rules import may_retry, retry_delay_seconds
from .values import iso_utc, parse_iso

CALLBACK_URL = "https://callbacks.ezgh.invalid/v1/callbacks/"  # never reached: the test posts
BRANCH_OPS = frozenset({"start", "complete", "fail"})


class KitTransport:
    """`StepTransport` for one invocation of ``run`` (of its parallel step ``branch``)."""

    def __init__(self, state: KitState, run: KitRun, branch: str | None) -> None:
        self._state = state
        self._run = run
        self._branch = branch

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]:
        return [self.apply(op) for op in ops]

    async def aclose(self) -> None:
        return None

    def apply(self, op: Op) -> dict[str, Any]:
        """One op's result, the step's record changed as the engine changes it."""
        kind, step_id = op.get("op"), str(op.get("stepId"))
        if self._branch is not None and (kind not in BRANCH_OPS or step_id != self._branch):
            raise TransportError(f"403 forbidden: a branch invocation may not {kind} {step_id}")
        step = self._run.steps.get(step_id)
        if step is not None and step.ended:
            return recorded(step)
        handler = _HANDLERS.get(str(kind))
        if handler is None:
            raise TransportError(f"400 validation_error: unknown op {kind!r}")
        return handler(self, op, step)

    # -- ops -----------------------------------------------------------------------------

    def _start(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        step_id = str(op["stepId"])
        if step is not None and step.status == "running" and op.get("attempt") == step.attempt:
            return started(step_id, step.attempt)  # a resent start: the same attempt
        now = self._state.iso()
        if step is None:
            step = KitStep(step_id, str(op["name"]), "run", "running", 0, started_at=now)
            self._run.steps[step_id] = step
        step.status, step.attempt, step.wake_at = "running", step.attempt + 1, None
        step.attempt_started_at = now
        return started(step_id, step.attempt)

    def _complete(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        step = self._running(op, step)
        step.status, step.ended_at = "completed", self._state.iso()
        step.output, step.has_output, step.error = op.get("output"), True, None
        self._attempt(step, "completed", output=step.output)
        self._branch_ended(step)
        return ok(step.id)

    def _fail(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        step = self._running(op, step)
        error: ErrorBody = dict(op.get("error") or {})
        attempt, retries = op.get("attempt"), op.get("retries")
        retryable = op.get("retryable") and isinstance(attempt, int) and isinstance(retries, int)
        if retryable and may_retry(int(attempt or 0), int(retries or 0)):
            return self._retry(step, error, int(attempt or 0))
        step.status, step.ended_at, step.error = "failed", self._state.iso(), error
        self._attempt(step, "failed", error=error)
        self._branch_ended(step)
        return ok(step.id)

    def _retry(self, step: KitStep, error: ErrorBody, attempt: int) -> dict[str, Any]:
        delay = retry_delay_seconds(attempt, self._state.jitter())
        wake = iso_utc(self._state.now + timedelta(seconds=delay))
        step.status, step.error, step.wake_at = "retrying", error, wake
        self._attempt(step, "retrying", error=error)
        self._state.add_timer(self._run.id, step.id, wake)
        return {"stepId": step.id, "result": "retry", "retryAt": wake}

    def _record(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        now = self._state.iso()
        step_id = str(op["stepId"])
        value = KitStep(step_id, str(op["name"]), "value", "completed", 1, now, ended_at=now)
        value.output, value.has_output = op.get("output"), True
        self._run.steps[step_id] = value
        return ok(step_id)

    def _callback(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        if step is not None:
            return recorded(step)
        step_id, now = str(op["stepId"]), self._state.iso()
        made = KitStep(step_id, str(op["name"]), "callback", "waiting", 1, started_at=now)
        made.url = CALLBACK_URL + self._state.new_id()
        timeout = op.get("timeoutSeconds")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            made.wake_at = self._state.later(timeout)
            self._state.add_timer(self._run.id, step_id, made.wake_at)
        self._run.steps[step_id] = made
        return {"stepId": step_id, "result": "ok", "url": made.url}

    def _cancel(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        return self._end_at_once(op, step, "cancelled", dict(CANCELLED_ERROR))

    def _reject(self, op: Op, step: KitStep | None) -> dict[str, Any]:
        return self._end_at_once(op, step, "failed", dict(op.get("error") or {}))

    def _end_at_once(
        self, op: Op, step: KitStep | None, status: str, error: ErrorBody
    ) -> dict[str, Any]:
        """``cancel``/``reject``: a new step is put ended, a pending one ends now."""
        now = self._state.iso()
        if step is None:
            step = KitStep(str(op["stepId"]), str(op["name"]), str(op["kind"]), status, 1, now)
            self._run.steps[step.id] = step
        step.status, step.ended_at, step.error, step.wake_at = status, now, error, None
        self._state.drop_waiter(self._run.id, step.id)
        if step.kind == "invoke" and step.child_run_id:
            self._state.request_cancel(self._state.runs[step.child_run_id])
        return ok(step.id)

    # -- helpers -------------------------------------------------------------------------

    def _running(self, op: Op, step: KitStep | None) -> KitStep:
        if step is None or step.status != "running":
            raise TransportError(f"409 invalid_state: step {op.get('stepId')!r} is not running")
        return step

    def _attempt(
        self, step: KitStep, status: str, *, output: Any = None, error: ErrorBody | None = None
    ) -> None:
        started_at = parse_iso(step.attempt_started_at or step.started_at)
        record = AttemptRecord(
            step.id, step.name, step.attempt, status, started_at, self._state.now, output, error
        )
        self._run.attempts.append(record)

    def _branch_ended(self, step: KitStep) -> None:
        """A branch's step that ended resumes its run."""
        if self._branch is not None:
            self._run.bump()


_HANDLERS = {
    "start": KitTransport._start,
    "complete": KitTransport._complete,
    "fail": KitTransport._fail,
    "record": KitTransport._record,
    "callback": KitTransport._callback,
    "cancel": KitTransport._cancel,
    "reject": KitTransport._reject,
}


def started(step_id: str, attempt: int) -> dict[str, Any]:
    return {"stepId": step_id, "result": "started", "attempt": attempt}


def ok(step_id: str) -> dict[str, Any]:
    return {"stepId": step_id, "result": "ok"}


def recorded(step: KitStep) -> dict[str, Any]:
    return {"stepId": step.id, "result": "recorded", "step": step.protocol_body()}
