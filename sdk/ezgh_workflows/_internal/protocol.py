"""Wire shapes of the invocation protocol 1.5 (docs/protocol.md): requests, outcomes, ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ErrorBody
from .protocol_rules import THROTTLED_OUTCOME
from .trace import TraceContext, parse_trace

PROTOCOL_VERSION = "1.5"
# From 1.3 an invocation's answer may carry `ops`: the step ends held since its last call.
HELD_ENDS_SINCE = (1, 3)
SDK_VERSION = "0.3.0"
SDK_NAME = f"ezgh-workflows-python/{SDK_VERSION}"

Json = Any
Op = dict[str, Any]


class ProtocolError(ValueError):
    """A request or an answer does not have the protocol's shape."""


@dataclass(frozen=True)
class RecordedStep:
    """A step the engine recorded, as sent in an invoke request or a ``recorded`` result."""

    id: str
    name: str
    kind: str
    status: str
    attempt: int
    output: Json = None
    error: ErrorBody | None = None
    # Pending retries (`retrying`) and waits with a deadline carry their wake time; a
    # `retrying` step without one is due: the next invocation runs it again.
    wake_at: str | None = None
    ended_at: str | None = None
    # A step run by a branch invocation of its own (parallel steps): never run inline.
    branch: bool = False
    # A callback step's URL.
    url: str | None = None
    # 1.5: an output kept outside the run's items, read with the payload call when the
    # workflow needs it (`output` is then None).
    output_ref: str | None = None

    @property
    def pending_retry(self) -> bool:
        return self.status == "retrying" and self.wake_at is not None


@dataclass(frozen=True)
class RunInfo:
    id: str
    app_id: str
    workflow: str
    input: Json
    attempt: int
    status: str
    # 1.5: an input kept outside the run's item, read with the payload call before the
    # workflow starts (`input` is then None).
    input_ref: str | None = None


@dataclass(frozen=True)
class ApiInfo:
    url: str
    token: str


@dataclass(frozen=True)
class InvokeRequest:
    invocation_id: str
    run: RunInfo
    steps: tuple[RecordedStep, ...]
    api: ApiInfo
    # A branch invocation runs only this step (parallel steps), then answers `branch`.
    branch_step_id: str | None = None
    # The protocol version the engine speaks (the request's `protocol`).
    protocol: str = "1.2"
    # How long the engine waits for this request's answer (`answerWithinSeconds`; None when
    # it did not say, as for a pull worker's task, which has no such limit).
    answer_within_seconds: float | None = None
    # 1.5: the history does not fit the request: `steps` lists the steps not ended (or none)
    # and this cursor opens the rest, page by page (the history call).
    steps_cursor: str | None = None
    # Where the app's own spans join the run's trace (`trace`; None from an older engine).
    trace: TraceContext | None = None
    # A branch invocation whose step the engine started already, as this attempt (its
    # lease take did; `branch.attempt`): no `start`, and its end rides the answer's `ops`.
    branch_attempt: int | None = None

    @property
    def holds_step_ends(self) -> bool:
        """Whether step ends may be held for the next call or the answer (1.3 and later;
        in a branch invocation only when the engine started its step: its answer then
        carries the end, else the step call does, as the end resumes the run)."""
        if self.branch_step_id is not None and self.branch_attempt is None:
            return False
        return version_tuple(self.protocol) >= HELD_ENDS_SINCE


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.3"`` → ``(1, 3)``; an unreadable version counts as ``(0,)``."""
    try:
        return tuple(int(part) for part in version.split("."))
    except (AttributeError, ValueError):
        return (0,)


