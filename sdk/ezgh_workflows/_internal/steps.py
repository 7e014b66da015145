"""The step API a workflow calls: `Steps` (awaitable) and `BlockingSteps` (plain ``def``).

Each call validates its arguments at once (raising `ValueError`), then hands a `StepRequest` to
the invocation's `StepHost`, which assigns the step's ID when the call is awaited, and resolves
it: from the recorded steps, by running it, or by suspending the invocation.
`BlockingSteps` is a facade over `Steps`: it submits the same coroutine to the workflow's loop
and waits for it, so there is one implementation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, overload

from . import clock
from .duration import MAX_SLEEP_SECONDS, Duration, parse_duration_unbounded
from .errors import (
    ErrorBody,
    NondeterminismError,
    SuspendInvocation,
    WorkflowRuleError,
)
from .identity import patch_step_id, validate_explicit_id, validate_name
from .step_args import (
    MAX_MESSAGE_WAIT_SECONDS,
    MESSAGE_KEY,
    check_app_ref,
    check_json,
    check_timeout,
    check_workflow,
    too_long,
)
from .values import iso_utc, parse_iso

StepFn = Callable[[], Any]
T = TypeVar("T")
# `run`'s overloads take `Callable[..., …]`, not `Callable[[], …]`: mypy types a loop's
# `lambda i=i: …` as taking an argument, and would refuse the docs' idiom.


@dataclass(frozen=True)
class StepRequest:
    """What a step call asks for. ``kind`` is ``run``, ``sleep``, ``value``, ``callback``,
    ``invoke`` or ``message``.

    ``wait`` holds the fields of a wait entry (protocol: suspended.waits). ``wait_for`` names
    an existing step to wait on instead of a new one (a callback's ``wait()``). ``reject`` is
    an error to record the step with at once (a sleep over a year).
    """

    kind: str
    name: str
    explicit_id: str | None = None
    fn: StepFn | None = None
    retries: int | None = None
    wait: dict[str, Any] | None = None
    make_value: Callable[[], Any] | None = None
    timeout_seconds: int | None = None
    wait_for: str | None = None
    reject: ErrorBody | None = None


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

    def history_continues(self) -> bool:
        """Whether the run's record holds steps the workflow has not asked for yet."""
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
    return when


class Callback:
    """A callback step's handle (``create_callback``): its ``url``, and ``wait()`` for the body
    POSTed there (``None`` when the callback timed out)."""

    def __init__(self, steps: Steps, step_id: str, name: str, url: str) -> None:
        self._steps = steps
        self.step_id = step_id
        self.name = name
        self.url = url

    def wait(self) -> Coroutine[Any, Any, Any]:
        request = StepRequest("callback", self.name, wait={}, wait_for=self.step_id)
        return self._steps._value(self._steps._checked(request))

    def __repr__(self) -> str:
        return f"Callback(step_id={self.step_id!r})"


class BlockingCallback:
    """`Callback` for a plain ``def`` workflow: ``wait()`` blocks and returns the body."""

    def __init__(self, inner: Callback, blocking: BlockingSteps) -> None:
        self._inner = inner
        self._blocking = blocking
        self.step_id = inner.step_id
        self.name = inner.name
        self.url = inner.url

    def wait(self) -> Any:
        return self._blocking._block(self._inner.wait())


class Steps:
    """Durable steps for an ``async def`` workflow: every method returns an awaitable."""

    def __init__(self, host: StepHost) -> None:
        self._host = host
        self._patches: dict[str, bool] = {}

    @overload
    def run(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *,
        id: str | None = None,
        retries: int | None = None,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def run(
        self, name: str, fn: Callable[..., T], *, id: str | None = None, retries: int | None = None
    ) -> Coroutine[Any, Any, T]: ...

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
        """A durable timer: ``"3d"``, ``"1h30m"``, seconds, or a ``timedelta``; at most a year
        (a longer one fails the step with ``workflows.sleep_too_long``)."""
        seconds = parse_duration_unbounded(duration)
        reject = too_long(f"sleep {duration!r}") if seconds > MAX_SLEEP_SECONDS else None
        request = StepRequest(
            "sleep", validate_name(name), wait={"seconds": _seconds_json(seconds)}, reject=reject
        )
        return self._none(self._checked(request))

    def sleep_until(self, name: str, when: datetime) -> Coroutine[Any, Any, None]:
        """A durable timer until an aware ``datetime`` (at most a year away)."""
        until = iso_utc(_check_until(when))
        far = when - clock.now() > timedelta(seconds=MAX_SLEEP_SECONDS)
        reject = too_long(f"sleep_until({until})") if far else None
        request = StepRequest("sleep", validate_name(name), wait={"until": until}, reject=reject)
        return self._none(self._checked(request))

    def create_callback(
        self, name: str, *, timeout_seconds: float | None = None
    ) -> Coroutine[Any, Any, Callback]:
        """A step of kind ``callback``: a `Callback` whose ``url`` anyone may POST a JSON body
        to (no API key), and whose ``wait()`` gives that body, or ``None`` after
        ``timeout_seconds`` (1 s to a year; no timeout by default)."""
        timeout = check_timeout(timeout_seconds, 1, MAX_SLEEP_SECONDS, "timeout_seconds")
        request = StepRequest("callback", validate_name(name), timeout_seconds=timeout)
        return self._callback(self._checked(request))

    def invoke(
        self, name: str, *, workflow: str, input: Any = None, app: str | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Run ``workflow`` of this app (or of ``app``, another app of the same project, by
        ID, slug or name) as a child run and wait for its output. A child that failed, was
        cancelled or timed out raises `StepError` here. Another app's workflow starts only
        where the API key this app acts for (the one that last registered, synced or
        announced it) holds ``workflows.runs.start`` on ``<app name>/<workflow>``; else the
        step fails with ``workflows.forbidden``."""
        wait = {"workflow": check_workflow(workflow), "input": check_json(input, "input")}
        if app is not None:
            wait["app"] = check_app_ref(app)
        request = StepRequest("invoke", validate_name(name), wait=wait)
        return self._value(self._checked(request))

    def send_to_queue(
        self, name: str, queues: Any, queue_id: str, messages: list[dict[str, Any]]
    ) -> Coroutine[Any, Any, Any]:
        """Send 1 to 10 messages to a queue as a step, exactly once (see `queue_steps`); the
        recorded ``[{messageId, seq?}]``. ``queues`` is a `QueuesClient`."""
        from .queue_steps import check_messages, send_fn

        return self.run(name, send_fn(queues, queue_id, check_messages(messages)))

    def wait_for_message(
        self, name: str, *, queue_id: str, key: str, timeout_seconds: float
    ) -> Coroutine[Any, Any, Any]:
        """Wait for a message on ``queue_id`` whose correlation value is ``key``; the message
        ``{messageId, body, attributes, sentAt, queueId, ...}``, or ``None`` after
        ``timeout_seconds`` (1 s to 30 days)."""
        if not isinstance(queue_id, str) or not 1 <= len(queue_id) <= 256:
            raise ValueError("queue_id must be a queue ID (a non-empty str)")
        if not isinstance(key, str) or not MESSAGE_KEY.fullmatch(key):
            raise ValueError(f"invalid key {key!r}: must match ^[A-Za-z0-9_.:-]{{1,256}}$")
        timeout = check_timeout(timeout_seconds, 1, MAX_MESSAGE_WAIT_SECONDS, "timeout_seconds")
        wait = {"queueId": queue_id, "key": key, "timeoutSeconds": timeout}
        request = StepRequest("message", validate_name(name), wait=wait)
        return self._value(self._checked(request))

    async def all(self, steps: Iterable[Awaitable[Any]]) -> list[Any]:
        """Await steps together (like ``asyncio.gather``): unrecorded ``run`` steps run in
        parallel, each in an invocation of its own. The first failure raises here."""
        return list(await asyncio.gather(*steps))

    async def race(self, steps: Iterable[Awaitable[Any]]) -> Any:
        """Await steps together and answer the first to end (its value, or its error); on
        replay the winner is the step recorded as ending first. The others keep running."""
        tasks = [asyncio.ensure_future(step) for step in steps]
        if not tasks:
            raise ValueError("race needs at least one step")
        winner: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def first(task: asyncio.Future[Any]) -> None:
            # Done callbacks run in the order the steps' outcomes were handed out, which the
            # driver keeps in recorded end order: the same winner on every replay.
            if not winner.done() and not task.cancelled():
                winner.set_result(task)

        for task in tasks:
            task.add_done_callback(first)
        done: asyncio.Future[Any] = await winner
        for task in tasks:
            if task is not done and task.done() and not task.cancelled():
                task.exception()  # a loser's failure is not the workflow's concern
        return done.result()

    def now(self, name: str) -> Coroutine[Any, Any, datetime]:
        """The current time as an aware UTC ``datetime``, recorded once, the same on replay."""
        request = StepRequest("value", validate_name(name), make_value=_now_text)
        return self._time(self._checked(request))

    def uuid(self, name: str) -> Coroutine[Any, Any, str]:
        """A random UUID string, recorded once, the same on replay."""
        request = StepRequest("value", validate_name(name), make_value=clock.new_uuid)
        return self._text(self._checked(request))

    async def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new code path of patch ``patch_id``: change a workflow
        that has runs in flight with ``if await ctx.step.patched("x"): <new> else: <old>``.

        True for a run that reaches this point for the first time (a new run, or one whose
        record ends before here); False for a run that went past it on the old code (its
        record holds steps the workflow has not asked for yet). The answer is recorded as a
        ``value`` step with the ID ``patched:<patch_id>``, so every replay takes the same
        path; later calls with the same ID in the run answer the same. Once no run on the
        old path remains (``ezgh workflows replay-check``), remove the old path and the call.
        """
        step_id = patch_step_id(patch_id)
        if patch_id in self._patches:
            return self._patches[patch_id]
        host = self._host
        request = StepRequest(
            "value", step_id, step_id, make_value=lambda: not host.history_continues()
        )
        _, value = await self._host.submit(self._checked(request))
        if not isinstance(value, bool):
            raise self._mismatch(step_id, value, "a patch decision (patched)")
        self._patches[patch_id] = value
        return value

    def _checked(self, request: StepRequest) -> StepRequest:
        self._host.check_can_call_step()
        return request

    async def _value(self, request: StepRequest) -> Any:
        return (await self._host.submit(request))[1]

    async def _none(self, request: StepRequest) -> None:
        await self._host.submit(request)

    async def _callback(self, request: StepRequest) -> Callback:
        step_id, url = await self._host.submit(request)
        if not isinstance(url, str):
            raise self._mismatch(step_id, url, "a callback URL")
        return Callback(self, step_id, request.name, url)

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
        self._collecting = threading.local()

    def create_callback(
        self, name: str, *, timeout_seconds: float | None = None
    ) -> BlockingCallback:
        """A callback step (see `Steps.create_callback`); its ``wait()`` blocks."""
        inner = self._block(self._steps.create_callback(name, timeout_seconds=timeout_seconds))
        return BlockingCallback(inner, self)

    def invoke(self, name: str, *, workflow: str, input: Any = None, app: str | None = None) -> Any:
        """Run a child workflow and return its output (see `Steps.invoke`)."""
        return self._block(self._steps.invoke(name, workflow=workflow, input=input, app=app))

    def send_to_queue(
        self, name: str, queues: Any, queue_id: str, messages: list[dict[str, Any]]
    ) -> Any:
        """Send messages to a queue as a step (see `Steps.send_to_queue`)."""
        return self._block(self._steps.send_to_queue(name, queues, queue_id, messages))

    def wait_for_message(
        self, name: str, *, queue_id: str, key: str, timeout_seconds: float
    ) -> Any:
        """Wait for a message (see `Steps.wait_for_message`)."""
        return self._block(
            self._steps.wait_for_message(
                name, queue_id=queue_id, key=key, timeout_seconds=timeout_seconds
            )
        )

    def all(self, calls: Iterable[Callable[[], Any]]) -> list[Any]:
        """Run step calls together and return their results in order, e.g.
        ``ctx.step.all([lambda: ctx.step.run("a", fa), lambda: ctx.step.run("b", fb)])``:
        each callable makes one step call; unrecorded ``run`` steps run in parallel."""
        result: list[Any] = self._block(self._steps.all(self._collect(calls)))
        return result

    def parallel(self, *calls: Callable[[], Any]) -> list[Any]:
        """``all`` with the calls as arguments."""
        return self.all(calls)

    def race(self, calls: Iterable[Callable[[], Any]]) -> Any:
        """Run step calls together and return the first to end (see `Steps.race`)."""
        return self._block(self._steps.race(self._collect(calls)))

    def _collect(self, calls: Iterable[Callable[[], Any]]) -> list[Any]:
        """Call each callable with step calls answering their awaitable instead of blocking."""
        self._collecting.on = True
        try:
            collected = [call() for call in calls]
        finally:
            self._collecting.on = False
        for item in collected:
            if not asyncio.iscoroutine(item):
                raise TypeError("each callable must make exactly one step call and return it")
        return collected

    @overload
    def run(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *,
        id: str | None = None,
        retries: int | None = None,
    ) -> T: ...

    @overload
    def run(
        self, name: str, fn: Callable[..., T], *, id: str | None = None, retries: int | None = None
    ) -> T: ...

    def run(
        self, name: str, fn: StepFn, *, id: str | None = None, retries: int | None = None
    ) -> Any:
        """Run ``fn`` at least once and return its JSON result (see `Steps.run`)."""
        return self._block(self._steps.run(name, fn, id=id, retries=retries))

    def sleep(self, name: str, duration: Duration) -> None:
        """A durable timer (see `Steps.sleep`)."""
        # Returned, not dropped: inside `all`/`race` branches `_block` hands back the awaitable.
        return self._block(self._steps.sleep(name, duration))

    def sleep_until(self, name: str, when: datetime) -> None:
        """A durable timer until an aware ``datetime`` (see `Steps.sleep_until`)."""
        return self._block(self._steps.sleep_until(name, when))

    def now(self, name: str) -> datetime:
        """The recorded current time, an aware UTC ``datetime``."""
        result: datetime = self._block(self._steps.now(name))
        return result

    def uuid(self, name: str) -> str:
        """A recorded random UUID string."""
        result: str = self._block(self._steps.uuid(name))
        return result

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes patch ``patch_id``'s new code path (see `Steps.patched`)."""
        result: bool = self._block(self._steps.patched(patch_id))
        return result

    def _block(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        if getattr(self._collecting, "on", False):
            return coroutine  # inside all()/race(): handed back to be awaited together
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
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        # The driver looks here to find a round's end: is the thread blocked in a step call?
        host = self._steps._host
        blocked: set[Any] = getattr(host, "blocked", set())
        blocked.add(future)
        wake: Callable[[], None] | None = getattr(host, "wake", None)
        if wake is not None:
            wake()  # it now is: the driver looks again
        try:
            return future.result()
        finally:
            blocked.discard(future)
