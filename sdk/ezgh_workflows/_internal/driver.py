"""The invocation driver: runs a workflow once, replaying recorded steps (protocol 1.2).

The workflow runs on the driver's event loop (``async def``) or in a thread of its own (plain
``def``, whose blocking step calls are submitted to this loop). Step calls register pending
steps and wait. The driver lets the loop settle, so steps awaited together are seen together,
then resolves the pending steps in one round, in call order: recorded ones from the record,
``value`` steps by a ``record`` op, ``run`` steps by running them inline. A round's outcomes are
handed to the workflow only when the whole round is resolved, so the workflow progresses in the
same rounds on the first run and on replay. When only waits (sleeps) are pending, the
invocation suspends: pending step calls raise `SuspendInvocation`, a ``BaseException``, so the
workflow's ``finally`` blocks run and it ends.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from . import protocol, values
from .context import Context
from .errors import (
    AbortInvocation,
    DuplicateStepNameError,
    ErrorBody,
    InvocationSignal,
    NondeterminismError,
    StepError,
    StepInStepError,
    SuspendInvocation,
    ValueRuleError,
    WorkflowRuleError,
    error_body,
)
from .identity import StepIds
from .protocol import InvokeRequest, RecordedStep
from .runner import TERMINAL_STATUSES, Resolution, record_value, run_step
from .step_context import current_step
from .steps import BlockingSteps, StepRequest, Steps
from .transport import StepTransport
from .workflow import Workflow

logger = logging.getLogger("ezgh_workflows")

SETTLE_STABLE_ROUNDS = 3
SETTLE_MAX_ROUNDS = 1000
DRAIN_SECONDS = 5.0


@dataclass
class PendingStep:
    step_id: str
    request: StepRequest
    recorded: RecordedStep | None
    future: asyncio.Future[Any]

    @property
    def is_wait(self) -> bool:
        """A wait (a sleep) not yet ended: it can only end in a later invocation."""
        return self.request.wait is not None and (
            self.recorded is None or self.recorded.status not in TERMINAL_STATUSES
        )

    def wait_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"stepId": self.step_id, "name": self.request.name}
        return {**entry, "kind": self.request.kind, **(self.request.wait or {})}


@dataclass(frozen=True)
class Finished:
    """How the workflow function ended: its return value, or what it raised."""

    value: Any = None
    error: BaseException | None = field(default=None)


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
        self._transport = transport
        self._deployment_id = deployment_id
        self._recorded = {step.id: step for step in request.steps}
        self._ids = StepIds()
        self._pending: list[PendingStep] = []
        self._pending_names: set[str] = set()
        self._registrations = 0
        self._violation: WorkflowRuleError | None = None
        self._stop: BaseException | None = None
        self._thread: threading.Thread | None = None

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

    def violate(self, error: WorkflowRuleError) -> WorkflowRuleError:
        if self._violation is None:
            self._violation = error
            with suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)
        return error

    def _register(self, request: StepRequest) -> PendingStep:
        step_id = self._allocate(request)
        recorded = self._recorded.get(step_id)
        if recorded is not None and recorded.kind != request.kind:
            raise self.violate(
                NondeterminismError(
                    f"step {step_id!r} was recorded with kind {recorded.kind!r}, but the workflow "
                    f"now asks for kind {request.kind!r} at this step"
                )
            )
        pending = PendingStep(step_id, request, recorded, self._loop.create_future())
        self._pending.append(pending)
        if request.explicit_id is None:
            self._pending_names.add(request.name)
        self._registrations += 1
        self._wake.set()
        return pending

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
        self._main = self._start_workflow()
        try:
            return await self._drive()
        except AbortInvocation as exc:
            await self._stop_workflow(exc)
            return protocol.aborted(exc.reason, self._deployment_id)
        except BaseException:
            await self._stop_workflow(AbortInvocation("the SDK failed"))
            raise
        finally:
            await self._transport.aclose()

    async def _drive(self) -> dict[str, Any]:
        while True:
            await self._settle()
            if self._violation is not None:
                return await self._end_failed(self._violation.to_body())
            if self._main.done():
                return await self._finish(self._main.result())
            batch = self._unresolved()
            if not batch:
                await self._wait_for_activity()
            elif not await self._resolve_round(batch):
                return await self._suspend(batch)

    async def _settle(self) -> None:
        """Let the loop run until no new step call registers for a few rounds."""
        seen, stable = -1, 0
        for _ in range(SETTLE_MAX_ROUNDS):
            await asyncio.sleep(0)
            if self._main.done() or self._violation is not None:
                return
            if self._registrations != seen:
                seen, stable = self._registrations, 0
                continue
            stable += 1
            if stable >= SETTLE_STABLE_ROUNDS:
                return

    def _unresolved(self) -> list[PendingStep]:
        self._pending = [p for p in self._pending if not p.future.done()]
        self._pending_names = {p.request.name for p in self._pending if not p.request.explicit_id}
        return list(self._pending)

    async def _wait_for_activity(self) -> None:
        """Nothing pending, the workflow still going: wait for a step call or its end."""
        self._wake.clear()
        if self._unresolved() or self._violation is not None:
            return
        waiter: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
        waiting: set[asyncio.Future[Any]] = {waiter, self._main}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            with suppress(asyncio.CancelledError):
                await waiter

    async def _resolve_round(self, batch: list[PendingStep]) -> bool:
        """Resolve every pending step that can be; False when all of them are waits."""
        resolved: list[tuple[PendingStep, Resolution]] = []
        for pending in batch:
            if pending.is_wait:
                continue
            try:
                resolved.append((pending, await self._resolve(pending)))
            except WorkflowRuleError as exc:
                self.violate(exc)
            if self._violation is not None:
                return True
        for pending, resolution in resolved:
            self._pending_names.discard(pending.request.name)
            _apply(pending, resolution)
        return bool(resolved)

    async def _resolve(self, pending: PendingStep) -> Resolution:
        recorded = pending.recorded
        if recorded is not None and recorded.status in TERMINAL_STATUSES:
            return Resolution.from_record(recorded)
        if pending.request.kind == "value":
            return await record_value(self._transport, pending.step_id, pending.request)
        run_id = self._request.run.id
        return await run_step(self._transport, run_id, pending.step_id, pending.request)

    # -- ending --------------------------------------------------------------------------

    async def _suspend(self, batch: list[PendingStep]) -> dict[str, Any]:
        waits = [pending.wait_entry() for pending in batch if pending.is_wait]
        await self._stop_workflow(SuspendInvocation())
        return protocol.suspended(waits, self._deployment_id)

    async def _end_failed(self, error: ErrorBody) -> dict[str, Any]:
        await self._stop_workflow(self._violation or SuspendInvocation())
        return protocol.failed(error, self._deployment_id)

    async def _finish(self, finished: Finished) -> dict[str, Any]:
        if finished.error is not None:
            return await self._end_failed(_run_error(finished.error))
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
        if not main.done():
            await asyncio.wait({main}, timeout=DRAIN_SECONDS)
        if not main.done() and isinstance(main, asyncio.Task):
            main.cancel()
            await asyncio.wait({main}, timeout=DRAIN_SECONDS)
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
                input=run.input, run_id=run.id, attempt=run.attempt, step=steps
            )
            return self._loop.create_task(self._run_async(ctx), name=f"ezgh:{run.workflow}")
        blocking = BlockingSteps(steps, self._loop)
        ctx = Context(input=run.input, run_id=run.id, attempt=run.attempt, step=blocking)
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
            self._loop.call_soon_threadsafe(_set_result, future, finished)


def _apply(pending: PendingStep, resolution: Resolution) -> None:
    if pending.future.done():
        return
    if resolution.error is not None:
        pending.future.set_exception(resolution.error)
    else:
        pending.future.set_result(resolution.value)


def _set_result(future: asyncio.Future[Finished], finished: Finished) -> None:
    if not future.done():
        future.set_result(finished)


def _run_error(error: BaseException) -> ErrorBody:
    """The run's error for what the workflow raised."""
    if isinstance(error, StepError | WorkflowRuleError):
        return error.to_body()
    if isinstance(error, InvocationSignal):
        return error_body("user", type(error).__name__, "the workflow raised an SDK signal")
    return error_body("user", type(error).__name__, str(error))
