"""One line per fact for `ezgh dev`'s terminal (pure: a fact in, a line out).

run 0193… started   billing/charge (attempt 1)
run 0193… invoked   app billing answered suspended in 41 ms
run 0193… step      charge#1 run completed in 12 ms
run 0193… step      charge#1 run failed (attempt 1), retry at 12:00:03Z: ValueError
run 0193… waits     nap#1 sleep until 12:05:00Z
run 0193… ended     failed after 3.2 s: user
"""

from __future__ import annotations

from ezgh_engine.core import run_facts as rf


def _duration(ms: float | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes = int(ms // 60_000)
    if minutes < 60:
        return f"{minutes} min {int(ms % 60_000 // 1000)} s"
    hours = minutes // 60
    if hours < 24:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h {minutes % 60} min"


def _clock(iso: str | None) -> str:
    """A time as `2026-12-05 09:09:28Z` (seconds, no fraction)."""
    return f"{iso[:10]} {iso[11:19]}Z" if iso and len(iso) >= 19 else str(iso)


def _step(fact: rf.Fact) -> str:
    return f"{fact.step_id} {fact.step_kind or 'step'}"


def _error(fact: rf.Fact) -> str:
    return f": {fact.error_code}" if fact.error_code else ""


def line(fact: rf.Fact, *, app_name: str | None = None) -> str:
    """The line `ezgh dev` prints for `fact`."""
    head = f"run {fact.run_id} "
    if fact.kind == rf.RUN_STARTED:
        what = f"{fact.workflow} (attempt {fact.attempt})"
        return head + f"started   {what}"
    if fact.kind == rf.RUN_ENDED:
        return head + f"ended     {fact.status} after {_duration(fact.duration_ms)}{_error(fact)}"
    if fact.kind == rf.INVOCATION:
        app = f"app {app_name}" if app_name else "app"
        answered = "answered " if fact.status not in ("unreachable", "timedOut") else "was "
        took = _duration(fact.duration_ms)
        return head + f"invoked   {app} {answered}{fact.status} in {took}"
    if fact.kind == rf.STEP_ENDED:
        took = _duration(fact.duration_ms)
        attempt = f" (attempt {fact.attempt})" if fact.attempt > 1 else ""
        return head + f"step      {_step(fact)} {fact.status}{attempt} in {took}{_error(fact)}"
    if fact.kind == rf.STEP_RETRYING:
        when = _clock(fact.until)
        return (
            head
            + f"step      {_step(fact)} failed (attempt {fact.attempt}), retry at {when}{_error(fact)}"
        )
    if fact.kind == rf.STEP_WAITING:
        until = f" until {_clock(fact.until)}" if fact.until else ""
        return head + f"waits     {_step(fact)}{until}"
    return head + fact.kind
