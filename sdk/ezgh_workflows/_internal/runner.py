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
from .errors import StepError, ValueRuleError
from .protocol import RecordedStep
from .step_context import StepContext, enter_step, idempotency_key, leave_step
from .steps import StepFn, StepRequest
from .transport import StepTransport

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Resolution:
    """The outcome a step call gets: ``value``, or ``error`` when the step failed."""

    value: Any = None
    error: StepError | None = None

    @classmethod
    def from_record(cls, recorded: RecordedStep) -> Resolution:
        if recorded.status == "completed":
            return cls(value=recorded.output)
        body = recorded.error or {
            "code": f"workflows.step_{recorded.status}",
            "name": "StepError",
            "message": f"step {recorded.id!r} is {recorded.status}",
        }
        return cls(error=StepError.from_body(recorded.id, body))


async def record_value(transport: StepTransport, step_id: str, request: StepRequest) -> Resolution:
    """A ``now``/``uuid`` step: record a fresh value, or use the one already recorded."""
    assert request.make_value is not None
    value = request.make_value()
    results = await transport.send([protocol.op_record(step_id, request.name, value)])
    recorded = protocol.recorded_in(results[0])
    return Resolution.from_record(recorded) if recorded else Resolution(value=value)


async def run_step(
    transport: StepTransport, run_id: str, step_id: str, request: StepRequest
) -> Resolution:
    """A ``run`` step: op start, run the function, op complete or fail."""
    assert request.fn is not None
    results = await transport.send([protocol.op_start(step_id, request.name)])
    recorded = protocol.recorded_in(results[0])
    if recorded is not None:
        return Resolution.from_record(recorded)
    attempt = int(results[0].get("attempt") or 1)
    context = StepContext(step_id, attempt, idempotency_key(run_id, step_id))
    outcome = await _call(request.fn, context)
    if outcome.error is not None:
        op = protocol.op_fail(step_id, outcome.error.to_body())
    else:
        op = protocol.op_complete(step_id, outcome.value)
    recorded = protocol.recorded_in((await transport.send([op]))[0])
    return Resolution.from_record(recorded) if recorded else outcome


async def _call(fn: StepFn, context: StepContext) -> Resolution:
    token = enter_step(context)
    try:
        raw = await call_step_fn(fn)
    except Exception as exc:
        return Resolution(error=_user_error(context.step_id, exc))
    finally:
        leave_step(token)
    try:
        return Resolution(value=values.roundtrip(raw))
    except ValueRuleError as exc:
        return Resolution(error=StepError.from_body(context.step_id, exc.to_body()))


def _user_error(step_id: str, exc: Exception) -> StepError:
    return StepError(step_id=step_id, code="user", error_name=type(exc).__name__, message=str(exc))


async def call_step_fn(fn: StepFn) -> Any:
    """Call ``fn``: an ``async def`` on this loop, a plain function in a worker thread (so it
    may block); an awaitable it returns is awaited here. Context variables follow the call."""
    result = fn() if inspect.iscoroutinefunction(fn) else await asyncio.to_thread(fn)
    if inspect.isawaitable(result):
        result = await result
    return result
