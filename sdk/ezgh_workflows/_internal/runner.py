"""Resolving one step inline: run a ``run`` step's function, record a ``value`` step.

Each returns a `Resolution` (a value or a `StepError`); the driver applies it to the waiting
step call once the whole round of steps is resolved.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any

from . import protocol, values
from .errors import (
    NonRetryableError,
    RunCancelledError,
    StepError,
    ValueRuleError,
    error_body,
)
from .protocol import RecordedStep
from .protocol_rules import DEFAULT_RETRIES, STEP_ENDED_STATUSES, may_retry
from .step_calls import StepCalls
from .step_context import StepContext, enter_step, idempotency_key, leave_step
from .steps import StepFn, StepRequest

# The retry budget (DEFAULT_RETRIES, MAX_RETRIES, may_retry) and the ended statuses are the
# engine's decisions too: `protocol_rules` holds them once for both sides.


@dataclass(frozen=True)
class Resolution:
    """The outcome a step call gets: ``value``, or ``error`` when the step failed."""

    value: Any = None
    error: StepError | RunCancelledError | None = None
    # The engine will run the step again at this time (status `retrying`): the step call
    # stays pending and the invocation suspends.
    retry_at: str | None = None

    @classmethod
    def from_record(cls, recorded: RecordedStep) -> Resolution:
        if recorded.status == "completed":
            return cls(value=recorded.output)
        if recorded.status == "cancelled":
            message = (recorded.error or {}).get("message") or "the run was cancelled"
            return cls(error=RunCancelledError(message))
        body = recorded.error or {
            "code": f"workflows.step_{recorded.status}",
            "name": "StepError",
            "message": f"step {recorded.id!r} is {recorded.status}",
        }
        return cls(error=StepError.from_body(recorded.id, body))


async def record_value(calls: StepCalls, step_id: str, request: StepRequest) -> Resolution:
    """A ``now``/``uuid`` step: record a fresh value, or use the one already recorded. Sent
    at once, never held: the workflow must not see a value the run may never hold (code
    between steps may log it, or a crash could hand it a different one on the next try)."""
    assert request.make_value is not None
    value = request.make_value()
    result = (await calls.send([protocol.op_record(step_id, request.name, value)]))[0]
    recorded = await calls.recorded(result)
    return Resolution.from_record(recorded) if recorded else Resolution(value=value)


async def create_callback(calls: StepCalls, step_id: str, request: StepRequest) -> Resolution:
    """A ``callback`` step: the engine records it ``waiting`` and answers its URL."""
    op = protocol.op_callback(step_id, request.name, request.timeout_seconds)
    result = (await calls.send([op]))[0]
    recorded = await calls.recorded(result)
    url = recorded.url if recorded is not None else result.get("url")
    return Resolution(value=url)


async def cancel_step(calls: StepCalls, step_id: str, request: StepRequest) -> Resolution:
    """In a cancelling run: record the step ``cancelled`` (or use what ended it first)."""
    op = {"op": "cancel", "stepId": step_id, "name": request.name, "kind": request.kind}
    recorded = await calls.recorded((await calls.send([op]))[0])
    if recorded is not None and recorded.status in STEP_ENDED_STATUSES:
        return Resolution.from_record(recorded)
    return Resolution(error=RunCancelledError())


async def reject_step(calls: StepCalls, step_id: str, request: StepRequest) -> Resolution:
    """Record a step that can't be (a sleep over a year) as failed, with its error."""
    assert request.reject is not None
    op = protocol.op_fail_wait(step_id, request.name, request.kind, request.reject)
    recorded = await calls.recorded((await calls.send([op]))[0])
    if recorded is not None:
        return Resolution.from_record(recorded)
    return Resolution(error=StepError.from_body(step_id, request.reject))


async def run_step(
    calls: StepCalls,
    run_id: str,
    step_id: str,
    request: StepRequest,
    recorded: RecordedStep | None = None,
    started: int | None = None,
) -> Resolution:
    """A ``run`` step: op start (with the attempt it expects to start, from ``recorded``),
    run the function, then its end: held for the next call when final, sent now when the
    engine must say whether it retries. ``started``: the attempt the engine started already
    (a branch invocation's step): no start, and its end, whatever it is, rides the answer."""
    assert request.fn is not None
    inline = None
    if started is None:
        expected = recorded.attempt + 1 if recorded is not None else 1
        results = await calls.send([protocol.op_start(step_id, request.name, attempt=expected)])
        already = await calls.recorded(results[0])
        if already is not None:
            return Resolution.from_record(already)
        attempt = int(results[0].get("attempt") or 1)
        # Started inline (with the previous step's end): its end echoes what the start said.
        inline = results[0].get("inline")
    else:
        attempt = started
    context = StepContext(step_id, attempt, idempotency_key(run_id, step_id), calls.trace)
    outcome, retryable = await _call(request.fn, context)
    if outcome.error is None:
        result = await calls.end(protocol.op_complete(step_id, outcome.value, inline=inline))
    else:
        retries = DEFAULT_RETRIES if request.retries is None else request.retries
        op = protocol.op_fail(
            step_id, outcome.error.to_body(), retryable=retryable, attempt=attempt, retries=retries
        )
        if inline is not None:
            op["inline"] = inline
        # The engine must say whether it retries, unless the invocation ends with this step.
        retried = started is None and bool(op.get("retryable")) and may_retry(attempt, retries)
        result = (await calls.send([op]))[0] if retried else await calls.end(op)
    if result is None:
        return outcome
    already = await calls.recorded(result)
    if already is not None:
        return Resolution.from_record(already)
    if result.get("result") == "retry":
        return Resolution(retry_at=str(result.get("retryAt") or ""))
    return outcome


async def _call(fn: StepFn, context: StepContext) -> tuple[Resolution, bool]:
    """The function's outcome, and whether a failure may be retried."""
    token = enter_step(context)
    try:
        raw = await call_step_fn(fn)
    except ValueRuleError as exc:  # the SDK's own value rules: never retried
        return Resolution(error=StepError.from_body(context.step_id, exc.to_body())), False
    except Exception as exc:
        return Resolution(error=_user_error(context.step_id, exc)), not isinstance(
            exc, NonRetryableError
        )
    finally:
        leave_step(token)
    try:
        return Resolution(value=values.roundtrip(raw)), False
    except ValueRuleError as exc:
        return Resolution(error=StepError.from_body(context.step_id, exc.to_body())), False


def _user_error(step_id: str, exc: Exception) -> StepError:
    """The step's error as it is recorded (its message cut as `error_body` cuts it), so the
    workflow sees the same on its first run and on replay."""
    return StepError.from_body(step_id, error_body("user", type(exc).__name__, str(exc)))


async def call_step_fn(fn: StepFn) -> Any:
    """Call ``fn``: an ``async def`` on this loop, a plain function in a worker thread (so it
    may block); an awaitable it returns is awaited here. Context variables follow the call."""
    result = fn() if inspect.iscoroutinefunction(fn) else await asyncio.to_thread(fn)
    if inspect.isawaitable(result):
        result = await result
    return result
