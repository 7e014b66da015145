"""The SDK's error tree. Imports nothing outside the standard library.

- `StepError` is what a workflow sees when a step failed; user code may catch it.
- `WorkflowRuleError` subclasses are violations of the SDK's rules. They are `BaseException`s so
  that a user's `except Exception` cannot swallow them, and the driver remembers the first one,
  so the run fails with it even if user code catches it anyway.
- `InvocationSignal` subclasses end an invocation early (suspension, abort). Also
  `BaseException`s, as in the AWS durable execution SDK.
- `ValueRuleError` subclasses report a value that is not JSON or is too large; the driver turns
  them into a failed step or a failed run.
"""

from __future__ import annotations

from typing import Any

from .protocol_rules import MAX_ERROR_FIELD_BYTES, MAX_ERROR_MESSAGE_BYTES, clip

ErrorBody = dict[str, str]


def error_body(code: str, name: str, message: str) -> ErrorBody:
    """The wire shape of an error: ``{code, name, message}``, each cut to what the engine
    keeps (``protocol_rules``), so a long exception message never fails its step's call."""
    return {
        "code": clip(code, MAX_ERROR_FIELD_BYTES),
        "name": clip(name, MAX_ERROR_FIELD_BYTES),
        "message": clip(message, MAX_ERROR_MESSAGE_BYTES),
    }


class StepError(Exception):
    """A step failed. Raised by the step call in the workflow, first run and replay alike.

    Attributes: ``code`` (``user`` for an exception the step's function raised, or a
    ``workflows.*`` code), ``error_name`` (the original exception class name), ``message`` and
    ``step_id``.
    """

    def __init__(self, *, step_id: str, code: str, error_name: str, message: str) -> None:
        super().__init__(f"step {step_id} failed: {error_name}: {message}")
        self.step_id = step_id
        self.code = code
        self.error_name = error_name
        self.message = message

    @classmethod
    def from_body(cls, step_id: str, body: Any) -> StepError:
        """Build from a recorded ``{code, name, message}`` (tolerating missing fields)."""
        body = body if isinstance(body, dict) else {}
        return cls(
            step_id=step_id,
            code=str(body.get("code") or "user"),
            error_name=str(body.get("name") or "Error"),
            message=str(body.get("message") or ""),
        )

    def to_body(self) -> ErrorBody:
        return error_body(self.code, self.error_name, self.message)


class NonRetryableError(Exception):
    """Raise it (or a subclass) from a step's function to fail the step at once, whatever its
    ``retries``. The step's error names the class you raised."""


class RunCancelledError(Exception):
    """The run was cancelled (CancelRun). Raised at the next step that isn't recorded, and by
    pending waits (sleeps, callbacks, child runs, messages, parallel steps).

    An ``Exception``, so ``except``/``finally`` cleanup code sees it and may still run steps;
    the run ends ``cancelled`` however the workflow ends once it was raised.
    """

    code = "workflows.cancelled"

    def __init__(self, message: str = "the run was cancelled") -> None:
        super().__init__(message)
        self.message = message

    def to_body(self) -> ErrorBody:
        return error_body(self.code, type(self).__name__, self.message)


class WorkflowRuleError(BaseException):
    """The workflow broke a rule the SDK enforces; the run fails with ``code``."""

    code = "workflows.rule"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def error_name(self) -> str:
        return type(self).__name__

    def to_body(self) -> ErrorBody:
        return error_body(self.code, self.error_name, self.message)


class DuplicateStepNameError(WorkflowRuleError):
    code = "workflows.duplicate_step_name"


class NondeterminismError(WorkflowRuleError):
    code = "workflows.nondeterminism"


class StepInStepError(WorkflowRuleError):
    code = "workflows.step_in_step"


class UnknownWorkflowError(WorkflowRuleError):
    code = "workflows.unknown_workflow"


class ValueRuleError(Exception):
    """A value is not an allowed JSON value, or is too large. Never retried."""

    code = "workflows.invalid_value"

    def to_body(self) -> ErrorBody:
        return error_body(self.code, type(self).__name__, str(self))


class InvalidValueError(ValueRuleError):
    code = "workflows.invalid_value"


class OutputTooLargeError(ValueRuleError):
    code = "workflows.output_too_large"


class InvocationSignal(BaseException):
    """Ends the current invocation early; workflow code must let it propagate."""


class SuspendInvocation(InvocationSignal):
    """The invocation ends ``suspended``: the run waits (a sleep, later callbacks and more)."""


class AbortInvocation(InvocationSignal):
    """The engine refused a step call as stale: the invocation ends ``aborted``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransportError(Exception):
    """A step call could not be delivered (after retries) or was refused as invalid."""
