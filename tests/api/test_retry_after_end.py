"""RetryRun right after a run ended, while that end's cleanup is still under way.

A run ends with one write (the run item, `timedOut`, `failed` or `cancelled`); its pending
steps are cancelled after it, one conditional write each (`waits.cancel_leftovers`). A
RetryRun that reads the run in between saw a step `sleeping` that is `cancelled` when its
own write lands: it answered 409 "changed meanwhile", though nothing the caller did was
wrong. And a cleanup that read the run after the RetryRun cancelled the new attempt's steps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws, runs_store
from ezgh_engine.service import timers, waits

from tests.api.conftest import Project
from tests.api.steps_helpers import stored_run
from tests.api.test_protocol_races import _sleeping


def _timed_out_mid_cleanup(project: Project, monkeypatch: pytest.MonkeyPatch) -> str:
    """A run that slept past its time limit and is ended `timedOut`, its sleeping step not
    yet cancelled (the end's cleanup has not run)."""
    run = stored_run(project_id=project.project_id, deadline_at=clock.iso(clock.now()))
    _sleeping(run.id, clock.iso(clock.now() + timedelta(days=2)))
    with monkeypatch.context() as patch:
        patch.setattr(waits, "cancel_leftovers", lambda run_id: None)
        assert timers.time_out(run.id)
    ended = runs_store.get_run(run.id)
    assert ended is not None and ended.status == "timedOut"
    assert [s.status for s in ended.steps] == ["sleeping"]
    return run.id


def test_a_retry_that_meets_the_ends_cleanup_still_retries(
    project: Project, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    run_id = _timed_out_mid_cleanup(project, monkeypatch)
    landed: list[str] = []

    def cleanup_lands_first(service: str, operation: str, params: dict[str, Any]) -> None:
        """The end's cleanup cancels the step between RetryRun's read and its write."""
        if operation == "TransactWriteItems" and not landed:
            landed.append(operation)
            waits.cancel_leftovers(run_id)

    stop = aws.intercept(cleanup_lands_first)
    try:
        answer = project.call("POST", f"/runs/{run_id}/retry")
    finally:
        stop()
    assert landed  # the race happened
    assert answer.status == 200, answer.body
    retried = runs_store.get_run(run_id)
    assert retried is not None and retried.status == "running" and retried.attempt == 2
    assert not retried.steps  # the sleep is recorded afresh by the new attempt


def test_a_cleanup_that_comes_after_the_retry_cancels_nothing(
    project: Project, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    run_id = _timed_out_mid_cleanup(project, monkeypatch)
    assert project.call("POST", f"/runs/{run_id}/retry").status == 200
    _sleeping(run_id, clock.iso(clock.now() + timedelta(days=2)))  # the new attempt sleeps
    waits.cancel_leftovers(run_id)  # the first attempt's end's cleanup, late
    after = runs_store.get_run(run_id)
    assert after is not None and after.status == "running"
    assert [s.status for s in after.steps] == ["sleeping"]
