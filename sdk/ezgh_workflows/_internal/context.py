"""`Context`: what a workflow function receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic

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
    - ``step``: the durable step API. In an ``async def`` workflow it is a `Steps` whose
      calls are awaited; in a plain ``def`` workflow a `BlockingSteps` whose calls block and
      return values. A bare ``Context`` is ``Context[Steps]`` (the async form the docs use);
      annotate a plain ``def`` workflow's argument as ``Context[BlockingSteps]``.
    """

    __slots__ = ("attempt", "input", "run_id", "step")

    def __init__(self, *, input: Any, run_id: str, attempt: int, step: StepsT) -> None:
        self.input = input
        self.run_id = run_id
        self.attempt = attempt
        self.step = step

    def __repr__(self) -> str:
        return f"Context(run_id={self.run_id!r}, attempt={self.attempt})"
