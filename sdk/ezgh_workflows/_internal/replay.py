"""Replaying a recorded history against the current code, running no step (`Replayer`).

The SDK's own driver runs the workflow on an invoke request made from the history
(`RunHistory`): recorded steps give their recorded outcomes, and the first call that would
need the engine (a step to run, a value to record, a callback to create, a cancellation to
deliver) ends the replay there, since the history ends there. A patch marker
(`Steps.patched`) is the exception: its decision is recorded as the code makes it.

What the code asked for is then held against the record (`analyse`): the run would fail
(a rule the driver enforces, ``workflows.nondeterminism`` first of all), or the code skipped
recorded steps while asking for others, which the engine would never notice: steps counted
by name shift (``send#2`` gets what the old code's ``send#2`` recorded) or a new step runs
where the record holds another. A recorded step with a name of its own that the code no
longer asks for shifts nothing: it is only reported (``skipped``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import protocol
from .driver import Invocation
from .errors import AbortInvocation, DuplicateStepNameError
from .history import RunHistory
from .identity import StepIds, is_patch_marker
from .protocol import InvokeRequest, Op
from .steps import StepRequest
from .threads import run_in_loop_thread
from .workflow import Workflow

PLACEHOLDER_URL = "https://callbacks.ezgh.invalid/replay/"  # a recorded callback's URL
HISTORY_ENDS = "the recorded history ends here"
# Codes a replay fails with that mean the code no longer fits the record.
RULE_CODES = frozenset(
    {
        "workflows.nondeterminism",
        "workflows.duplicate_step_name",
        "workflows.step_in_step",
        "workflows.unknown_workflow",
    }
)
INVOKED_AGAIN = frozenset({"running", "cancelling", "failed", "timedOut"})


@dataclass(frozen=True)
class StepRef:
    """A step as the report names it: recorded (``status``, ``position`` from 1 in the
    record, the ``deployment_id`` that recorded it) or only asked for by the code."""

    id: str
    name: str
    kind: str
    status: str | None = None
    position: int | None = None
    deployment_id: str | None = None
    asked_as: int | None = None  # the code's Nth step (from 1), for a step it asked for

    def describe(self) -> str:
        """``#3 send#3 (run, completed)``; for a step the code asks for, its own order and
        where the record holds it: ``#3 cooldown#1 (sleep; recorded as #4)``."""
        if self.asked_as is None:
            return f"#{self.position} {self.id} ({self.kind}, {self.status})"
        where = f"recorded as #{self.position}" if self.position else "not recorded"
        return f"#{self.asked_as} {self.id} ({self.kind}; {where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "position": self.position,
            "deploymentId": self.deployment_id,
            "askedAs": self.asked_as,
        }


@dataclass(frozen=True)
class Divergence:
    """Where the code first parts from a run's record, and what the run will do.

    ``kind``: ``nondeterminism`` or ``rule`` (the run fails with that code when next
    invoked), ``counter_shift`` (steps counted by name shift: the run goes on, silently
    taking results recorded for other calls), ``new_step`` (a step the record does not hold
    runs where it holds another, which is skipped), ``error`` (the replay itself failed)."""

    kind: str
    recorded: StepRef | None
    asked: StepRef | None
    next_invocation: str
    code_deployment_id: str | None = None

    def lines(self) -> list[str]:
        recorded = "-"
        if self.recorded is not None:
            recorded = self.recorded.describe()
            recorded += f" by deployment {self.recorded.deployment_id or '(unknown)'}"
        asked = self.asked.describe() if self.asked is not None else "nothing more"
        asked += f" [code: deployment {self.code_deployment_id or '(local)'}]"
        return [
            f"recorded:  {recorded}",
            f"code asks: {asked}",
            f"next invocation: {self.next_invocation}",
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "recorded": self.recorded.to_json() if self.recorded else None,
            "asked": self.asked.to_json() if self.asked else None,
            "nextInvocation": self.next_invocation,
            "codeDeploymentId": self.code_deployment_id,
        }


