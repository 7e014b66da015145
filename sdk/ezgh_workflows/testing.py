"""Test workflows in process: no server, no AWS, and a clock that skips.

```python
from ezgh_workflows.testing import WorkflowEnvironment

def test_onboarding_follows_up_after_three_days():
    env = WorkflowEnvironment([onboarding])
    env.mock_step("load-user", returns={"email": "a@x.io"})
    run = env.start("onboarding", {"userId": "u_42"})
    assert run.step("cooldown").status == "sleeping"
    assert run.result() == "a@x.io"          # skips the 3 days: milliseconds
    assert env.now - run.step("cooldown").started_at >= timedelta(days=3)
```

A `WorkflowEnvironment` runs each invocation as the engine would: the SDK's own replay
driver runs the workflow against the steps recorded so far, and the environment answers its
step calls and writes its answer as the engine does (retries and their backoff, parallel
branches, child runs, cancellation, callbacks, message waits, time limits). Time moves only
when the test says so (`skip`) or waits for a run (`RunHandle.wait`, `RunHandle.result`):
the clock then jumps to the next thing due. The same behaviours run on the engine itself in
this repository's tests (tests/sdk/test_behaviours.py). docs/testing.md has the guide.

`Replayer` replays recorded histories (``ezgh workflows runs export RUN > run.json``) against
your current code: the same check as ``ezgh workflows replay-check``, in your own tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from ._internal import clock, values
from ._internal.duration import Duration, parse_duration_unbounded
from ._internal.errors import ErrorBody, ValueRuleError, error_body
from ._internal.history import RunHistory
from ._internal.kit_engine import InvalidState, KitEngine, end_external
from ._internal.kit_model import AttemptRecord, KitRun, KitStep, StepRecord
from ._internal.replay import Divergence, ReplayDivergence, Replayer, ReplayReport
from ._internal.workflow import Workflow

__all__ = [
    "AttemptRecord",
    "Divergence",
    "InvalidState",
    "ReplayDivergence",
    "ReplayReport",
    "Replayer",
    "RunFailed",
    "RunHandle",
    "RunHistory",
    "RunStuck",
    "StepRecord",
    "WorkflowEnvironment",
]

_UNSET: Any = object()
MAX_RUN_TIMEOUT_SECONDS = 31_536_000
# `wait_until` gives up after this many invocations: a run that loops forever (a poll a
# minute with no end) would otherwise be skipped through for good.
MAX_WAIT_INVOCATIONS = 2_000


class RunStuck(Exception):
    """A run waits on something only the test can end (a callback without a timeout, a
    child run the environment does not run), so waiting would never end it."""


class RunFailed(Exception):
    """`RunHandle.result` of a run that did not complete: ``status`` and ``error``
    (``{code, name, message}``, None for a cancelled run)."""

    def __init__(self, run_id: str, status: str, error: ErrorBody | None) -> None:
        detail = (
            f": {error.get('code')} {error.get('name')}: {error.get('message')}" if error else ""
        )
        super().__init__(f"run {run_id} ended {status}{detail}")
        self.run_id = run_id
        self.status = status
        self.error = error


class WorkflowEnvironment:
    """Runs workflows in process on a clock of its own (see the module's docstring).

    - ``workflows``: the workflows runs may start (more with `register`).
    - ``start_time``: the clock's first reading (an aware ``datetime``; default: now).
    - ``seed``: makes run IDs, ``uuid`` steps, callback URLs and retry jitter repeatable.
    - ``run_children``: child runs (``ctx.step.invoke``) of registered workflows run in the
      environment (the default); with False, or for a workflow not registered, a child
      waits for the test to end it (``run.child("step").complete(...)``).

    Use it from one thread at a time, and close it (or use it as a context manager): while
    an invocation runs, the SDK reads this environment's clock.
    """

    def __init__(
        self,
        workflows: Iterable[Workflow] = (),
        *,
        start_time: datetime | None = None,
        seed: int | None = None,
        run_children: bool = True,
    ) -> None:
        start = start_time if start_time is not None else clock.now()
        if start.tzinfo is None or start.utcoffset() is None:
            raise ValueError("start_time must be an aware datetime (one with a timezone)")
        self._engine = KitEngine(start, seed, run_children)
        self.register(*workflows)

    def __enter__(self) -> WorkflowEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Forget every run (nothing runs in the background: there is nothing to stop)."""
        self._engine.state.runs.clear()
        self._engine.state.timers.clear()

    def register(self, *workflows: Workflow) -> WorkflowEnvironment:
        """Make more workflows startable (as children too)."""
        for item in workflows:
            if not isinstance(item, Workflow):
                raise TypeError(f"{item!r} is not a workflow: decorate it with @workflow(name)")
            self._engine.workflows[item.name] = item
        return self

    # -- time ----------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The environment's clock (what ``now`` steps record)."""
        return self._engine.state.now

    def skip(self, duration: Duration) -> None:
        """Move the clock forward by ``duration`` (``"3d"``, seconds or a ``timedelta``),
        ending the sleeps, retries, timeouts and time limits that fall due on the way, in
        order, each with its run invoked at its time."""
        seconds = parse_duration_unbounded(duration)
        self._engine.advance(self.now + timedelta(seconds=seconds))

    def settle(self) -> None:
        """Run every invocation owed now (after a change the test made), without moving the
        clock. `start`, `RunHandle.cancel` and the other actions settle by themselves."""
        self._engine.settle()

    def wait_until(self, condition: Callable[[], bool], *, within: Duration | None = None) -> None:
        """Skip the clock from one due thing to the next until ``condition()`` holds.

        `RunStuck` when nothing is due any more (the runs wait on the test), or when it
        would take longer than ``within``. A run's one-year limit is never skipped to here
        (use `skip` to reach it)."""
        engine = self._engine
        limit = None if within is None else self.now + timedelta(seconds=_seconds(within))
        began = engine.invocations
        while True:
            engine.settle()
            if condition():
                return
            if engine.invocations - began > MAX_WAIT_INVOCATIONS:
                raise RunStuck(
                    f"still waiting after {MAX_WAIT_INVOCATIONS} invocations: does a run loop "
                    "forever? (pass within= to bound the wait in time)"
                )
            timer = engine.state.next_timer(year_limits=False)
            if timer is None:
                raise RunStuck("nothing is due: " + self._blockers())
            if limit is not None and timer.due > limit:
                raise RunStuck(f"not within {within}: the next thing is due at {timer.due}")
            engine.state.now = max(engine.state.now, timer.due)

    def _blockers(self) -> str:
        waits = [w for run in self._engine.state.runs.values() for w in _waits_on_the_test(run)]
        return "; ".join(waits) or "no run waits on anything"

    # -- runs ----------------------------------------------------------------------------

    def start(
        self,
        workflow: str | Workflow,
        input: Any = None,
        *,
        run_key: str | None = None,
        timeout_seconds: int | None = None,
    ) -> RunHandle:
        """Start a run (StartRun) and run it until it waits (no time skipped).

        ``run_key``: a run with this key answers again when the workflow and input are the
        same, else `ValueError` (``409 run_key_conflict``). ``timeout_seconds``: the run's
        time limit (1 to 31536000), after which it ends ``timedOut``."""
        name = workflow.name if isinstance(workflow, Workflow) else workflow
        if isinstance(workflow, Workflow):
            self.register(workflow)
        if name not in self._engine.workflows:
            raise ValueError(f"404 not_found: no workflow {name!r} is registered")
        value = _json(input, "input")
        existing = self._by_key(run_key, name, value)
        if existing is not None:
            return existing
        if timeout_seconds is not None and not (
            isinstance(timeout_seconds, int) and 1 <= timeout_seconds <= MAX_RUN_TIMEOUT_SECONDS
        ):
            raise ValueError(f"timeout_seconds must be an int from 1 to {MAX_RUN_TIMEOUT_SECONDS}")
        run = self._engine.start(name, value, run_key=run_key, timeout_seconds=timeout_seconds)
        self._engine.settle()
        return RunHandle(self, run)

    def execute(self, workflow: str | Workflow, input: Any = None, **options: Any) -> Any:
        """Start a run and answer its output once completed (`RunFailed` otherwise)."""
        return self.start(workflow, input, **options).result()

    def _by_key(self, run_key: str | None, workflow: str, value: Any) -> RunHandle | None:
        if run_key is None:
            return None
        for run in self._engine.state.runs.values():
            if run.run_key == run_key:
                if run.workflow != workflow or run.input != value:
                    raise ValueError(f"409 run_key_conflict: run key {run_key!r} is taken")
                return RunHandle(self, run)
        return None

    @property
    def runs(self) -> list[RunHandle]:
        """Every run, children included, in the order they started."""
        return [RunHandle(self, run) for run in self._engine.state.runs.values()]

    def run(self, run_id: str) -> RunHandle:
        """A run by its ID."""
        return RunHandle(self, self._engine.state.find(run_id))

    # -- stand-ins -----------------------------------------------------------------------

    def mock_step(
        self, name: str, fn: Callable[[], Any] | None = None, *, returns: Any = _UNSET
    ) -> None:
        """Run ``fn`` instead of the function of every ``run`` step named ``name`` (or
        answer ``returns``). It runs as the step would: inside it `step_context()` works,
        what it raises fails the attempt and is retried as usual, its value follows the JSON
        rules. Mock ``send_to_queue`` steps by their name too: the environment has no queues."""
        if (fn is None) == (returns is _UNSET):
            raise TypeError("mock_step takes a function or returns=, not both or neither")
        self._engine.mocks[name] = fn if fn is not None else (lambda: returns)

    def unmock_step(self, name: str) -> None:
        """Let steps named ``name`` run their own function again."""
        self._engine.mocks.pop(name, None)

    def fail_attempt(
        self,
        name: str,
        attempt: int | None = 1,
        error: BaseException | type[BaseException] | None = None,
    ) -> None:
        """Make attempt ``attempt`` (None: every attempt) of ``run`` steps named ``name``
        raise ``error`` (default: ``RuntimeError("injected failure")``) instead of running:
        the step's retries decide what happens next, as for a real failure."""
        failure = error if error is not None else RuntimeError("injected failure")

        def make() -> BaseException:
            return failure() if isinstance(failure, type) else failure

        self._engine.failures[(name, attempt)] = make

    # -- the outside world ---------------------------------------------------------------

    def send_message(
        self,
        queue_id: str,
        key: str,
        body: str,
        *,
        attributes: dict[str, str] | None = None,
        workflow: str | None = None,
    ) -> int:
        """Deliver a message to the runs waiting on ``queue_id`` and ``key``
        (``wait_for_message``), as a resume subscription does; answers how many it resumed
        (a message no run waits on is not kept). With ``workflow``, only that workflow's
        runs are resumed, as by a subscription that names it; without, every run of the
        environment (its one app) waiting on them."""
        if not isinstance(body, str):
            raise TypeError("a message body is text (json.dumps a value)")
        resumed = self._engine.send_message(queue_id, key, body, attributes, workflow)
        self._engine.settle()
        return resumed


class RunHandle:
    """A run of a `WorkflowEnvironment`: its state as recorded now, and what a test may do
    to it (``wait``, ``cancel``, ``complete_callback``, ...). Each read is current."""

    def __init__(self, env: WorkflowEnvironment, run: KitRun) -> None:
        self._env = env
        self._run = run

    def __repr__(self) -> str:
        return f"RunHandle({self._run.workflow!r}, id={self.id!r}, status={self.status!r})"

    # -- state ---------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def workflow(self) -> str:
        return self._run.workflow

    @property
    def input(self) -> Any:
        return self._run.input

    @property
    def status(self) -> str:
        """``running``, ``cancelling``, ``completed``, ``failed``, ``cancelled`` or
        ``timedOut``."""
        return self._run.status

    @property
    def ended(self) -> bool:
        return self._run.ended

    @property
    def output(self) -> Any:
        """A completed run's output (None otherwise)."""
        return self._run.output

    @property
    def error(self) -> ErrorBody | None:
        """A failed or timed-out run's ``{code, name, message}``."""
        return dict(self._run.error) if self._run.error else None

    @property
    def attempt(self) -> int:
        return self._run.attempt

    @property
    def invocations(self) -> int:
        """How many invocations ran it (branch invocations included)."""
        return self._run.invocations

    @property
    def steps(self) -> list[StepRecord]:
        """Its recorded steps, in the order they started."""
        return [StepRecord.of(step) for step in self._run.steps.values()]

    def step(self, ref: str) -> StepRecord:
        """A step by its ID, or the first step named ``ref``; `KeyError` if none."""
        return StepRecord.of(self._step(ref))

    def attempts(self, ref: str | None = None) -> list[AttemptRecord]:
        """Every attempt of its ``run`` steps (of step ``ref``: an ID or a name), in order."""
        found = list(self._run.attempts)
        if ref is not None:
            found = [a for a in found if ref in (a.step_id, a.name)]
        return found

    def to_api(self) -> dict[str, Any]:
        """The run as GetRun would answer it."""
        return self._run.to_api()

    def history(self) -> RunHistory:
        """Its history as ``ezgh workflows runs export`` writes one (for a `Replayer`)."""
        run = self._run.to_api()
        steps = tuple(run.pop("steps"))
        return RunHistory(run, steps, (), values.iso_utc(self._env.now))

    @property
    def children(self) -> list[RunHandle]:
        """Its child runs, in the order they started."""
        runs = self._env._engine.state.runs.values()
        return [RunHandle(self._env, r) for r in runs if r.parent_run_id == self.id]

    def child(self, ref: str) -> RunHandle:
        """The child run its ``invoke`` step ``ref`` (ID or name) started."""
        step = self._step(ref)
        if step.child_run_id is None:
            raise KeyError(f"step {step.id!r} started no child run")
        return self._env.run(step.child_run_id)

    def _step(self, ref: str) -> KitStep:
        steps = self._run.steps
        found = steps.get(ref) or next((s for s in steps.values() if s.name == ref), None)
        if found is None:
            raise KeyError(f"run {self.id} has no step {ref!r} (steps: {', '.join(steps)})")
        return found

    # -- waiting -------------------------------------------------------------------------

    def wait(self, *, within: Duration | None = None) -> RunHandle:
        """Skip the clock until the run has ended (see `WorkflowEnvironment.wait_until`)."""
        self._env.wait_until(lambda: self._run.ended, within=within)
        return self

    def result(self, *, within: Duration | None = None) -> Any:
        """Wait for the run to end; its output, or `RunFailed` unless it completed."""
        self.wait(within=within)
        if self._run.status != "completed":
            raise RunFailed(self.id, self._run.status, self.error)
        return self._run.output

    # -- acting on it --------------------------------------------------------------------

    def cancel(self) -> None:
        """CancelRun: ``cancelling``, then ``cancelled`` once the workflow has ended."""
        if self._run.ended:
            raise InvalidState(f"409 invalid_state: run {self.id} has ended ({self.status})")
        self._env._engine.state.request_cancel(self._run)
        self._env.settle()

    def retry(self) -> None:
        """RetryRun of a ``failed`` or ``timedOut`` run: attempt + 1, its completed steps
        kept, its failed and cancelled ones run again."""
        if self._run.status not in ("failed", "timedOut"):
            raise InvalidState("409 invalid_state: only a failed or timed-out run is retried")
        self._env._engine.retry(self._run)
        self._env.settle()

    def complete_callback(self, ref: str, body: Any = None) -> None:
        """POST the URL of callback step ``ref`` (ID or name) with the JSON ``body``.
        `InvalidState` when it completed or timed out already."""
        self._env._engine.complete_callback(self._run, self._step(ref), body)
        self._env.settle()

    def complete(self, output: Any = None) -> None:
        """End a run the environment does not run (a child whose workflow is not
        registered, or any child with ``run_children=False``) ``completed``."""
        end_external(self._env._engine.state, self._run, output, None)
        self._env.settle()

    def fail(self, message: str, *, name: str = "Error", code: str = "user") -> None:
        """End a run the environment does not run ``failed`` with this error."""
        end_external(self._env._engine.state, self._run, None, error_body(code, name, message))
        self._env.settle()


def _waits_on_the_test(run: KitRun) -> list[str]:
    """What a live run waits on that no timer ends, in words for `RunStuck`."""
    if run.ended:
        return []
    if run.external:
        return [f"run {run.id} of workflow {run.workflow!r} is the test's to end"]
    found = []
    for step in run.steps.values():
        if step.status == "waiting" and step.kind == "callback" and step.wake_at is None:
            found.append(
                f"run {run.id} waits on callback {step.id!r} (no timeout): "
                "complete it with run.complete_callback(...)"
            )
        if step.status == "waiting" and step.kind == "invoke":
            found.append(f"run {run.id} waits on child run {step.child_run_id}")
    return found


def _json(value: Any, what: str) -> Any:
    try:
        return values.roundtrip(value)
    except ValueRuleError as exc:
        raise ValueError(f"400 validation_error: {what}: {exc}") from None


def _seconds(duration: Duration) -> float:
    return parse_duration_unbounded(duration)