def _field(body: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(body, dict):
        raise ProtocolError(f"{where} must be an object")
    value = body.get(key)
    if not isinstance(value, kind):
        raise ProtocolError(f"{where}.{key} is missing or has the wrong type")
    return value


def parse_recorded_step(body: Any, where: str = "step") -> RecordedStep:
    error = body.get("error") if isinstance(body, dict) else None
    return RecordedStep(
        id=_field(body, "id", str, where),
        name=_field(body, "name", str, where),
        kind=_field(body, "kind", str, where),
        status=_field(body, "status", str, where),
        attempt=int(body.get("attempt") or 1),
        output=body.get("output"),
        error=error if isinstance(error, dict) else None,
        wake_at=_opt_str(body, "wakeAt"),
        ended_at=_opt_str(body, "endedAt"),
        branch=bool(body.get("branch")) if isinstance(body, dict) else False,
        url=_opt_str(body, "url"),
        output_ref=_opt_str(body, "outputRef"),
    )


def _opt_str(body: Any, key: str) -> str | None:
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def parse_invoke(body: Any) -> InvokeRequest:
    """Parse an ``invoke`` request; `ProtocolError` when its shape is wrong."""
    run = _field(body, "run", dict, "request")
    api = _field(body, "api", dict, "request")
    steps = body.get("steps") or []
    if not isinstance(steps, list):
        raise ProtocolError("request.steps must be a list")
    return InvokeRequest(
        invocation_id=str(body.get("invocationId") or ""),
        run=RunInfo(
            id=_field(run, "id", str, "run"),
            app_id=str(run.get("appId") or ""),
            workflow=_field(run, "workflow", str, "run"),
            input=run.get("input"),
            attempt=int(run.get("attempt") or 1),
            status=str(run.get("status") or "running"),
            input_ref=_opt_str(run, "inputRef"),
        ),
        steps=tuple(parse_recorded_step(s, f"steps[{i}]") for i, s in enumerate(steps)),
        api=ApiInfo(url=_field(api, "url", str, "api"), token=_field(api, "token", str, "api")),
        branch_step_id=_branch(body),
        branch_attempt=_branch_attempt(body),
        protocol=str(body.get("protocol") or "1.2"),
        answer_within_seconds=_opt_positive(body, "answerWithinSeconds"),
        steps_cursor=_opt_str(body, "stepsCursor"),
        trace=parse_trace(body.get("trace")),
    )


def _opt_positive(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def _branch(body: dict[str, Any]) -> str | None:
    branch = body.get("branch")
    if branch is None:
        return None
    return _field(branch, "stepId", str, "branch")


def _branch_attempt(body: dict[str, Any]) -> int | None:
    """`branch.attempt`: the attempt of its step the engine started (None: not started, the
    SDK starts it itself, as before; an unreadable value counts as not started)."""
    branch = body.get("branch")
    attempt = branch.get("attempt") if isinstance(branch, dict) else None
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        return None
    return attempt


def sync_answer(workflow_names: list[str], deployment_id: str | None) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL_VERSION,
        "sdk": SDK_NAME,
        "deploymentId": deployment_id,
        "workflows": [{"name": name} for name in workflow_names],
    }


def _outcome(kind: str, deployment_id: str | None, **fields: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL_VERSION, "deploymentId": deployment_id, "outcome": kind, **fields}


def completed(output: Json, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("completed", deployment_id, output=output)


def failed(error: ErrorBody, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("failed", deployment_id, error=error)


def suspended(waits: list[dict[str, Any]], deployment_id: str | None) -> dict[str, Any]:
    return _outcome("suspended", deployment_id, waits=waits)


def aborted(reason: str, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("aborted", deployment_id, reason=reason)


def throttled(reason: str, retry_after: float | None, deployment_id: str | None) -> dict[str, Any]:
    """The engine stayed busy (protocol_rules.THROTTLED_OUTCOME): deliver again later."""
    return _outcome(THROTTLED_OUTCOME, deployment_id, reason=reason, retryAfter=retry_after)


def branch_ended(step_id: str, deployment_id: str | None) -> dict[str, Any]:
    return _outcome("branch", deployment_id, stepId=step_id)


def cancelled(deployment_id: str | None) -> dict[str, Any]:
    return _outcome("cancelled", deployment_id)


def with_ops(answer: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    """The answer with the step ends held since the last step call (1.3), if any."""
    return {**answer, "ops": ops} if ops else answer


def op_start(step_id: str, name: str, *, attempt: int | None = None) -> Op:
    """Start a run step; ``attempt`` is the attempt the SDK expects to start (1.3: the
    engine then needs no read to answer it)."""
    op: Op = {"op": "start", "stepId": step_id, "name": name, "kind": "run"}
    if attempt is not None:
        op["attempt"] = attempt
    return op


def op_complete(step_id: str, output: Json, *, inline: Any = None) -> Op:
    """End a run step with its output; ``inline`` echoes what its start answered (1.3: the
    start rode the previous step's end, and this end writes the step's whole record)."""
    op: Op = {"op": "complete", "stepId": step_id, "output": output}
    if inline is not None:
        op["inline"] = inline
    return op


def op_fail(
    step_id: str, error: ErrorBody, *, retryable: bool = False, attempt: int = 1, retries: int = 0
) -> Op:
    op: Op = {"op": "fail", "stepId": step_id, "error": error}
    if retryable and retries > 0:
        op.update(retryable=True, attempt=attempt, retries=retries)
    return op


def op_callback(step_id: str, name: str, timeout_seconds: int | None) -> Op:
    return {"op": "callback", "stepId": step_id, "name": name, "timeoutSeconds": timeout_seconds}


def op_fail_wait(step_id: str, name: str, kind: str, error: ErrorBody) -> Op:
    """Record a wait step (e.g. a sleep over a year) as failed at once."""
    return {"op": "reject", "stepId": step_id, "name": name, "kind": kind, "error": error}


def op_record(step_id: str, name: str, output: Json) -> Op:
    return {"op": "record", "stepId": step_id, "name": name, "kind": "value", "output": output}


def parse_history_page(body: Any) -> tuple[list[RecordedStep], str | None]:
    """A history call's answer (1.5): its steps and the cursor of the next page, if any."""
    steps = body.get("steps") if isinstance(body, dict) else None
    if not isinstance(steps, list):
        raise ProtocolError("a history page has no list of steps")
    parsed = [parse_recorded_step(s, f"history.steps[{i}]") for i, s in enumerate(steps)]
    return parsed, _opt_str(body, "nextCursor")


def recorded_in(result: Any) -> RecordedStep | None:
    """The recorded step of a ``recorded`` op result, ``None`` for ``started``/``ok``."""
    if not isinstance(result, dict) or "result" not in result:
        raise ProtocolError("a step call result has no 'result'")
    if result["result"] != "recorded":
        return None  # started, ok, retry
    return parse_recorded_step(result.get("step"), "result.step")
