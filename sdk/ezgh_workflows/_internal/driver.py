"""The invocation driver: runs a workflow once, replaying recorded steps (protocol 1.3).

The workflow runs on the driver's event loop (``async def``) or in a thread of its own (plain
``def``, whose blocking step calls are submitted to its loop); that loop is a `WorkflowLoop`,
which runs only when the driver pumps it. Step calls register pending steps and wait. The
driver runs the workflow until it blocks (its loop has no ready callback, and a ``def``
workflow's thread waits in a step call or ended), so a round is exactly the step calls issued
before the workflow blocks on them, with no timer or poll deciding it. It then resolves the
pending steps of the round, in call order, while no workflow code runs: recorded ones from the record,
``value`` steps by a ``record`` op, ``run`` steps by running them inline. A round's outcomes are
handed to the workflow only when the whole round is resolved, so the workflow progresses in the
same rounds on the first run and on replay. When only waits (sleeps, callbacks, child runs,
messages, retries, parallel branches) are pending, the invocation suspends: pending step calls
raise `SuspendInvocation`, a ``BaseException``, so the workflow's ``finally`` blocks run and it
ends. Two or more unrecorded ``run`` steps in one round are parallel: the invocation suspends
and the engine runs each in a branch invocation (``request.branch``) of its own, which replays
up to that step, runs only it, and answers ``branch``. In a ``cancelling`` run the round that
holds the first unrecorded step or pending wait ends those steps with `RunCancelledError`
(recorded ``cancelled``); later steps (cleanup) run as usual.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from typing import Any

from . import clock, payload_cache, protocol, values
from .context import Context
from .errors import (
    AbortInvocation,
    DuplicateStepNameError,
    ErrorBody,
    NondeterminismError,
    StepInStepError,
    SuspendInvocation,
    TransportError,
    ValueRuleError,
    WorkflowRuleError,
)
from .identity import StepIds, is_patch_marker
from .pending import FRESH, Finished, PendingStep, apply_resolution, run_error, set_result
from .protocol import InvokeRequest, RecordedStep
from .runner import (
    Resolution,
    cancel_step,
    create_callback,
    record_value,
    reject_step,
    run_step,
)
from .step_calls import StepCalls
from .step_context import current_step
from .steps import BlockingSteps, StepRequest, Steps
from .transport import EngineBusy, StateReader, StepTransport
from .workflow import Workflow
from .workflow_loop import WorkflowLoop

logger = logging.getLogger("ezgh_workflows")

# How long an ended invocation waits for the workflow to stop (its `finally` blocks) before
# cancelling it: a bound for misbehaving code, never part of finding a round.
DRAIN_SECONDS = 5.0

# Past this fraction of the engine's wait (`answerWithinSeconds`), measured from when the SDK
# got the request, the answer may reach an engine that stopped reading it: the held step ends
# are then sent by a step call first. Half, not all, because the engine's wait began before
# ours did (the request's transit, the app's cold start), and an extra call costs little.
LATE_ANSWER_FRACTION = 0.5
# An answer carries the held step ends only while they are small: past this their own step
# call sends them first, so an answer is its output (at most 1 MiB) and little more, within
# what the engine takes of a pull worker's outcome (2 MiB) and a Lambda's answer (6 MB).
ANSWER_HELD_BYTES = 256 * 1024


class Invocation:
    """One invocation of one workflow. Create it, then ``await execute()`` on a fresh loop."""

    def __init__(
        self,
        workflow: Workflow,
        request: InvokeRequest,
        transport: StepTransport,
        deployment_id: str | None,
    ) -> None:
        self._workflow = workflow
        self._request = request
        self._began = clock.monotonic()
        self._transport = transport
        self._calls = StepCalls(
            transport,
            hold=request.holds_step_ends,
            run_id=request.run.id,
            trace=request.trace,
            every_round=request.branch_attempt is not None,
        )
        self._input = request.run.input
        self._deployment_id = deployment_id
        self._recorded = {step.id: step for step in request.steps}
        self._ids = StepIds()
        self._pending: list[PendingStep] = []
        self._pending_names: set[str] = set()
        self._violation: WorkflowRuleError | None = None
        self._stop: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._cancelling = request.run.status == "cancelling"
        # Delivered once per run: a step recorded `cancelled` means an earlier round did it.
        self._cancel_delivered = any(s.status == "cancelled" for s in request.steps)
        self._branch = request.branch_step_id
        self._branch_done = False
        # Plain def workflows: the step calls (concurrent futures) the thread waits on.
        self.blocked: set[Any] = set()

    # -- the step host (called by Steps) -------------------------------------------------

    def check_can_call_step(self) -> None:
        if self._violation is not None:
            raise copy.copy(self._violation)
        if self._stop is not None:
            raise copy.copy(self._stop)
        inside = current_step()
        if inside is not None:
            raise self.violate(
                StepInStepError(
                    f"a step was called from inside the function of step {inside.step_id!r}; "
                    "a step's function can't call steps"
                )
            )

    async def submit(self, request: StepRequest) -> tuple[str, Any]:
        self.check_can_call_step()
        pending = self._register(request)
        return pending.step_id, await pending.future

    def history_continues(self) -> bool:
        """Whether the run's record holds steps (patch markers aside) the workflow has not
        asked for yet: the run went past this point on other code (`Steps.patched`)."""
        return any(not self._ids.asked(i) and not is_patch_marker(i) for i in self._recorded)

    def violate(self, error: WorkflowRuleError) -> WorkflowRuleError:
        if self._violation is None:
            self._violation = error
            self.wake()
        return error

    def wake(self) -> None:
        """Make the driver look again (thread-safe): a ``def`` workflow's thread now waits in
        a step call, or ended; a timer or another thread made workflow code ready."""
        with suppress(RuntimeError):  # the loop is closed: the invocation already ended
            self._loop.call_soon_threadsafe(self._wake.set)

    def _register(self, request: StepRequest) -> PendingStep:
        step_id = request.wait_for or self._allocate(request)
        recorded = self._recorded.get(step_id)
        if recorded is not None:
            self._check_replay(step_id, recorded, request)
        pending = PendingStep(step_id, request, recorded, self._workflow_loop.create_future())
        self._pending.append(pending)
        if request.explicit_id is None and request.wait_for is None:
            self._pending_names.add(request.name)
        return pending

    def _check_replay(self, step_id: str, recorded: RecordedStep, request: StepRequest) -> None:
        """Fail closed when the code asks a recorded step for another kind or name (a step
        renamed under an explicit ``id=`` would otherwise replay someone else's result)."""
        if recorded.kind != request.kind:
            raise self.violate(
                NondeterminismError(
                    f"step {step_id!r} was recorded with kind {recorded.kind!r}, but the workflow "
                    f"now asks for kind {request.kind!r} at this step"
                )
            )
        if request.wait_for is None and recorded.name and recorded.name != request.name:
            raise self.violate(
                NondeterminismError(
                    f"step {step_id!r} was recorded with name {recorded.name!r}, but the workflow "
                    f"now asks for name {request.name!r} at this step"
                )
            )

    def _allocate(self, request: StepRequest) -> str:
        if request.explicit_id is None and request.name in self._pending_names:
            raise self.violate(
                DuplicateStepNameError(
                    f"two steps named {request.name!r} are pending at the same time; steps "
                    "pending together need distinct names or explicit ids"
                )
            )
        try:
            return self._ids.allocate(request.name, request.explicit_id)
        except DuplicateStepNameError as exc:
            raise self.violate(exc) from None

    # -- driving -------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        """Run the invocation to its outcome (a protocol answer body)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        try:
            await self._read_state()
        except AbortInvocation as exc:
            await self._calls.aclose()
            return protocol.aborted(exc.reason, self._deployment_id)
        except BaseException:
            await self._calls.aclose()
            raise
        # Only the methods workflow code reaches are implemented (no I/O): typeshed marks the
        # rest abstract, asyncio itself does not.
        self._workflow_loop = WorkflowLoop(self._loop, self.wake)  # type: ignore[abstract]
        self._main = self._start_workflow()
        try:
            answer = await self._drive()
            if self._answer_may_go_unread() or self._calls.held_bytes() > ANSWER_HELD_BYTES:
                await self._calls.flush_before_answer()
        except AbortInvocation as exc:
            await self._stop_workflow(exc)
            return protocol.aborted(exc.reason, self._deployment_id)
        except EngineBusy as exc:  # not the app's fault: the engine delivers it again later
            await self._stop_workflow(AbortInvocation("the engine stayed throttled"))
            answer = protocol.throttled(str(exc), exc.retry_after, self._deployment_id)
            return protocol.with_ops(answer, self._held_for_throttled())
        except BaseException:
            await self._stop_workflow(AbortInvocation("the SDK failed"))
            raise
        finally:
            self._workflow_loop.cancel_all()  # tasks the workflow left behind, as asyncio.run
            self._workflow_loop.close()
            await self._calls.aclose()
        return protocol.with_ops(answer, self._calls.take_held())

    def _held_for_throttled(self) -> list[protocol.Op]:
        """The held step ends a `throttled` answer carries: the engine records them, so those
        steps do not run again at the next delivery; none past `ANSWER_HELD_BYTES` (the
        answer stays small: they run again, at least once, as without them)."""
        fits = self._calls.held_bytes() <= ANSWER_HELD_BYTES
        held = self._calls.take_held()
        return held if fits else []

    # -- what the request gave as references (1.5) ----------------------------------------

    def _reader(self) -> StateReader:
        if not isinstance(self._transport, StateReader):
            raise TransportError(
                "the invoke request gives values or history as references (protocol 1.5), "
                "and this step transport cannot read them"
            )
        return self._transport

    async def _read_state(self) -> None:
        """Before the workflow runs: the rest of the history, page by page (a step the
        request or an earlier page listed is as that one says: the engine lists every step
        not ended in the request, or in the first page), and an input given as a reference."""
        request = self._request
        cursor = request.steps_cursor
        while cursor:
            steps, cursor = await self._reader().read_history(cursor)
            for step in steps:
                self._recorded.setdefault(step.id, step)
        if request.steps_cursor:
            cancelled = (s.status == "cancelled" for s in self._recorded.values())
            self._cancel_delivered = any(cancelled)
        if request.run.input_ref:
            self._input = await self._read_payload(request.run.input_ref)

    async def _with_output(self, recorded: RecordedStep) -> RecordedStep:
        """`recorded` with its output read, when the request gave it as a reference: read
        when the workflow reaches the step, so a long history of large values is never all
        in memory at once because of the SDK."""
        if recorded.output_ref is None or recorded.status != "completed":
            return recorded
        value = await self._read_payload(recorded.output_ref)
        return replace(recorded, output=value, output_ref=None)

    async def _read_payload(self, ref: str) -> Any:
        """A value by reference (`payload_cache.read`: once per process and run)."""
        return await payload_cache.read(self._reader(), self._request.run.id, ref)

    def _answer_may_go_unread(self) -> bool:
        """The engine may have stopped waiting for the answer (protocol section 11): a step
        end it carried would be lost, and the step run again, although the engine kept the
        lease so that a step started late in the invocation could record its end."""
        within = self._request.answer_within_seconds
        elapsed = clock.monotonic() - self._began
        return within is not None and elapsed >= within * LATE_ANSWER_FRACTION

    async def _drive(self) -> dict[str, Any]:
        while True:
            await self._settle()
            if self._branch_done:
                return await self._end_branch()
            if self._violation is not None:
                return await self._end_failed(self._violation.to_body())
            if self._main.done():
                return await self._finish(self._main.result())
            batch = self._unresolved()
            if not batch:
                await self._wake.wait()  # waiting on a timer or a thread of its own
            elif not await self._resolve_round(batch):
                return await self._suspend(batch)

    async def _settle(self) -> None:
        """Run the workflow until it blocks: every callback it made ready has run and, for a
        plain ``def`` workflow, its thread waits in a step call (or ended). Waiting for that
        thread is waiting for its signal (`wake`), not a poll."""
        await self._pump_until(self._blocked, timeout=None)

    def _blocked(self) -> bool:
        if self._main.done() or self._violation is not None or self._thread is None:
            return True
        calls = list(self.blocked)
        return bool(calls) and not any(call.done() for call in calls)

    async def _pump_until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Run the workflow's loop until nothing is ready, again after each `wake`, until
        ``done()``; False when ``timeout`` seconds passed first."""
        deadline = None if timeout is None else self._loop.time() + timeout
        while True:
            self._wake.clear()  # before running: a wake from now on is not lost
            self._workflow_loop.run_until_idle()
            if done():
                return True
            left = None if deadline is None else deadline - self._loop.time()
            if left is not None and left <= 0:
                return False
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    def _unresolved(self) -> list[PendingStep]:
        self._pending = [p for p in self._pending if not p.future.done()]
        self._pending_names = {p.request.name for p in self._pending if not p.request.explicit_id}
        return list(self._pending)

    async def _resolve_round(self, batch: list[PendingStep]) -> bool:
        """Resolve every pending step that can be; False when all of them are waits."""
        self._calls.round_of(len(batch))
        cancel_round = self._cancelling and not self._cancel_delivered and self._branch is None
        fresh_runs = [p for p in batch if p.request.kind == "run" and p.recorded is None]
        if len(fresh_runs) >= 2 and not cancel_round and self._branch is None:
            for pending in fresh_runs:  # steps awaited together: one branch invocation each
                pending.parallel = True
        resolved: list[tuple[PendingStep, Resolution]] = []
        for pending in batch:
            try:
                resolution = await self._resolve(pending, cancel_round)
            except WorkflowRuleError as exc:
                self.violate(exc)
            else:
                if resolution is not None:
                    resolved.append((pending, resolution))
            if self._violation is not None or self._branch_done:
                return True
        # Hand outcomes out in the order the steps ended (recorded ones first, by their end
        # time): a race then picks the same winner on every replay.
        resolved.sort(key=lambda item: (item[0].recorded or FRESH).ended_at or "~")
        for pending, resolution in resolved:
            self._pending_names.discard(pending.request.name)
            apply_resolution(pending, resolution)
        return bool(resolved)

    async def _resolve(self, pending: PendingStep, cancel_round: bool) -> Resolution | None:
        """The step's outcome now, or None when it stays pending (a wait)."""
        recorded, request = pending.recorded, pending.request
        if request.kind == "callback" and request.wait_for is None and recorded and recorded.url:
            return Resolution(value=recorded.url)  # creating it answers its URL, whatever since
        if pending.ended:
            assert recorded is not None
            return Resolution.from_record(await self._with_output(recorded))
        if self._branch is not None:  # a branch invocation runs its one step, nothing else
            if pending.step_id != self._branch:
                return None
            self._branch_done = True
            return await self._run(pending)
        if cancel_round:  # this round delivers the cancellation, to all its steps
            self._cancel_delivered = True
            return await cancel_step(self._calls, pending.step_id, request)
        if request.reject is not None:
            return await reject_step(self._calls, pending.step_id, request)
        if pending.is_wait:
            return None
        if request.kind == "value":
            return await record_value(self._calls, pending.step_id, request)
        if request.kind == "callback":
            return await create_callback(self._calls, pending.step_id, request)
        return await self._run(pending)

    async def _run(self, pending: PendingStep) -> Resolution | None:
        run_id = self._request.run.id
        # A branch invocation's step the engine started (`branch.attempt`): no `start`.
        started = self._request.branch_attempt if pending.step_id == self._branch else None
        resolution = await run_step(
            self._calls, run_id, pending.step_id, pending.request, pending.recorded, started
        )
        if resolution.retry_at is not None:
            pending.retry_at = resolution.retry_at or "pending"
            return None
        return resolution

    # -- ending --------------------------------------------------------------------------

    async def _suspend(self, batch: list[PendingStep]) -> dict[str, Any]:
        if self._branch is not None:
            return await self._end_branch()
        waits = [pending.wait_entry() for pending in batch if pending.is_wait]
        await self._stop_workflow(SuspendInvocation())
        return protocol.suspended(waits, self._deployment_id)

    async def _end_branch(self) -> dict[str, Any]:
        """A branch invocation ends once its step ran (or the workflow never reached it)."""
        await self._stop_workflow(SuspendInvocation())
        assert self._branch is not None
        return protocol.branch_ended(self._branch, self._deployment_id)

    async def _end_failed(self, error: ErrorBody) -> dict[str, Any]:
        if self._branch is not None:
            return await self._end_branch()
        await self._stop_workflow(self._violation or SuspendInvocation())
        if self._cancelling:  # however it ends once cancelling, the run ends cancelled
            return protocol.cancelled(self._deployment_id)
        return protocol.failed(error, self._deployment_id)

    async def _finish(self, finished: Finished) -> dict[str, Any]:
        if self._branch is not None:
            return await self._end_branch()
        if self._cancelling:
            await self._stop_workflow(SuspendInvocation())
            return protocol.cancelled(self._deployment_id)
        if finished.error is not None:
            return await self._end_failed(run_error(finished.error))
        try:
            output = values.roundtrip(finished.value)
        except ValueRuleError as exc:
            return await self._end_failed(exc.to_body())
        await self._stop_workflow(SuspendInvocation())
        return protocol.completed(output, self._deployment_id)

    async def _stop_workflow(self, signal: BaseException) -> None:
        """Make every pending and later step call raise ``signal``; wait for the workflow."""
        if self._stop is None:
            self._stop = signal
        for pending in self._pending:
            if not pending.future.done():
                pending.future.set_exception(copy.copy(self._stop))
                pending.future.exception()  # retrieved: the waiting call re-raises it
        self._pending.clear()
        await self._drain()

    async def _drain(self) -> None:
        main = self._main
        stopped = await self._pump_until(main.done, DRAIN_SECONDS)
        if not stopped and isinstance(main, asyncio.Task):
            main.cancel()
            await self._pump_until(main.done, DRAIN_SECONDS)
        if not main.done():
            logger.warning("workflow %r did not stop after the invocation ended", self._workflow)
        if self._thread is not None:
            self._thread.join(timeout=DRAIN_SECONDS)

    # -- starting ------------------------------------------------------------------------

    def _start_workflow(self) -> asyncio.Future[Finished]:
        run = self._request.run
        steps = Steps(self)
        if self._workflow.is_async:
            ctx: Context[Any] = Context(
                input=self._input,
                run_id=run.id,
                attempt=run.attempt,
                step=steps,
                trace=self._request.trace,
            )
            coro = self._run_async(ctx)
            return self._workflow_loop.create_task(coro, name=f"ezgh:{run.workflow}")
        blocking = BlockingSteps(steps, self._workflow_loop)
        ctx = Context(
            input=self._input,
            run_id=run.id,
            attempt=run.attempt,
            step=blocking,
            trace=self._request.trace,
        )
        future: asyncio.Future[Finished] = self._loop.create_future()
        self._thread = threading.Thread(
            target=self._run_blocking, args=(ctx, future), name=f"ezgh:{run.workflow}", daemon=True
        )
        self._thread.start()
        return future

    async def _run_async(self, ctx: Context[Any]) -> Finished:
        try:
            return Finished(value=await self._workflow.fn(ctx))
        except BaseException as exc:
            return Finished(error=exc)

    def _run_blocking(self, ctx: Context[Any], future: asyncio.Future[Finished]) -> None:
        try:
            finished = Finished(value=self._workflow.fn(ctx))
        except BaseException as exc:
            finished = Finished(error=exc)
        with suppress(RuntimeError):  # the loop is closed: the invocation already ended
            self._loop.call_soon_threadsafe(self._ended, future, finished)

    def _ended(self, future: asyncio.Future[Finished], finished: Finished) -> None:
        set_result(future, finished)
        self._wake.set()
