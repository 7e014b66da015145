"""A step call's ops (docs/protocol.md section 2), parsed and checked once at the edge into
typed requests. Pure.

`parse_call` checks a step call's body, `parse_op` one op, `parse_answer_ops` the step ends
an invocation's answer carries: each raises `ValidationError` (400) for an op the protocol
does not allow, and `Forbidden` (403) for an op a branch invocation may not make. What an
op then writes is decided by its module under `service.step_ops`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ezgh_engine.core import validation
from ezgh_engine.core.models import RunError
from ezgh_engine.errors import Forbidden, ValidationError

OP_KINDS = ("start", "complete", "fail", "record", "callback", "cancel", "reject")
STEP_KINDS = ("run", "sleep", "value", "callback", "invoke", "message")
# The ops a step may end with: what an invocation's answer may carry (protocol 1.3 `ops`).
END_OPS = ("complete", "fail", "record")
# The ops a branch invocation may make, on its own step only.
BRANCH_OPS = ("start", "complete", "fail")
MAX_OPS = 25
# A callback's timeout: a second to a year.
MAX_CALLBACK_TIMEOUT_SECONDS = 365 * 86_400


@dataclass(frozen=True)
class InlineStart:
    """A `run` step started by a mark on the previous step's item (`next`), not an item of
    its own: what its end needs to write the whole item (protocol 1.3, `inline`)."""

    name: str
    order: str
    started_at: str

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "order": self.order, "startedAt": self.started_at}


@dataclass(frozen=True)
class Start:
    """Start (or start again) a `run` step. `attempt`: the attempt the SDK expects to start
    (1.3; None: the engine counts it)."""

    step_id: str
    name: str
    attempt: int | None = None


@dataclass(frozen=True)
class Complete:
    """End a `run` step with its output (`output_text`, the encoded JSON value). `inline`:
    the echo of a start that rode the previous step's end."""

    step_id: str
    output_text: str
    inline: InlineStart | None = None


@dataclass(frozen=True)
class Fail:
    """End an attempt of a `run` step with an error. A `retryable` fail carries the attempt
    and the retries allowed: the retry budget (`may_retry`) decides whether it runs again."""

    step_id: str
    error: RunError
    retryable: bool = False
    attempt: int | None = None
    retries: int | None = None
    inline: InlineStart | None = None


@dataclass(frozen=True)
class Record:
    """Record a `value` step, completed at once."""

    step_id: str
    name: str
    output_text: str


@dataclass(frozen=True)
class Callback:
    """Create a `callback` step, waiting for its URL to be called (or its timeout)."""

    step_id: str
    name: str
    timeout_seconds: int | None


@dataclass(frozen=True)
class Cancel:
    """A cancelling run ends a step of any kind with the cancellation."""

    step_id: str
    name: str
    kind: str


@dataclass(frozen=True)
class Reject:
    """A step that can't be (a sleep over a year) fails at once."""

    step_id: str
    name: str
    kind: str
    error: RunError


StepOp = Start | Complete | Fail | Record | Callback | Cancel | Reject
EndOp = Complete | Fail | Record


@dataclass(frozen=True)
class StepCall:
    """A step call's body: its ops (raw, as sent) and the app's deployment."""

    ops: list[Any]
    deployment_id: str | None


def parse_call(body: Any) -> StepCall:
    """Check a step call's body (not yet its ops)."""
    if not isinstance(body, dict) or not isinstance(body.get("ops"), list):
        raise ValidationError("body must be an object with an ops list")
    ops = body["ops"]
    if not 1 <= len(ops) <= MAX_OPS:
        raise ValidationError(f"ops must hold 1 to {MAX_OPS} operations")
    deployment = body.get("deploymentId")
    if deployment is not None and not isinstance(deployment, str):
        raise ValidationError("deploymentId must be a string or null")
    return StepCall(ops, deployment)


@dataclass(frozen=True)
class AnswerOps:
    """The step ends an invocation's answer carries (protocol 1.3 `ops`), checked once:
    each op as sent (`wire`: what `end_differs` compares a recorded step with) and typed
    (`requests`), in the same order."""

    wire: tuple[dict[str, Any], ...]
    requests: tuple[EndOp, ...]


def parse_answer_ops(ops: Any, branch_step: str | None = None) -> AnswerOps:
    """An answer's `ops`: a list of at most `MAX_OPS` complete/fail/record ops on distinct
    steps, from a main invocation (`branch_step` None). `ValidationError` otherwise (or
    `Forbidden`, as `parse_op`, for a branch invocation's op on another step)."""
    if not isinstance(ops, list) or len(ops) > MAX_OPS:
        raise ValidationError(f"ops must be a list of at most {MAX_OPS} operations")
    requests = [parse_op(op, branch_step) for op in ops]
    ends = [r for r in requests if isinstance(r, Complete | Fail | Record)]
    if branch_step is not None or len(ends) != len(requests):
        raise ValidationError("an answer's ops may only complete, fail or record steps")
    if len({r.step_id for r in ends}) != len(ends):
        raise ValidationError("an answer's ops must name distinct steps")
    return AnswerOps(tuple(ops), tuple(ends))


