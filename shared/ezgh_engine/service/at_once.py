"""Calls that wait on the network, made at once on threads of their own.

One invoker environment answers a group of messages (an asynchronous event holding several,
or an SQS batch) with a thread per message: each spends its time waiting on a push app, so
they overlap, and one environment does the work of as many. Each thread runs in a copy of
the caller's context (`contextvars`: what the caller's logging or tracing set up is seen
there too). A call's exception is its own answer: it never stops or fails the others.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_all(calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
    """Run every one of `calls` at once and wait for them all; answer each one's result,
    or the exception it raised, in order. A lone call runs on the caller's thread."""
    if len(calls) <= 1:
        return [_answer(call) for call in calls]
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="at-once") as pool:
        futures = [pool.submit(contextvars.copy_context().run, _answer, c) for c in calls]
        return [f.result() for f in futures]


def _answer(call: Callable[[], T]) -> T | Exception:
    try:
        return call()
    except Exception as exc:
        return exc
