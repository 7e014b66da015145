"""The facts one committed change of a run or step item shows (`core.run_facts`), and the
`ezgh dev` line of each (`observability.progress`)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.core import run_facts as rf
from ezgh_engine.observability import progress

NOW = "2026-12-05T10:00:09.000Z"


def run(**changes: Any) -> dict[str, Any]:
    item = {
        "type": "run",
        "id": "r1",
        "appId": "a1",
        "workflow": "charge",
        "status": "running",
        "attempt": 1,
        "createdAt": "2026-12-05T10:00:00.000Z",
        "startedAt": "2026-12-05T10:00:00.000Z",
    }
    return {**item, **changes}


def step(**changes: Any) -> dict[str, Any]:
    item = {
        "type": "step",
        "runId": "r1",
        "stepId": "pay#1",
        "name": "pay",
        "kind": "run",
        "status": "running",
        "attempt": 1,
        "startedAt": "2026-12-05T10:00:01.000Z",
    }
    return {**item, **changes}


def kinds(old: Any, new: Any) -> list[str]:
    return [f.kind for f in rf.facts_of(old, new, now=NOW)]


def test_a_run_starts_once_and_ends_once() -> None:
    (started,) = rf.facts_of(None, run(), now=NOW)
    assert started.kind == rf.RUN_STARTED and started.at == "2026-12-05T10:00:00.000Z"
    assert kinds(run(), run(leaseUntil=5)) == []  # a lease taken: nothing to show
    ended_item = run(status="failed", endedAt="2026-12-05T10:00:03.500Z", error={"code": "user"})
    (ended,) = rf.facts_of(run(), ended_item, now=NOW)
    assert (ended.kind, ended.status, ended.error_code) == (rf.RUN_ENDED, "failed", "user")
    assert ended.duration_ms == 3500
    assert kinds(ended_item, {**ended_item, "ttl": 9}) == []  # already ended
    assert kinds(ended_item, run(attempt=2)) == [rf.RUN_STARTED]  # RetryRun
    assert kinds(run(), None) == []  # a removal


def test_a_step_ends_is_retried_and_waits() -> None:
    done = step(status="completed", endedAt="2026-12-05T10:00:01.250Z")
    (ended,) = rf.facts_of(step(), done, now=NOW)
    assert (ended.kind, ended.step_id, ended.duration_ms) == (rf.STEP_ENDED, "pay#1", 250)
    assert kinds(None, done) == [rf.STEP_ENDED]  # an inline step's item is made at its end
    assert kinds(done, {**done, "evtId": "x"}) == []
    retry = step(status="retrying", wakeAt="2026-12-05T10:00:03.000Z", error={"code": "user"})
    (retrying,) = rf.facts_of(step(), retry, now=NOW)
    assert (retrying.kind, retrying.until, retrying.attempt) == (
        rf.STEP_RETRYING,
        "2026-12-05T10:00:03.000Z",
        1,
    )
    sleeping = step(kind="sleep", status="sleeping", wakeAt="2026-12-08T10:00:00.000Z")
    (waits,) = rf.facts_of(None, sleeping, now=NOW)
    assert (waits.kind, waits.until) == (rf.STEP_WAITING, "2026-12-08T10:00:00.000Z")
    assert kinds(sleeping, {**sleeping, "wk": "m"}) == []


def test_each_fact_has_one_line() -> None:
    ended = rf.facts_of(step(), step(status="completed", endedAt=NOW), now=NOW)[0]
    assert progress.line(ended) == "run r1 step      pay#1 run completed in 8.0 s"
    long_sleep = rf.Fact(
        rf.STEP_ENDED,
        "r1",
        "2026-12-08T10:00:01.000Z",
        status="completed",
        started_at="2026-12-05T10:00:01.000Z",
        step_id="nap#1",
        step_kind="sleep",
    )
    assert progress.line(long_sleep).endswith("nap#1 sleep completed in 3 d 0 h 0 min")
    invoked = rf.Fact(rf.INVOCATION, "r1", NOW, status="suspended", started_at=NOW)
    assert progress.line(invoked, app_name="billing") == (
        "run r1 invoked   app billing answered suspended in 0 ms"
    )
    down = rf.Fact(rf.INVOCATION, "r1", NOW, status="unreachable", started_at=NOW)
    assert "app billing was unreachable" in progress.line(down, app_name="billing")
