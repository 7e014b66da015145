"""`Context`: what a workflow function receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic

from .trace import TraceContext

if TYPE_CHECKING:
    # PEP 696 defaults (typing.TypeVar has them from 3.13): a bare `Context` is
    # `Context[Steps]`, so `ctx.step` is typed in the docs' `async def f(ctx: Context)`.
    from typing_extensions import TypeVar

    from .steps import Steps

    StepsT = TypeVar("StepsT", default=Steps)
else:
    from typing import TypeVar

    StepsT = TypeVar("StepsT")


class Context(Generic[StepsT]):
    """The run a workflow function is executing.

    - ``input``: the run's JSON input.
    - ``run_id``: the run's ID.
    - ``attempt``: the run's attempt, from 1 (a retried run counts up).
    - ``trace``: where this invocation sits in the run's trace (`TraceContext`; None when
      the engine sent none): spans the workflow starts under it join the run's trace.
    - ``step``: the durable step API. In an ``async def`` workflow it is a `Steps` whose
      calls are awaited; in a plain ``def`` workflow a `BlockingSteps` whose calls block and
      return values. A bare ``Context`` is ``Context[Steps]`` (the async form the docs use);
      annotate a plain ``def`` workflow's argument as ``Context[BlockingSteps]``.
    """

    __slots__ = ("attempt", "input", "run_id", "step", "trace")

    def __init__(
        self,
        *,
        input: Any,
        run_id: str,
        attempt: int,
        step: StepsT,
        trace: TraceContext | None = None,
    ) -> None:
        self.input = input
        self.run_id = run_id
        self.attempt = attempt
        self.step = step
        self.trace = trace

    def __repr__(self) -> str:
        return f"Context(run_id={self.run_id!r}, attempt={self.attempt})"
