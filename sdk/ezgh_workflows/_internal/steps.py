"""The step API a workflow calls: `Steps` (awaitable) and `BlockingSteps` (plain ``def``).

Each call validates its arguments at once (raising `ValueError`), then hands a `StepRequest` to
the invocation's `StepHost`, which assigns the step's ID when the call is awaited, and resolves
it: from the recorded steps, by running it, or by suspending the invocation.
`BlockingSteps` is a facade over `Steps`: it submits the same coroutine to the workflow's loop
and waits for it, so there is one implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from . import clock
from .duration import MAX_SLEEP_SECONDS, Duration, parse_duration
from .errors import NondeterminismError, SuspendInvocation, WorkflowRuleError
from .identity import validate_explicit_id, validate_name
from .values import iso_utc, parse_iso

StepFn = Callable[[], Any]


@dataclass(frozen=True)
class StepRequest:
    """What a step call asks for. ``kind`` is ``run``, ``sleep`` or ``value``."""

    kind: str
    name: str
    explicit_id: str | None = None
    fn: StepFn | None = None
    retries: int | None = None
    wait: dict[str, Any] | None = None
    make_value: Callable[[], Any] | None = None


class StepHost(Protocol):
    """The invocation, as the step API sees it."""

    def check_can_call_step(self) -> None:
        """Raise if no step may be called here (inside a step, or the invocation ended)."""

    async def submit(self, request: StepRequest) -> tuple[str, Any]:
        """Register the step, wait for its outcome, answer ``(step id, value)``."""
        ...

    def violate(self, error: WorkflowRuleError) -> WorkflowRuleError:
        """Remember a rule violation (the run fails with it) and return it to raise."""
        ...


def _seconds_json(seconds: float) -> int | float:
    return int(seconds) if float(seconds).is_integer() else seconds


def _check_retries(retries: object) -> int | None:
    if retries is None:
        return None
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be None or an int >= 0, got {retries!r}")
    return retries


def _check_until(when: object) -> datetime:
    if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("sleep_until needs an aware datetime (one with a timezone)")
    if when - clock.now() > timedelta(seconds=MAX_SLEEP_SECONDS):
        raise ValueError(f"sleep_until({when.isoformat()}) is more than a year away")
    return when


class Steps:
    """Durable steps for an ``async def`` workflow: every method returns an awaitable."""

    def __init__(self, host: StepHost) -> None:
        self._host = host

    def run(
        self, name: str, fn: StepFn, *, id: str | None = None, retries: int | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Run ``fn`` (sync, async, or returning an awaitable) at least once; its JSON result.

        A failure raises `StepError` in the workflow, on the first run and on replay alike.
        """
        if not callable(fn):
            raise TypeError(f"step {name!r}: fn must be callable")
        request = StepRequest(
            "run", validate_name(name), _explicit(id), fn=fn, retries=_check_retries(retries)
        )
        return self._value(self._checked(request))

    def sleep(self, name: str, duration: Duration) -> Coroutine[Any, Any, None]:
        """A durable timer: ``"3d"``, ``"1h30m"``, seconds, or a ``timedelta``; at most a year."""
        seconds = parse_duration(duration)
        request = StepRequest(
            "sleep", validate_name(name), wait={"seconds": _seconds_json(seconds)}
        )
        return self._none(self._checked(request))

    def sleep_until(self, name: str, when: datetime) -> Coroutine[Any, Any, None]:
        """A durable timer until an aware ``datetime`` (at most a year away)."""
        until = iso_utc(_check_until(when))
        request = StepRequest("sleep", validate_name(name), wait={"until": until})
        return self._none(self._checked(request))

    def now(self, name: str) -> Coroutine[Any, Any, datetime]:
        """The current time as an aware UTC ``datetime``, recorded once, the same on replay."""
        request = StepRequest("value", validate_name(name), make_value=_now_text)
        return self._time(self._checked(request))

    def uuid(self, name: str) -> Coroutine[Any, Any, str]:
        """A random UUID string, recorded once, the same on replay."""
        request = StepRequest("value", validate_name(name), make_value=clock.new_uuid)
        return self._text(self._checked(request))

    def _checked(self, request: StepRequest) -> StepRequest:
        self._host.check_can_call_step()
        return request

    async def _value(self, request: StepRequest) -> Any:
        return (await self._host.submit(request))[1]

    async def _none(self, request: StepRequest) -> None:
        await self._host.submit(request)

    async def _time(self, request: StepRequest) -> datetime:
        step_id, value = await self._host.submit(request)
        try:
            return parse_iso(value)
        except (TypeError, ValueError, AttributeError):
            raise self._mismatch(step_id, value, "a time (now)") from None

    async def _text(self, request: StepRequest) -> str:
        step_id, value = await self._host.submit(request)
        if not isinstance(value, str):
            raise self._mismatch(step_id, value, "a UUID string (uuid)")
        return value

    def _mismatch(self, step_id: str, value: Any, wanted: str) -> WorkflowRuleError:
        return self._host.violate(
            NondeterminismError(
                f"step {step_id!r} recorded the value {value!r}, but the workflow now asks for "
                f"{wanted} at this step"
            )
        )


def _explicit(step_id: str | None) -> str | None:
    return None if step_id is None else validate_explicit_id(step_id)


def _now_text() -> str:
    return iso_utc(clock.now())


class BlockingSteps:
    """Durable steps for a plain ``def`` workflow: the same calls as `Steps`, blocking."""

    def __init__(self, steps: Steps, loop: asyncio.AbstractEventLoop) -> None:
        self._steps = steps
        self._loop = loop

    def run(
        self, name: str, fn: StepFn, *, id: str | None = None, retries: int | None = None
    ) -> Any:
        """Run ``fn`` at least once and return its JSON result (see `Steps.run`)."""
        return self._block(self._steps.run(name, fn, id=id, retries=retries))

    def sleep(self, name: str, duration: Duration) -> None:
        """A durable timer (see `Steps.sleep`)."""
        self._block(self._steps.sleep(name, duration))

    def sleep_until(self, name: str, when: datetime) -> None:
        """A durable timer until an aware ``datetime`` (see `Steps.sleep_until`)."""
        self._block(self._steps.sleep_until(name, when))

    def now(self, name: str) -> datetime:
        """The recorded current time, an aware UTC ``datetime``."""
        result: datetime = self._block(self._steps.now(name))
        return result

    def uuid(self, name: str) -> str:
        """A recorded random UUID string."""
        result: str = self._block(self._steps.uuid(name))
        return result

    def _block(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            coroutine.close()
            raise RuntimeError("blocking step calls cannot be made from an event loop thread")
        if self._loop.is_closed():
            coroutine.close()
            raise SuspendInvocation()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