def parse_op(op: Any, branch_step: str | None = None) -> StepOp:
    """One op as its typed request. `branch_step`: the step a branch invocation runs (it may
    only start and end that one)."""
    if not isinstance(op, dict):
        raise ValidationError("each op must be an object")
    step_id = validation.check_step_id(op.get("stepId"))
    kind = op.get("op")
    if kind not in OP_KINDS:
        raise ValidationError(f"op must be one of {', '.join(OP_KINDS)}")
    if branch_step is not None and (step_id != branch_step or kind not in BRANCH_OPS):
        raise Forbidden(f"this branch invocation may only run step {branch_step}, not {step_id}")
    if kind == "start":
        return _start(step_id, op, branch_step is None)
    if kind == "complete":
        if "output" not in op:
            raise ValidationError("complete needs an output")
        text = validation.encode_value(op["output"], "output")
        return Complete(step_id, text, _inline(op))
    if kind == "fail":
        return _fail(step_id, op)
    if kind == "record":
        return _record(step_id, op)
    if kind == "callback":
        return _callback(step_id, op)
    return _cancel_or_reject(step_id, op)


def _start(step_id: str, op: dict[str, Any], with_attempt: bool) -> Start:
    name = validation.check_step_name(op.get("name"))
    if op.get("kind", "run") != "run":
        raise ValidationError("start is for steps of kind run")
    attempt = op.get("attempt")
    if not with_attempt or attempt is None:
        return Start(step_id, name)  # a branch's step: its branch epoch decides the count
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise ValidationError("attempt must be an integer >= 1")
    return Start(step_id, name, attempt)


def _fail(step_id: str, op: dict[str, Any]) -> Fail:
    if not isinstance(op.get("error"), dict):
        raise ValidationError("fail needs an error object")
    error = RunError.from_api(op["error"])
    if not op.get("retryable"):
        return Fail(step_id, error, inline=_inline(op))
    attempt, allowed = op.get("attempt"), op.get("retries")
    for value, field in ((attempt, "attempt"), (allowed, "retries")):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValidationError(f"{field} must be an integer >= 0")
    assert isinstance(attempt, int) and isinstance(allowed, int)
    return Fail(step_id, error, True, attempt, allowed, _inline(op))


def _record(step_id: str, op: dict[str, Any]) -> Record:
    name = validation.check_step_name(op.get("name"))
    if op.get("kind") != "value":
        raise ValidationError("record is for steps of kind value")
    if "output" not in op:
        raise ValidationError("record needs an output")
    return Record(step_id, name, validation.encode_value(op["output"], "output"))


def _callback(step_id: str, op: dict[str, Any]) -> Callback:
    name = validation.check_step_name(op.get("name"))
    timeout = op.get("timeoutSeconds")
    if timeout is not None and (
        not isinstance(timeout, int)
        or isinstance(timeout, bool)
        or not 1 <= timeout <= MAX_CALLBACK_TIMEOUT_SECONDS
    ):
        raise ValidationError("timeoutSeconds must be null or 1 to 31536000")
    return Callback(step_id, name, timeout)


def _cancel_or_reject(step_id: str, op: dict[str, Any]) -> Cancel | Reject:
    name = validation.check_step_name(op.get("name"))
    kind = op.get("kind")
    if kind not in STEP_KINDS:
        raise ValidationError(f"kind must be one of {', '.join(STEP_KINDS)}")
    if op["op"] == "cancel":
        return Cancel(step_id, name, kind)
    if not isinstance(op.get("error"), dict):
        raise ValidationError("reject needs an error object")
    return Reject(step_id, name, kind, RunError.from_api(op["error"]))


def _inline(op: dict[str, Any]) -> InlineStart | None:
    """The `inline` a step's start answered, echoed by its end op (protocol 1.3)."""
    echo = op.get("inline")
    if echo is None:
        return None
    if not isinstance(echo, dict):
        raise ValidationError("inline must be the object the step's start answered")
    name = validation.check_step_name(echo.get("name"))
    order, started = echo.get("order"), echo.get("startedAt")
    for value, field in ((order, "order"), (started, "startedAt")):
        if not isinstance(value, str) or not 1 <= len(value) <= 64:
            raise ValidationError(f"inline.{field} must be the string the start answered")
    assert isinstance(order, str) and isinstance(started, str)
    return InlineStart(name, order, started)
