"""The test kit's engine (`ezgh_workflows.testing`): runs workflows in process, with the
SDK's own replay driver, against records kept in memory and a clock it skips.

An invocation is what the engine would send a push app: an invoke request built from the
run's records (`KitRun`), parsed by the SDK's parser and run by the SDK's driver
(`Invocation`), whose step calls `KitTransport` answers. Its answer is written as the engine
writes one: the step ends it carries, then its outcome (an end, or new waits: sleeps, child
runs, message waits, parallel branches). Timers (sleeps, retries, wait timeouts, time limits)
fire when the kit's clock reaches them; nothing waits in real time. One invocation runs at a
time, branches before their run's next main invocation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from . import protocol, values
from .driver import Invocation
from .errors import ErrorBody, error_body
from .kit_model import (
    TIMED_OUT_ERROR,
    UNKNOWN_WORKFLOW,
    YEAR_LIMIT_ERROR,
    KitRun,
    KitStep,
)
from .kit_ops import KitTransport
from .kit_state import DEADLINE_STEP, KitState, Timer
from .protocol import InvokeRequest
from .step_context import step_context
from .steps import StepFn, StepRequest
from .threads import run_in_loop_thread
from .transport import StepTransport
from .workflow import Workflow

# A test that settles this many invocations and timers without the runs waiting on anything
# has a workflow that never waits: stop it instead of spinning.
MAX_ROUNDS = 10_000
API_URL = "https://engine.ezgh.invalid"  # never called: `KitTransport` answers step calls


class KitInvocation(Invocation):
    """The SDK's invocation, with the kit's stand-ins for step functions (mocks and injected
    failures) put in where the workflow asks for a step (`StepHost.submit`)."""

    def __init__(
        self,
        workflow: Workflow,
        request: InvokeRequest,
        transport: StepTransport,
        stand_in: Callable[[StepRequest], StepRequest],
    ) -> None:
        super().__init__(workflow, request, transport, None)
        self._stand_in = stand_in

    async def submit(self, request: StepRequest) -> tuple[str, Any]:
        return await super().submit(self._stand_in(request))


class KitEngine:
    """The kit's engine: its state (`KitState`), the workflows it runs, the stand-ins."""

    def __init__(self, start: datetime, seed: int | None, run_children: bool) -> None:
        self.state = KitState(start, seed)
        self.workflows: dict[str, Workflow] = {}
        self.run_children = run_children
        self.mocks: dict[str, StepFn] = {}
        self.invocations = 0  # how many it ran, every run's together
        self.failures: dict[tuple[str, int | None], Callable[[], BaseException]] = {}

    # -- runs ----------------------------------------------------------------------------

    def start(
        self,
        workflow: str,
        input: Any,
        *,
        run_key: str | None = None,
        timeout_seconds: int | None = None,
        parent: tuple[KitRun, str] | None = None,
    ) -> KitRun:
        """A new run (StartRun, or a child's start in its parent's suspend)."""
        state = self.state
        run_id = state.new_id() if parent is None else state.child_run_id(*parent)
        run = KitRun(run_id, workflow, input, "running", state.iso(), run_key=run_key)
        run.timeout_seconds = timeout_seconds
        run.external = workflow not in self.workflows or (
            parent is not None and not self.run_children
        )
        if parent is not None:
            run.parent_run_id, run.parent_step_id = parent[0].id, parent[1]
        state.runs[run.id] = run
        state.arm_limits(run)
        return run

    def retry(self, run: KitRun) -> None:
        """RetryRun: attempt + 1, its failed and cancelled steps forgotten, new limits."""
        run.attempt += 1
        run.status, run.ended_at, run.error, run.output, run.has_output = (
            "running",
            None,
            None,
            None,
            False,
        )
        forgotten = [i for i, s in run.steps.items() if s.status in ("failed", "cancelled")]
        for step_id in forgotten:
            del run.steps[step_id]
        run.bump()
        self.state.arm_limits(run)

    def complete_callback(self, run: KitRun, step: KitStep, body: Any) -> None:
        """POST the callback's URL: the step completes with ``body`` (JSON, at most 1 MiB)."""
        values.encode(body)
        if step.kind != "callback" or step.status != "waiting" or run.ended:
            raise InvalidState(
                f"409 invalid_state: callback {step.id!r} was completed or timed out already"
            )
        self.state.end_wait(run, step, output=values.roundtrip(body))

    def send_message(
        self,
        queue_id: str,
        key: str,
        body: str,
        attributes: dict[str, str] | None,
        workflow: str | None = None,
    ) -> int:
        """A message on ``queue_id`` whose correlation value is ``key``: it resumes every run
        waiting on it (as a resume subscription delivers it), or only the runs of
        ``workflow`` (a subscription names its workflow: another workflow's waits on the same
        queue and key wait for their own); answers how many."""
        message = {
            "messageId": self.state.new_id(),
            "body": body,
            "attributes": dict(attributes or {}),
            "sentAt": self.state.iso(),
            "queueId": queue_id,
        }
        waiting = self.state.waiters.pop((queue_id, key), [])
        taken = [w for w in waiting if workflow in (None, self.state.runs[w[0]].workflow)]
        kept = [w for w in waiting if w not in taken]
        if kept:
            self.state.waiters[(queue_id, key)] = kept
        for run_id, step_id in taken:
            run = self.state.runs[run_id]
            self.state.end_wait(run, run.steps[step_id], output=message)
        return len(taken)

    # -- the pump ------------------------------------------------------------------------

    def settle(self) -> None:
        """Fire the timers due now and run every invocation owed, until nothing is."""
        for _ in range(MAX_ROUNDS):
            timer = self.state.pop_due()
            if timer is not None:
                self._fire(timer)
                continue
            work = self._next_invocation()
            if work is None:
                return
            self._invoke(*work)
        raise RuntimeError(
            f"the runs kept working for {MAX_ROUNDS} invocations and timers without waiting"
        )

    def _next_invocation(self) -> tuple[KitRun, str | None] | None:
        """A branch waiting for its invocation first, else a run owed one."""
        for run in self.state.runs.values():
            if run.ended or run.external:
                continue
            for step in run.steps.values():
                if step.branch and step.status == "waiting":
                    return run, step.id
        for run in self.state.runs.values():
            if run.owed:
                return run, None
        return None

    def advance(self, when: datetime) -> None:
        """Move the clock to ``when`` (never back), firing what falls due on the way."""
        while True:
            self.settle()
            timer = self.state.next_timer(year_limits=True)
            if timer is None or timer.due > when:
                break
            self.state.now = max(self.state.now, timer.due)
        self.state.now = max(self.state.now, when)
        self.settle()

    # -- invocations ---------------------------------------------------------------------

    def _invoke(self, run: KitRun, branch: str | None) -> None:
        seq = run.invoke_seq
        workflow = self.workflows.get(run.workflow)
        if workflow is None:  # as a push app answers an invocation of a workflow it lacks
            error = error_body(UNKNOWN_WORKFLOW, "UnknownWorkflowError", f"no {run.workflow!r}")
            answer = protocol.failed(error, None)
        else:
            request = protocol.parse_invoke(self._request(run, branch))
            transport = KitTransport(self.state, run, branch)
            invocation = KitInvocation(workflow, request, transport, self._stand_in)
            with self.state.installed():
                answer = run_in_loop_thread(invocation.execute, f"ezgh-kit:{run.id}").result()
        run.invocations += 1
        self.invocations += 1
        self._apply(run, answer, branch)
        if branch is None:
            run.handled_seq = max(run.handled_seq, seq)
        else:
            self._branch_answered(run, branch)

    def _branch_answered(self, run: KitRun, step_id: str) -> None:
        """A branch invocation that answered without ending its step (it never reached it)
        fails it, so the main invocation replays and meets what went wrong itself."""
        step = run.steps.get(step_id)
        if step is not None and step.status in ("waiting", "running") and not run.ended:
            message = f"the branch invocation did not run step {step_id}"
            error = error_body("workflows.nondeterminism", "BranchNotRun", message)
            self.state.end_wait(run, step, error=error)

    def _request(self, run: KitRun, branch: str | None) -> dict[str, Any]:
        """The invoke request the engine would send for the run as recorded now."""
        body: dict[str, Any] = {
            "protocol": protocol.PROTOCOL_VERSION,
            "type": "invoke",
            "invocationId": self.state.new_id(),
            "run": {
                "id": run.id,
                "appId": "test",
                "workflow": run.workflow,
                "input": run.input,
                "attempt": run.attempt,
                "status": run.status,
            },
            "steps": [step.protocol_body() for step in run.steps.values()],
            "api": {"url": API_URL, "token": "test"},
        }
        if branch is not None:
            body["branch"] = {"stepId": branch}
        return body

    def _apply(self, run: KitRun, answer: dict[str, Any], branch: str | None) -> None:
        """Write the answer: its held step ends, then its outcome."""
        outcome = answer.get("outcome")
        if outcome in ("aborted", "branch") or run.ended:
            return
        transport = KitTransport(self.state, run, None)
        for op in answer.get("ops") or []:
            transport.apply(op)
        if outcome == "suspended":
            for wait in answer.get("waits") or []:
                self._wait(run, wait)
            return
        if outcome == "completed" and run.status != "cancelling":
            self.state.end_run(run, "completed", output=answer.get("output"))
        elif outcome == "failed" and run.status != "cancelling":
            self.state.end_run(run, "failed", error=dict(answer.get("error") or {}))
        else:  # cancelled, or any end of a cancelling run
            self.state.end_run(run, "cancelled")

    def _wait(self, run: KitRun, wait: dict[str, Any]) -> None:
        """A new wait of a suspended invocation (one on a known step changes nothing)."""
        step_id, kind, now = str(wait["stepId"]), str(wait["kind"]), self.state.iso()
        if step_id in run.steps or kind not in ("sleep", "invoke", "message", "run"):
            return
        if kind == "run" and not wait.get("parallel"):
            return  # a retry's wait: the step exists
        step = KitStep(step_id, str(wait["name"]), kind, "waiting", 1, started_at=now)
        if kind == "sleep":
            step.status = "sleeping"
            until = wait.get("until")
            step.wake_at = until if isinstance(until, str) else self.state.later(wait["seconds"])
        elif kind == "message":
            step.wake_at = self.state.later(wait["timeoutSeconds"])
            key = (str(wait["queueId"]), str(wait["key"]))
            self.state.waiters.setdefault(key, []).append((run.id, step_id))
        elif kind == "run":
            step.branch, step.attempt = True, 0
        run.steps[step_id] = step
        if step.wake_at:
            step.wake_at = values.iso_utc(values.parse_iso(step.wake_at))
            self.state.add_timer(run.id, step_id, step.wake_at)
        if kind == "invoke":
            self._child(run, step, wait)

    def _child(self, run: KitRun, step: KitStep, wait: dict[str, Any]) -> None:
        step.child_run_id = self.state.child_run_id(run, step.id)
        if step.child_run_id not in self.state.runs:
            self.start(str(wait["workflow"]), wait.get("input"), parent=(run, step.id))

    # -- timers --------------------------------------------------------------------------

    def _fire(self, timer: Timer) -> None:
        """A timer acts if its run is live and its step (or run) still holds its time."""
        run = self.state.runs.get(timer.run_id)
        if run is None or run.ended:
            return
        if timer.step_id == DEADLINE_STEP:
            if timer.year_limit:
                self.state.end_run(run, "timedOut", error=dict(YEAR_LIMIT_ERROR))
            elif run.deadline_at == timer.wake_at:
                self.state.end_run(run, "timedOut", error=dict(TIMED_OUT_ERROR))
            return
        step = run.steps.get(timer.step_id)
        if step is None or step.wake_at != timer.wake_at:
            return
        if step.status == "retrying":  # due: a branch is invoked again, else its run
            step.wake_at = None
            if step.branch:
                step.status = "waiting"
            else:
                run.bump()
        elif step.status in ("sleeping", "waiting"):  # a sleep ends, a wait times out (None)
            self.state.end_wait(run, step, output=None)

    # -- stand-ins -----------------------------------------------------------------------

    def _stand_in(self, request: StepRequest) -> StepRequest:
        """A ``run`` step whose name is mocked, or has a failure injected, gets a function
        that does that instead (the step's retries and value rules apply as usual)."""
        if request.kind != "run" or request.fn is None:
            return request
        name, real = request.name, request.fn
        if name not in self.mocks and not any(key[0] == name for key in self.failures):
            return request
        mocks, failures = self.mocks, self.failures

        def stand_in() -> Any:
            attempt = step_context().attempt
            failure = failures.get((name, attempt)) or failures.get((name, None))
            if failure is not None:
                raise failure()
            return mocks.get(name, real)()

        return replace(request, fn=stand_in)


class InvalidState(Exception):
    """What the API answers ``409 invalid_state`` to: the run or step is not in a state that
    allows it (a callback completed already, a cancel of a run that ended)."""


def end_external(state: KitState, run: KitRun, output: Any, error: ErrorBody | None) -> None:
    """A run the test runs itself (``external``) ends: ``completed`` with ``output``, or
    ``failed`` with ``error``."""
    if not run.external or run.ended:
        raise InvalidState(f"run {run.id} is run by the environment or has ended")
    if error is None:
        state.end_run(run, "completed", output=values.roundtrip(output))
    else:
        state.end_run(run, "failed", error=error)