@dataclass(frozen=True)
class ReplayReport:
    """One run's replay. ``breaks`` when it diverges and the engine may invoke it again
    (it is live, or failed or timed out and may be retried): an ended run is only checked."""

    run_id: str
    workflow: str
    run_status: str
    recorded: int
    replayed: int
    outcome: str
    divergence: Divergence | None = None
    skipped: tuple[StepRef, ...] = field(default=())

    @property
    def invoked_again(self) -> bool:
        return self.run_status in INVOKED_AGAIN

    @property
    def breaks(self) -> bool:
        """A divergence in a run the engine may invoke again, or a replay that could not
        be made (``error``: nothing was checked, so the gate fails closed)."""
        if self.divergence is None:
            return False
        return self.invoked_again or self.divergence.kind == "error"

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "workflow": self.workflow,
            "status": self.run_status,
            "breaks": self.breaks,
            "recordedSteps": self.recorded,
            "replayedSteps": self.replayed,
            "outcome": self.outcome,
            "divergence": self.divergence.to_json() if self.divergence else None,
            "skipped": [s.to_json() for s in self.skipped],
        }


class ReplayDivergence(AssertionError):
    """`Replayer.check` found the code no longer fits a recorded history."""

    def __init__(self, report: ReplayReport) -> None:
        lines = [f"run {report.run_id} ({report.workflow}) diverges from its record:"]
        if report.divergence is not None:
            lines += ["  " + line for line in report.divergence.lines()]
        super().__init__("\n".join(lines))
        self.report = report


class Replayer:
    """Replays recorded histories against ``workflows`` (a list, a `PushApp`, a `Worker`).

    ``replay(history)`` answers a `ReplayReport`; ``check(history)`` raises
    `ReplayDivergence` when the code does not fit it. A history is a `RunHistory`, its JSON
    object, or the path of a file ``ezgh workflows runs export`` wrote. ``deployment_id``
    names the code under check in reports."""

    def __init__(self, workflows: Any, *, deployment_id: str | None = None) -> None:
        self._workflows = {w.name: w for w in workflows_of(workflows)}
        self.deployment_id = deployment_id

    def check(self, history: RunHistory | Mapping[str, Any] | str | Path) -> ReplayReport:
        """Replay ``history``; `ReplayDivergence` if the code diverges from it (whatever
        the run's status: a test's history is there to be checked)."""
        report = self.replay(history)
        if report.divergence is not None:
            raise ReplayDivergence(report)
        return report

    def replay(self, history: RunHistory | Mapping[str, Any] | str | Path) -> ReplayReport:
        """Replay ``history`` with the code, running no step; the report."""
        found = as_history(history)
        workflow = self._workflows.get(found.workflow)
        steps = replayed_steps(found)
        if workflow is None:
            return _unknown_workflow(found, steps, self.deployment_id)
        request = replay_request(found, steps)
        transport = ReplayTransport()
        invocation = ReplayInvocation(workflow, request, transport, self.deployment_id)
        answer = run_in_loop_thread(invocation.execute, f"ezgh-replay:{found.id}").result()
        divergence, skipped = analyse(steps, invocation.asks, answer, self.deployment_id)
        asked = {ask.step_id for ask in invocation.asks}
        return ReplayReport(
            run_id=found.id,
            workflow=found.workflow,
            run_status=found.status,
            recorded=len(steps),
            replayed=sum(1 for step in steps if step["id"] in asked),
            outcome=_outcome(answer, transport.stopped_at),
            divergence=divergence,
            skipped=skipped,
        )


# -- running the code ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """A step the code asked for, in order."""

    step_id: str
    name: str
    kind: str


class ReplayInvocation(Invocation):
    """The SDK's invocation, noting each step the workflow asks for (`StepHost.submit`), with
    its ID given as the driver gives it (`StepIds`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asks: list[Ask] = []
        self._mirror = StepIds()

    async def submit(self, request: StepRequest) -> tuple[str, Any]:
        self.check_can_call_step()
        if request.wait_for is None:
            try:
                step_id = self._mirror.allocate(request.name, request.explicit_id)
            except DuplicateStepNameError:
                step_id = request.explicit_id or request.name
            self.asks.append(Ask(step_id, request.name, request.kind))
        return await super().submit(request)


class ReplayTransport:
    """Step calls of a replay: the first one ends it (the history ends there), except a
    patch marker's record, which the replay takes as the code decides it."""

    def __init__(self) -> None:
        self.stopped_at: Op | None = None

    async def send(self, ops: list[Op]) -> list[dict[str, Any]]:
        results = []
        for op in ops:
            if op.get("op") == "record" and is_patch_marker(str(op.get("stepId"))):
                results.append({"stepId": op["stepId"], "result": "ok"})
                continue
            self.stopped_at = op
            raise AbortInvocation(HISTORY_ENDS)
        return results

    async def aclose(self) -> None:
        return None


