"""The invocation's step calls, with the ends of steps held back (protocol 1.3).

A `run` step's end (`complete`, a `fail` that is final) is not sent on its own: it rides
the invocation's next step call (typically the next step's `start`) or, when none comes, the
invocation's answer (`ops`). So a sequential step costs one call to the engine, not two, and
its result is still recorded before any later step starts: only code between steps, which
makes no side effects, runs before the engine has it. A crash in between loses the held end
and the step runs again on the next invocation: the same as a crash before it was recorded.

When the engine answers a held op with another outcome than it carried (another invocation
recorded the step first), the workflow has already gone on with this invocation's value: the
invocation aborts and the engine replays the run with the recorded one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

from . import payload_cache, protocol
from .errors import AbortInvocation, TransportError
from .protocol import Op, RecordedStep
from .protocol_rules import end_differs
from .trace import TraceContext
from .transport import EngineBusy, StateReader, StepTransport

# At most this many ends are held before they are sent on their own (the engine takes up to
# 25 ops a call, and an answer carries at most 25).
MAX_HELD = 20

logger = logging.getLogger("ezgh_workflows")


class StepCalls:
    """Sends ops through a `StepTransport`; holds step ends back when ``hold`` is true."""

    def __init__(
        self,
        transport: StepTransport,
        *,
        hold: bool,
        run_id: str = "",
        trace: TraceContext | None = None,
        every_round: bool = False,
    ) -> None:
        self._transport = transport
        self.trace = trace  # the invocation's place in the run's trace (its steps' context)
        self._hold = hold
        self._run_id = run_id
        self._held: list[Op] = []
        self._hold_in_round = True
        # A branch invocation's one end is held whatever its round (it ends the invocation).
        self._every_round = every_round

    def round_of(self, pending: int) -> None:
        """A round of `pending` steps begins. Ends are held only in a round of one step: in a
        race or a gather the engine orders the steps by when their ends were recorded, so
        each end is sent when its step ends (replay then picks the same winner)."""
        self._hold_in_round = pending == 1 or self._every_round

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]:
        """Send ``ops`` (after the held ends); one result per op of ``ops``."""
        held, self._held = self._held, []
        try:
            results = await self._transport.send([*held, *ops])
        except EngineBusy:
            # Not recorded, or not known to be: they stay held, and the `throttled` answer
            # carries them (a step whose end is lost runs again; one carried runs once).
            self._held = [*held, *self._held]
            raise
        for op, result in zip(held, results, strict=False):
            check_held_result(op, await self._with_output(result))
        return results[len(held) :]

    async def end(self, op: Op) -> dict[str, Any] | None:
        """A step's end: held (None), or sent now when not holding (its result)."""
        if not (self._hold and self._hold_in_round):
            return (await self.send([op]))[0]
        self._held.append(op)
        if len(self._held) >= MAX_HELD:
            await self.flush()
        return None

    async def flush(self) -> None:
        """Send the held ends now."""
        if self._held:
            await self.send([])

    async def flush_before_answer(self) -> None:
        """Send the held ends now, as the answer may go unread; a call that cannot be
        delivered keeps them for the answer instead. The steps API is another route than
        the answer's connection, on which the engine may still be waiting: dropping them
        with the failed call would lose ends the answer could still record."""
        held = list(self._held)
        try:
            await self.flush()
        except TransportError as exc:
            logger.warning("sending the held step ends failed (%s); the answer carries them", exc)
            self._held = [*held, *self._held]

    async def _with_output(self, result: Any) -> Any:
        """A ``recorded`` result whose output the engine gave as a reference (1.5), with the
        output read: what `check_held_result` compares with the end it carried."""
        step = result.get("step") if isinstance(result, dict) else None
        if not isinstance(step, dict) or not isinstance(step.get("outputRef"), str):
            return result
        full = await self.recorded(result)
        output = full.output if full is not None else None
        plain = {k: v for k, v in step.items() if k != "outputRef"}
        return {**result, "step": {**plain, "output": output}}

    async def recorded(self, result: Any) -> RecordedStep | None:
        """The recorded step of a ``recorded`` result (``None`` for ``started``/``ok``), its
        output read when the engine gave it as a reference (1.5)."""
        step = protocol.recorded_in(result)
        if step is None or step.output_ref is None or step.status != "completed":
            return step
        if not isinstance(self._transport, StateReader):
            raise TransportError(f"step {step.id!r} was answered by reference; cannot read it")
        value = await payload_cache.read(self._transport, self._run_id, step.output_ref)
        return replace(step, output=value, output_ref=None)

    def held_bytes(self) -> int:
        """The encoded size of the ends held now (what the answer would carry)."""
        return sum(len(json.dumps(op, ensure_ascii=False).encode()) for op in self._held)

    def take_held(self) -> list[Op]:
        """The held ends, for the invocation's answer; none are held afterwards."""
        held, self._held = self._held, []
        return held

    async def aclose(self) -> None:
        await self._transport.aclose()


def check_held_result(op: Op, result: Any) -> None:
    """Abort when a held end was answered with an outcome it did not carry."""
    if isinstance(result, dict) and end_differs(op, result):
        raise AbortInvocation(
            f"step {op['stepId']!r} was recorded by another invocation with another outcome"
        )
