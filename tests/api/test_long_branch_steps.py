"""A parallel step (a branch invocation's step) longer than the invoke timeout: it fails
once, naming the limit, and never runs again beside itself because the invoker stopped
waiting, as a main invocation's step does (tests/api/test_long_steps.py).

Before: the branch invoker's read timeout was a delivery failure like any other: the step's
lease was released after a 2 s backoff, the next branch invocation found the step `running`
and started attempt 2 while the first body still ran, again and again, and the step ended
`workflows.app_unreachable` after the delivery budget.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import ddb, push, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core.models import App
from ezgh_engine.errors import StaleInvocation
from ezgh_engine.service import branches, steps, stream

from tests.api.test_branch_outcomes import STEP, _app, _run_with_branch


class LongBranchApp:
    """A branch invocation that starts its step (the SDK's replay: attempt n on the n-th
    request) and is still in its body, `body_seconds` long, when the invoker's call times out."""

    def __init__(self, body_seconds: float) -> None:
        self.body_seconds = body_seconds
        self.requests = 0
        self.bodies_started = 0
        self.tokens: list[str] = []

    def __call__(self, app: App, request: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        token = request["api"]["token"]
        self.tokens.append(token)
        ops = [{"op": "start", "stepId": STEP, "name": "fan-0", "attempt": self.requests}]
        if steps.apply_ops(token, {"ops": ops})["results"][0]["result"] == "started":
            self.bodies_started += 1
        skipping = clock.get_clock()
        assert isinstance(skipping, clock.SkipClock)
        skipping.advance(timedelta(seconds=self.body_seconds))
        raise push.AppTimedOut("app did not answer within 300 s")


def _step(run_id: str) -> dict[str, Any]:
    return ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}


def _deliver(run_id: str, skip_clock: clock.SkipClock, times: int) -> None:
    """The branch message, handled, and handled again when its `Retry` is due."""
    for _ in range(times):
        retry = branches.invoke_branch(run_id, STEP)
        if retry is None:
            return
        skip_clock.advance(timedelta(seconds=retry.after_seconds))


def test_a_branch_step_longer_than_the_invoke_timeout_fails_once_naming_the_limit(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    app = LongBranchApp(body_seconds=301)
    monkeypatch.setattr(branches, "invoke_app", app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    run_id = _run_with_branch()
    _deliver(run_id, skip_clock, times=10)
    step = _step(run_id)
    assert step["status"] == "failed", step
    assert step["error"]["code"] == "workflows.step_timed_out", step["error"]
    assert app.bodies_started == 1  # never a second attempt beside the first
    late = {"ops": [{"op": "complete", "stepId": STEP, "output": "late"}]}
    with contextlib.suppress(StaleInvocation):  # the timed-out invocation records nothing
        steps.apply_ops(app.tokens[0], late)
    after = _step(run_id)
    assert after["status"] == "failed" and after["error"] == step["error"]
    # The outbox sees the parallel step end and asks for the run: the main invocation replays.
    ended = {
        "OldImage": ddb.to_item({**after, "status": "running"}),
        "NewImage": ddb.to_item(after),
    }
    stream.handle_record({"eventName": "MODIFY", "dynamodb": ended})
    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None and run.invoke_seq > run.handled_seq


def test_a_branch_step_started_late_keeps_the_lease_and_records_its_end(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """Less than half the limit into its body when the call timed out (a cold start took
    the rest): not failed, the step's lease held until it had the whole limit, its body's
    end recorded; no other attempt meanwhile."""
    app = LongBranchApp(body_seconds=10)
    monkeypatch.setattr(branches, "invoke_app", app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    run_id = _run_with_branch()
    retry = branches.invoke_branch(run_id, STEP)
    assert retry is not None and retry.after_seconds >= 290
    assert _step(run_id)["status"] == "running"
    skip_clock.advance(timedelta(seconds=30))
    assert branches.invoke_branch(run_id, STEP) is not None  # held: the lease is the first's
    late = {"ops": [{"op": "complete", "stepId": STEP, "output": "done"}]}
    assert steps.apply_ops(app.tokens[0], late)["results"][0]["result"] == "ok"
    assert _step(run_id)["status"] == "completed" and app.bodies_started == 1