def workflows_of(source: Any) -> list[Workflow]:
    """The workflows of a list, a `Workflow`, or an app with ``.workflows``."""
    if isinstance(source, Workflow):
        return [source]
    found = getattr(source, "workflows", source)
    items = list(found) if isinstance(found, Iterable) else []
    if not items or not all(isinstance(item, Workflow) for item in items):
        raise TypeError(f"{source!r} holds no workflows: give workflows, a PushApp or a Worker")
    return items


def as_history(history: RunHistory | Mapping[str, Any] | str | Path) -> RunHistory:
    if isinstance(history, RunHistory):
        return history
    if isinstance(history, str | Path):
        return RunHistory.load(history)
    return RunHistory.from_json(history)


def replayed_steps(history: RunHistory) -> list[dict[str, Any]]:
    """The steps the next invocation would get: a failed or timed-out run's RetryRun
    forgets its failed and cancelled steps."""
    steps = list(history.steps)
    if history.status in ("failed", "timedOut"):
        steps = [s for s in steps if s["status"] not in ("failed", "cancelled")]
    return steps


def replay_request(history: RunHistory, steps: list[dict[str, Any]]) -> InvokeRequest:
    """The invoke request of the run's next invocation, as the engine would build it."""
    run = history.run
    attempt = int(run.get("attempt") or 1) + (history.status in ("failed", "timedOut"))
    body = {
        "protocol": protocol.PROTOCOL_VERSION,
        "type": "invoke",
        "invocationId": "replay",
        "run": {
            "id": history.id,
            "appId": str(run.get("appId") or ""),
            "workflow": history.workflow,
            "input": run.get("input"),
            "attempt": attempt,
            "status": "cancelling" if history.status == "cancelling" else "running",
        },
        "steps": [_protocol_step(step) for step in steps],
        "api": {"url": PLACEHOLDER_URL, "token": "replay"},
    }
    return protocol.parse_invoke(body)


def _protocol_step(step: dict[str, Any]) -> dict[str, Any]:
    """A recorded step as an invoke request shows it: a callback's URL (secret, never
    exported) stands in, and a `run` step waiting is a parallel branch."""
    body = {k: v for k, v in step.items() if k != "deploymentId"}
    if step["kind"] == "callback":
        body["url"] = PLACEHOLDER_URL + str(step["id"])
    if step["kind"] == "run" and step["status"] == "waiting":
        body["branch"] = True
    return body


# -- holding the asks against the record -----------------------------------------------------


def analyse(
    steps: list[dict[str, Any]],
    asks: list[Ask],
    answer: dict[str, Any],
    code_deployment: str | None,
) -> tuple[Divergence | None, tuple[StepRef, ...]]:
    """The first divergence of the code from the record (None when it fits), and the
    recorded steps with names of their own it no longer asks for (safe to skip)."""
    record = Record(steps)
    error = answer.get("error") if answer.get("outcome") == "failed" else None
    if isinstance(error, dict) and error.get("code") in RULE_CODES:
        return _rule_failure(record, asks, error, code_deployment), ()
    asked_ids = {ask.step_id for ask in asks}
    never = [s for s in record.plain if s["id"] not in asked_ids]
    if not never:
        return None, ()
    asked = [ask for ask in asks if not is_patch_marker(ask.step_id)]
    fresh = [ask for ask in asked if ask.step_id not in record.position]
    shifted = _shifted_names(record, never, asked, fresh)
    if not shifted and not fresh:
        return None, tuple(record.ref(s["id"]) for s in never)
    first = never[0]
    index = record.plain.index(first)
    if shifted:
        at = asked[index] if index < len(asked) else None
        text = _shift_text(record, asked, shifted, fresh)
        kind = "counter_shift"
    else:
        at, kind = fresh[0], "new_step"
        text = (
            f"runs {at.step_id} as a new step, although the record holds {first['id']} "
            f"and steps after it there: {first['id']} is not replayed, its later steps run "
            f"out of their recorded order (if {at.step_id} is {first['id']} renamed or moved, "
            "its work is done a second time)"
        )
    asked_ref = record.ask_ref(at, asks) if at is not None else None
    return Divergence(kind, record.ref(first["id"]), asked_ref, text, code_deployment), ()


