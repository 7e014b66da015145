"""What an invocation answered, parsed and checked once at the edge (docs/protocol.md section
1.2). Pure. (Was `core/outcomes`.)"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ezgh_engine.clock import parse_iso
from ezgh_engine.core import validation
from ezgh_engine.core.models import RunError
from ezgh_engine.core.protocol_rules import THROTTLED_OUTCOME

MAX_SLEEP = timedelta(days=365)
WAIT_KINDS = frozenset({"sleep", "callback", "invoke", "message", "run"})


class MalformedOutcome(ValueError):
    """The app's answer is not an outcome of the protocol."""


@dataclass(frozen=True)
class SleepWait:
    step_id: str
    name: str
    wake_at: datetime


@dataclass(frozen=True)
class Wait:
    """A wait other than a sleep: `callback`, `invoke`, `message`, or `run` (a retry, or a
    parallel step when `parallel`)."""

    step_id: str
    name: str
    kind: str
    parallel: bool = False
    workflow: str | None = None
    input: Any = None
    app: str | None = None  # invoke: another app of the project (ID, slug or name)
    queue_id: str | None = None
    key: str | None = None
    timeout: timedelta | None = None


@dataclass(frozen=True)
class Outcome:
    kind: str  # completed | failed | suspended | aborted | cancelled | branch | throttled
    deployment_id: str | None = None
    output: Any = None
    error: RunError | None = None
    sleeps: tuple[SleepWait, ...] = ()
    waits: tuple[Wait, ...] = ()
    step_id: str | None = None  # branch: the step the branch invocation ran
    retry_after: float | None = None  # throttled: the seconds the engine's busy answer asked


def _sleep(wait: dict[str, Any], now: datetime) -> SleepWait:
    step_id = validation.check_step_id(wait.get("stepId"))
    name = validation.check_step_name(wait.get("name"))
    if "seconds" in wait:
        seconds = wait["seconds"]
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise MalformedOutcome("sleep seconds must be a number")
        if not math.isfinite(seconds) or seconds < 0:
            raise MalformedOutcome("sleep seconds must be finite and not negative")
        wake_at = now + timedelta(seconds=min(float(seconds), MAX_SLEEP.total_seconds() + 1))
    elif isinstance(wait.get("until"), str):
        wake_at = parse_iso(wait["until"])
    else:
        raise MalformedOutcome("a sleep needs seconds or until")
    return SleepWait(step_id, name, wake_at)


MAX_MESSAGE_WAIT = timedelta(days=30)
_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,256}")
_WORKFLOW = re.compile(r"[A-Za-z0-9_-]{1,64}")
_APP_REF = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _wait(wait: dict[str, Any]) -> Wait:
    step_id = validation.check_step_id(wait.get("stepId"))
    name = validation.check_step_name(wait.get("name"))
    kind = wait["kind"]
    if kind == "invoke":
        workflow = wait.get("workflow")
        if not isinstance(workflow, str) or not _WORKFLOW.fullmatch(workflow):
            raise MalformedOutcome("invoke needs a workflow name")
        app = wait.get("app")
        if app is not None and (not isinstance(app, str) or not _APP_REF.fullmatch(app)):
            raise MalformedOutcome("invoke app must be an app's ID, slug or name")
        return Wait(step_id, name, kind, workflow=workflow, input=wait.get("input"), app=app)
    if kind == "message":
        queue_id, key, seconds = wait.get("queueId"), wait.get("key"), wait.get("timeoutSeconds")
        if not isinstance(queue_id, str) or not queue_id or "#" in queue_id:
            raise MalformedOutcome("message needs a queueId")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise MalformedOutcome("message key must match ^[A-Za-z0-9_.:-]{1,256}$")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise MalformedOutcome("message needs timeoutSeconds")
        if not 1 <= seconds <= MAX_MESSAGE_WAIT.total_seconds():
            raise MalformedOutcome("message timeoutSeconds must be 1 to 2592000")
        return Wait(
            step_id,
            name,
            kind,
            queue_id=queue_id,
            key=key,
            timeout=timedelta(seconds=float(seconds)),
        )
    return Wait(step_id, name, kind, parallel=kind == "run" and bool(wait.get("parallel")))


def _retry_after(value: Any) -> float | None:
    """A `throttled` answer's `retryAfter`: seconds (null, or not a finite number not below
    0, is none)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def parse(answer: dict[str, Any], now: datetime) -> Outcome:
    """Check an app's answer; `MalformedOutcome` when it is not one the protocol allows."""
    kind = answer.get("outcome")
    deployment = answer.get("deploymentId")
    deployment = deployment if isinstance(deployment, str) else None
    if kind == "completed":
        if "output" not in answer:
            raise MalformedOutcome("completed without output")
        return Outcome("completed", deployment, output=answer["output"])
    if kind == "failed":
        if not isinstance(answer.get("error"), dict):
            raise MalformedOutcome("failed without an error object")
        return Outcome("failed", deployment, error=RunError.from_api(answer["error"]))
    if kind in ("aborted", "cancelled"):
        return Outcome(kind, deployment)
    if kind == THROTTLED_OUTCOME:
        return Outcome(kind, deployment, retry_after=_retry_after(answer.get("retryAfter")))
    if kind == "branch":
        return Outcome(kind, deployment, step_id=str(answer.get("stepId") or ""))
    if kind == "suspended":
        waits = answer.get("waits")
        if not isinstance(waits, list) or not waits:
            raise MalformedOutcome("suspended without waits")
        sleeps, others = [], []
        for wait in waits:
            if not isinstance(wait, dict) or wait.get("kind") not in WAIT_KINDS:
                raise MalformedOutcome(f"unsupported wait: {wait!r}"[:200])
            try:
                if wait["kind"] == "sleep":
                    sleeps.append(_sleep(wait, now))
                else:
                    others.append(_wait(wait))
            except validation.ValidationError as exc:
                raise MalformedOutcome(exc.message) from None
        return Outcome("suspended", deployment, sleeps=tuple(sleeps), waits=tuple(others))
    raise MalformedOutcome(f"unknown outcome {kind!r}")
