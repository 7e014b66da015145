"""What happened to a run, read from one committed change of its items (pure).

The `runs` table's stream shows each committed change of a run item or a step item with its
image before and after. `facts_of` turns one change into the facts an operator counts and a
developer reads: a run started or ended, a step ended (how long it took, which attempt), a
step is to be retried, a step began to wait. The invoker adds the one fact the table does not
show as it happens: an invocation and how long the app took (`invocation`). Each fact is
emitted once where it is known (`ezgh_engine.observability`): as metrics, a log line, a
`ezgh dev` line and the run's trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ezgh_engine import clock
from ezgh_engine.core.protocol_rules import RUN_ENDED_STATUSES, STEP_ENDED_STATUSES

RUN_STARTED = "run.started"
RUN_ENDED = "run.ended"
STEP_ENDED = "step.ended"
STEP_RETRYING = "step.retrying"
STEP_WAITING = "step.waiting"
INVOCATION = "invocation"
KINDS = (RUN_STARTED, RUN_ENDED, STEP_ENDED, STEP_RETRYING, STEP_WAITING, INVOCATION)

WAITING_STATUSES = frozenset({"sleeping", "waiting"})


@dataclass(frozen=True)
class Fact:
    """One thing that happened to a run. `status`: the run's or the step's new status, or an
    invocation's result (its outcome, or `unreachable`, `timedOut`, `invalid`);
    `started_at`/`at`: when the thing began and when it ended (or now, for a start)."""

    kind: str
    run_id: str
    at: str
    status: str = ""
    started_at: str | None = None
    created_at: str | None = None  # the run's (its trace ID is derived from it)
    app_id: str | None = None
    workflow: str | None = None
    step_id: str | None = None
    step_name: str | None = None
    step_kind: str | None = None
    attempt: int = 1
    invocation_id: str | None = None
    error_code: str | None = None
    until: str | None = None  # a retry's or a wait's wake time

    @property
    def duration_ms(self) -> float | None:
        """From `started_at` to `at`, when both are known."""
        if not self.started_at:
            return None
        return max(0.0, (_time(self.at) - _time(self.started_at)).total_seconds() * 1000)

    @property
    def ids(self) -> dict[str, str]:
        """The IDs a log line of this fact carries."""
        found = {
            "run_id": self.run_id,
            "app_id": self.app_id,
            "step_id": self.step_id,
            "invocation_id": self.invocation_id,
        }
        return {k: v for k, v in found.items() if v}


def _time(text: str) -> datetime:
    return clock.parse_iso(text)


def _status(image: dict[str, Any] | None) -> str | None:
    return str(image["status"]) if image and image.get("status") is not None else None


def _error_code(image: dict[str, Any]) -> str | None:
    error = image.get("error")
    return str(error.get("code")) if isinstance(error, dict) and error.get("code") else None


def facts_of(old: dict[str, Any] | None, new: dict[str, Any] | None, *, now: str) -> list[Fact]:
    """The facts one change of a run or step item shows (plain attribute values; `now`:
    when the change is read, for a start whose item says no time)."""
    item = new or old or {}
    if new is None:
        return []  # a removal: nothing happened to the run
    if item.get("type") == "run":
        return _run_facts(old, new, now)
    if item.get("type") == "step":
        return _step_facts(old, new, now)
    return []


def _run_base(new: dict[str, Any], kind: str, at: str) -> Fact:
    return Fact(
        kind=kind,
        run_id=str(new.get("id")),
        at=at,
        status=str(new.get("status") or ""),
        created_at=new.get("createdAt"),
        app_id=new.get("appId"),
        workflow=new.get("workflow"),
        attempt=int(new.get("attempt") or 1),
    )


def _run_facts(old: dict[str, Any] | None, new: dict[str, Any], now: str) -> list[Fact]:
    facts = []
    if old is None or int(old.get("attempt") or 1) < int(new.get("attempt") or 1):
        started = str(new.get("startedAt") or new.get("createdAt") or now)
        facts.append(_run_base(new, RUN_STARTED, started))
    was, status = _status(old), _status(new)
    if status in RUN_ENDED_STATUSES and was not in RUN_ENDED_STATUSES:
        ended = _run_base(new, RUN_ENDED, str(new.get("endedAt") or now))
        since = str(new.get("startedAt") or new.get("createdAt") or "") or None
        facts.append(_with(ended, started_at=since, error_code=_error_code(new)))
    return facts


def _step_base(new: dict[str, Any], kind: str, at: str) -> Fact:
    return Fact(
        kind=kind,
        run_id=str(new.get("runId")),
        at=at,
        status=str(new.get("status") or ""),
        step_id=new.get("stepId"),
        step_name=new.get("name"),
        step_kind=new.get("kind"),
        attempt=int(new.get("attempt") or 1),
        started_at=new.get("startedAt"),
    )


def _step_facts(old: dict[str, Any] | None, new: dict[str, Any], now: str) -> list[Fact]:
    was, status = _status(old), _status(new)
    moved = was != status or (old is not None and old.get("attempt") != new.get("attempt"))
    if not moved:
        return []
    if status in STEP_ENDED_STATUSES and was not in STEP_ENDED_STATUSES:
        ended = _step_base(new, STEP_ENDED, str(new.get("endedAt") or now))
        return [_with(ended, error_code=_error_code(new))]
    if status == "retrying":
        # The attempt that failed ran from its start to now; `wakeAt` is the next one's time.
        failed = _step_base(new, STEP_RETRYING, str(new.get("endedAt") or now))
        return [_with(failed, until=new.get("wakeAt"), error_code=_error_code(new))]
    if status in WAITING_STATUSES and was not in WAITING_STATUSES:
        return [_with(_step_base(new, STEP_WAITING, now), until=new.get("wakeAt"))]
    return []


def _with(fact: Fact, **changes: Any) -> Fact:
    from dataclasses import replace

    return replace(fact, **changes)
