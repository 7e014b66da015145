"""What an invocation answered, parsed and checked (docs/protocol.md section 1.2). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ezgh_engine.clock import parse_iso
from ezgh_engine.core import validation
from ezgh_engine.core.models import RunError

MAX_SLEEP = timedelta(days=365)


class MalformedOutcome(ValueError):
    """The app's answer is not an outcome of the protocol."""


@dataclass(frozen=True)
class SleepWait:
    step_id: str
    name: str
    wake_at: datetime


@dataclass(frozen=True)
class Outcome:
    kind: str  # completed | failed | suspended | aborted | cancelled
    deployment_id: str | None = None
    output: Any = None
    error: RunError | None = None
    sleeps: tuple[SleepWait, ...] = ()


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
    if kind == "suspended":
        waits = answer.get("waits")
        if not isinstance(waits, list) or not waits:
            raise MalformedOutcome("suspended without waits")
        sleeps = []
        for wait in waits:
            if not isinstance(wait, dict) or wait.get("kind") != "sleep":
                raise MalformedOutcome(f"unsupported wait: {wait!r}"[:200])
            try:
                sleeps.append(_sleep(wait, now))
            except validation.ValidationError as exc:
                raise MalformedOutcome(exc.message) from None
        return Outcome("suspended", deployment, sleeps=tuple(sleeps))
    raise MalformedOutcome(f"unknown outcome {kind!r}")