class Record:
    """The recorded steps, by position (patch markers aside in ``plain``)."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        self.steps = steps
        self.position = {str(s["id"]): i for i, s in enumerate(steps)}
        self.plain = [s for s in steps if not is_patch_marker(str(s["id"]))]

    def ref(self, step_id: str) -> StepRef:
        step = self.steps[self.position[step_id]]
        return StepRef(
            id=step_id,
            name=str(step["name"]),
            kind=str(step["kind"]),
            status=str(step["status"]),
            position=self.position[step_id] + 1,
            deployment_id=step.get("deploymentId"),
        )

    def ask_ref(self, ask: Ask, asks: list[Ask]) -> StepRef:
        """A step the code asked for (the Nth of ``asks``), and where the record holds it."""
        order = asks.index(ask) + 1
        if ask.step_id in self.position:
            ref = self.ref(ask.step_id)
            return StepRef(
                ask.step_id, ask.name, ask.kind, ref.status, ref.position, ref.deployment_id, order
            )
        return StepRef(ask.step_id, ask.name, ask.kind, asked_as=order)


def counter_name(step_id: str) -> str | None:
    """``send`` for ``send#3`` (a step counted by name); None for an explicit ID."""
    name, sep, count = step_id.rpartition("#")
    return name if sep and count.isdigit() else None


def _shifted_names(
    record: Record, never: list[dict[str, Any]], asked: list[Ask], fresh: list[Ask]
) -> set[str]:
    """Names whose counted steps shift: the code asks fewer of them than the record holds
    (a recorded ``send#3`` skipped while ``send#1`` is asked), or more, ahead of recorded
    steps (a new ``send#3`` while later recorded steps wait)."""
    asked_names = Counter(counter_name(a.step_id) for a in asked)
    recorded_names = {counter_name(str(s["id"])) for s in record.plain}
    shifted = {n for s in never if (n := counter_name(str(s["id"]))) and asked_names[n]}
    shifted |= {n for a in fresh if (n := counter_name(a.step_id)) and n in recorded_names}
    return shifted


def _shift_text(record: Record, asked: list[Ask], shifted: set[str], fresh: list[Ask]) -> str:
    parts = []
    for name in sorted(shifted):
        in_code = sum(1 for a in asked if counter_name(a.step_id) == name)
        in_record = sum(1 for s in record.plain if counter_name(str(s["id"])) == name)
        parts.append(f"the code asks {in_code} '{name}' steps where the record holds {in_record}")
    text = (
        "goes on without failing, but steps are counted by name and "
        + "; ".join(parts)
        + ": those steps replay results recorded for other calls (silently another step's "
        "result)"
    )
    if fresh:
        text += f", and {fresh[0].step_id} runs as a new step"
    return text


def _rule_failure(
    record: Record, asks: list[Ask], error: dict[str, Any], code_deployment: str | None
) -> Divergence:
    """The run fails with a rule's code: the step whose ID its message names, else the
    last step the code asked for."""
    message = str(error.get("message") or "")
    named = [ask for ask in asks if f"'{ask.step_id}'" in message]
    at = named[-1] if named else (asks[-1] if asks else None)
    recorded = record.ref(at.step_id) if at and at.step_id in record.position else None
    code = str(error.get("code"))
    kind = "nondeterminism" if code == "workflows.nondeterminism" else "rule"
    asked = record.ask_ref(at, asks) if at is not None else None
    return Divergence(kind, recorded, asked, f"fails with {code}: {message}", code_deployment)


def _unknown_workflow(
    history: RunHistory, steps: list[dict[str, Any]], code_deployment: str | None
) -> ReplayReport:
    text = f"fails with workflows.unknown_workflow: the code has no workflow {history.workflow!r}"
    divergence = Divergence("rule", None, None, text, code_deployment)
    return ReplayReport(
        history.id, history.workflow, history.status, len(steps), 0, "not run", divergence
    )


def _outcome(answer: dict[str, Any], stopped_at: Op | None) -> str:
    """What the replayed invocation came to, in words."""
    outcome = answer.get("outcome")
    if outcome == "aborted" and stopped_at is not None:
        return f"the history ends at {stopped_at.get('stepId')} ({stopped_at.get('op')})"
    if outcome == "suspended":
        waits = ", ".join(str(w.get("stepId")) for w in answer.get("waits") or [])
        return f"waits on {waits}"
    if outcome == "failed":
        error = answer.get("error") or {}
        return f"fails: {error.get('code')} {error.get('name')}: {error.get('message')}"
    return "completes" if outcome == "completed" else str(outcome)
