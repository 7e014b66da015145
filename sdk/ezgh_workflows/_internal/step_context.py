"""What a step's function can learn about its step: `step_context()`."""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass

from .trace import TraceContext


@dataclass(frozen=True)
class StepContext:
    """The running step: its ID, its attempt (from 1) and an idempotency key.

    ``idempotency_key`` is the same on every attempt of the step (hex SHA-256 of
    ``"<run id>:<step id>"``): pass it to the systems the step calls so a retried attempt does
    not repeat their effect. ``trace``: where this invocation sits in the run's trace, for
    the step's own spans (None when the engine sent none).
    """

    step_id: str
    attempt: int
    idempotency_key: str
    trace: TraceContext | None = None


_CURRENT: ContextVar[StepContext | None] = ContextVar("ezgh_current_step", default=None)


def idempotency_key(run_id: str, step_id: str) -> str:
    return hashlib.sha256(f"{run_id}:{step_id}".encode()).hexdigest()


def current_step() -> StepContext | None:
    """The step whose function is running here, or ``None`` outside steps."""
    return _CURRENT.get()


def step_context() -> StepContext:
    """The step whose function is running; `RuntimeError` outside a step's function."""
    context = _CURRENT.get()
    if context is None:
        raise RuntimeError("step_context() is only available inside a step's function")
    return context


def enter_step(context: StepContext) -> object:
    """Mark the current context as running ``context``'s function; returns a reset token."""
    return _CURRENT.set(context)


def leave_step(token: object) -> None:
    _CURRENT.reset(token)  # type: ignore[arg-type]
