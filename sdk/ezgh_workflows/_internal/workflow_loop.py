"""The event loop workflow code runs on: it runs only when the driver pumps it.

As Temporal's workflow instance does, the driver owns a loop of its own for the workflow
(``async def`` workflows, and the step calls a plain ``def`` workflow submits from its thread)
and runs its ready callbacks until none remain (`WorkflowLoop.run_until_idle`). So a round of
step calls is exactly the calls the workflow issues before it blocks on them, however many
times its code yields to the loop, and no workflow code runs while the round's step bodies run
(they run on the driver's loop). Timers and callbacks from other threads (``asyncio.sleep`` or
``asyncio.to_thread`` in workflow code) become ready when they fire, and call ``notify`` so
the driver looks again.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple, Unpack

logger = logging.getLogger("ezgh_workflows")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class WorkflowLoop(asyncio.AbstractEventLoop):
    """An event loop without I/O, run from the driver's loop (``outer``) by the driver."""

    def __init__(self, outer: asyncio.AbstractEventLoop, notify: Callable[[], None]) -> None:
        self._outer = outer
        self._notify = notify  # thread-safe: wakes the driver
        self._ready: deque[asyncio.Handle] = deque()
        self._timers: dict[asyncio.TimerHandle, asyncio.TimerHandle] = {}
        self._running = False
        self._closed = False

    # -- driving (the driver's side) -------------------------------------------------

    def run_until_idle(self) -> None:
        """Run ready callbacks, and those they make ready, until none is ready."""
        outer = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        self._running = True
        try:
            while self._ready:
                handle = self._ready.popleft()
                if not handle.cancelled():
                    handle._run()
        finally:
            self._running = False
            asyncio.events._set_running_loop(outer)

    def cancel_all(self) -> None:
        """Cancel the tasks still pending and let them end (as ``asyncio.run`` does)."""
        for task in asyncio.all_tasks(self):
            task.cancel()
        self.run_until_idle()

    # -- scheduling ------------------------------------------------------------------

    def call_soon(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        self._check_closed()
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = self.call_soon(callback, *args, context=context)  # deque.append is atomic
        self._notify()
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_at(self.time() + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        self._check_closed()
        handle = asyncio.TimerHandle(when, callback, args, self, context)
        handle._scheduled = True  # type: ignore[attr-defined]  # cancel() then tells us
        self._timers[handle] = self._outer.call_at(when, self._fire, handle)
        return handle

    def _fire(self, handle: asyncio.TimerHandle) -> None:
        self._timers.pop(handle, None)
        if not self._closed and not handle.cancelled():
            self._ready.append(handle)
            self._notify()

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        outer = self._timers.pop(handle, None)
        if outer is not None:
            outer.cancel()

    def time(self) -> float:
        return self._outer.time()

    # -- futures and tasks -----------------------------------------------------------

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        self._check_closed()
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """``asyncio.to_thread`` in workflow code: the driver's loop runs it in its executor."""
        outer = self._outer.run_in_executor(executor, func, *args)
        inner: asyncio.Future[T] = self.create_future()
        outer.add_done_callback(lambda done: self._settle_from(inner, done))
        return inner

    def _settle_from(self, inner: asyncio.Future[T], done: asyncio.Future[T]) -> None:
        if self._closed or inner.done():
            return
        if done.cancelled():
            inner.cancel()
        elif done.exception() is not None:
            inner.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            inner.set_result(done.result())
        self._notify()

    # -- the rest of the loop's surface ------------------------------------------------

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.clear()
        for outer in self._timers.values():
            outer.cancel()
        self._timers.clear()

    def get_debug(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        # As asyncio's default handler: log it (a task destroyed pending, an unretrieved error).
        error = context.get("exception")
        exc_info = (type(error), error, error.__traceback__) if error is not None else None
        logger.error(
            "%s", context.get("message", "error in a workflow callback"), exc_info=exc_info
        )

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")
