"""`workflow(name)`: register a function as a workflow."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

WorkflowFn = Callable[[Any], Any]


class Workflow:
    """A workflow: a name and the function that runs it.

    ``is_async`` tells whether the function is an ``async def`` (run on an event loop of its
    own) or a plain ``def`` (run in a dedicated thread with blocking step calls). Calling the
    object calls the function.
    """

    def __init__(self, name: str, fn: WorkflowFn) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"invalid workflow name {name!r}: must match ^[A-Za-z0-9_-]{{1,64}}$")
        if not callable(fn):
            raise TypeError("a workflow must be a function taking a Context")
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, ctx: Any) -> Any:
        return self.fn(ctx)

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"


def workflow(name: str) -> Callable[[WorkflowFn], Workflow]:
    """Decorate an ``async def f(ctx)`` or a plain ``def f(ctx)`` as the workflow ``name``.

    ``name`` must match ``^[A-Za-z0-9_-]{1,64}$`` (`ValueError` otherwise).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"invalid workflow name {name!r}: must match ^[A-Za-z0-9_-]{{1,64}}$")

    def decorate(fn: WorkflowFn) -> Workflow:
        return Workflow(name, fn)

    return decorate
