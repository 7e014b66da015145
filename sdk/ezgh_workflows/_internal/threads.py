"""Running an invocation on an event loop of its own, in a dedicated thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_loop_thread(
    make: Callable[[], Coroutine[Any, Any, T]], name: str = "ezgh-invocation"
) -> Future[T]:
    """Run ``make()`` with ``asyncio.run`` in a new thread; its result as a future.

    The thread ends right after the loop is closed (its tasks cancelled, its default executor
    shut down), so nothing outlives the invocation.
    """
    result: Future[T] = Future()

    def target() -> None:
        try:
            result.set_result(asyncio.run(make()))
        except BaseException as exc:
            result.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return result
