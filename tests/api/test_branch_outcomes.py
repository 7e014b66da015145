"""Regression (found by the fault suite, seed 8): a branch invocation that ran its
step must not fail it as `BranchNotRun` because the step is pending again when it answers.

The race: the branch invocation starts its step, the body fails, `fail` (retryable) commits,
the retry timer comes due (the step is `waiting` again, a new branch message on its way)
before the invocation answers. `invoke_branch` saw a `waiting` step and failed it with
`workflows.nondeterminism`/`BranchNotRun`, failing the run. A step the invocation started
(its attempt moved) is now left to its next branch invocation; one it never started still
fails as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine import clock, ids
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.config import settings
from ezgh_engine.core.models import App
from ezgh_engine.errors import StaleInvocation
from ezgh_engine.service import branches, steps, waits

from tests.api.test_ops_stuck_runs import _put, _run

STEP = "fan-0#1"


def _branch_step(run_id: str) -> None:
    _put(
        {
            "pk": items.run_pk(run_id),
            "sk": items.STEP_PREFIX + STEP,
            "type": "step",
            "runId": run_id,
            "stepId": STEP,
            "name": "fan-0",
            "kind": "run",
            "status": "waiting",
            "branch": True,
            "branchEpoch": 0,
            "branchLeaseUntil": 0,
            "order": ids.time_ordered_id(),
        }
    )


def _app(project_id: str) -> App:
    return App(
        id="a",
        slug="wfa_x",
        org_id="o",
        project_id=project_id,
        name="app",
        kind="push",
        url="https://app.example.test",
        status="synced",
        workflows=("onboarding",),
        signing_key="k",
        created_at=clock.iso(clock.now()),
    )


def _answer_branch(monkeypatch: pytest.MonkeyPatch, run_id: str, *, ran: bool) -> None:
    """The app: with `ran`, start the step and fail it, then its retry comes due, as a real
    branch invocation racing its retry timer would leave it; answer `branch`."""

    def invoke_app(app: App, request: dict[str, Any]) -> dict[str, Any]:
        if ran:
            step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
            _put({**step, "status": "waiting", "attempt": int(step.get("attempt", 0)) + 1})
        return {"protocol": "1.2", "deploymentId": None, "outcome": "branch", "stepId": STEP}

    monkeypatch.setattr(branches, "invoke_app", invoke_app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))


def _run_with_branch() -> str:
    run = _run(invoke_seq=2, handled_seq=2, lease_until_ms=0)
    _put(items.run_values(run))
    _branch_step(run.id)
    return run.id


def test_a_branch_step_that_ran_and_is_pending_again_is_not_failed(aws_env, monkeypatch):
    run_id = _run_with_branch()
    _answer_branch(monkeypatch, run_id, ran=True)
    assert branches.invoke_branch(run_id, STEP) is None
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    assert step["status"] == "waiting" and "error" not in step
    assert int(step["branchLeaseUntil"]) == 0  # released: its next branch message may run it


def test_a_branch_step_the_invocation_never_reached_still_fails(aws_env, monkeypatch):
    run_id = _run_with_branch()
    _answer_branch(monkeypatch, run_id, ran=False)
    branches.invoke_branch(run_id, STEP)
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    assert step["status"] == "failed"
    assert step["error"]["name"] == "BranchNotRun"


def test_a_branch_invocation_that_aborts_leaves_its_step_to_the_next_delivery(aws_env, monkeypatch):
    """Regression (the fault campaign's `lost=2` under a slow harness, lost17): an `aborted`
    answer says the SDK's step call was refused as stale (this delivery's hold on the step
    ran out or was taken over, or the run ended), not that the branch never reached its
    step. `invoke_branch` failed the step as `BranchNotRun` and so the run; the main
    invocation's `aborted` is invoked again. Now the step is released to the branch's next
    delivery."""
    run_id = _run_with_branch()

    def invoke_app(app: App, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "protocol": "1.4",
            "deploymentId": None,
            "outcome": "aborted",
            "reason": "409 invalid_state: the branch invocation has answered or its lease ended",
        }

    monkeypatch.setattr(branches, "invoke_app", invoke_app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    retry = branches.invoke_branch(run_id, STEP)
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    # Started by the lease take (a crashed attempt's way): not failed, and released.
    assert step["status"] == "running" and "error" not in step
    assert int(step["branchLeaseUntil"]) == 0  # released: the message's return takes it
    assert retry is not None  # the branch message comes back


def test_a_branch_step_s_large_output_is_kept_when_the_run_s_epoch_is_ahead(aws_env, monkeypatch):
    """Found on the way (lost17): before storing an output too large for the step's item,
    the steps function checks the invocation; for a branch it compared the run's lease epoch
    with the branch's own epoch, two unrelated counts, and refused the `complete` as taken
    over whenever the run had been invoked more often than the step delivered (here run
    epoch 2, branch epoch 1): the branch answered `aborted`, and its step failed."""
    run_id = _run_with_branch()  # run epoch 2; the step's first delivery takes branch epoch 1
    answers: list[Any] = []

    def invoke_app(app: App, request: dict[str, Any]) -> dict[str, Any]:
        token = request["api"]["token"]
        start = {"op": "start", "stepId": STEP, "name": "fan-0", "attempt": 1}
        answers.append(steps.apply_ops(token, {"ops": [start]}))
        large = "x" * (settings().payload_inline_bytes + 1)
        answers.append(
            steps.apply_ops(token, {"ops": [{"op": "complete", "stepId": STEP, "output": large}]})
        )
        return {"protocol": "1.4", "deploymentId": None, "outcome": "branch", "stepId": STEP}

    monkeypatch.setattr(branches, "invoke_app", invoke_app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    assert branches.invoke_branch(run_id, STEP) is None
    assert answers[1] == {"results": [{"stepId": STEP, "result": "ok"}]}
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    assert step["status"] == "completed" and step.get("outputRef")


def _end_after_run_ended(monkeypatch: pytest.MonkeyPatch, run_id: str, *, cleaned: bool) -> Any:
    """The app starts the branch's step; its run is cancelled (and, with `cleaned`, its
    pending steps cancelled by the run's cleanup) while the body runs; then the app sends
    the step's `complete`. Answers that `complete`'s answer."""
    answers: list[Any] = []

    def invoke_app(app: App, request: dict[str, Any]) -> dict[str, Any]:
        token = request["api"]["token"]
        start = {"op": "start", "stepId": STEP, "name": "fan-0", "attempt": 1}
        answers.append(steps.apply_ops(token, {"ops": [start]}))
        run = ws.get(items.run_pk(run_id), "RUN") or {}
        _put({**run, "status": "cancelled", "endedAt": clock.iso(clock.now())})
        if cleaned:
            waits.cancel_leftovers(run_id)
        try:
            answers.append(
                steps.apply_ops(token, {"ops": [{"op": "complete", "stepId": STEP, "output": "1"}]})
            )
        except StaleInvocation as exc:
            answers.append(exc)
        return {"protocol": "1.4", "deploymentId": None, "outcome": "branch", "stepId": STEP}

    monkeypatch.setattr(branches, "invoke_app", invoke_app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    assert branches.invoke_branch(run_id, STEP) is None
    assert answers[0]["results"][0]["result"] == "started"
    return answers[1]


def test_a_branch_end_that_lands_before_its_ended_run_s_cleanup_is_kept(aws_env, monkeypatch):
    """A branch's step end reads no run: it is written under the branch lease on the step's
    own conditions. Landing after its run ended but before the run's cleanup, it records the
    body that ran (a fact), and the cleanup, which cancels only what is still pending on the
    status it read, leaves it; the run stays ended."""
    run_id = _run_with_branch()
    answer = _end_after_run_ended(monkeypatch, run_id, cleaned=False)
    assert answer == {"results": [{"stepId": STEP, "result": "ok"}]}
    waits.cancel_leftovers(run_id)
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    assert step["status"] == "completed" and step.get("output")
    assert int(step["branchLeaseUntil"]) == 0
    assert (ws.get(items.run_pk(run_id), "RUN") or {})["status"] == "cancelled"


def test_a_branch_end_after_its_run_s_cleanup_changes_nothing(aws_env, monkeypatch):
    """The same end after the cleanup cancelled the step: its condition refuses it, and the
    answer says what is recorded (not `ok`); the step stays `cancelled`."""
    run_id = _run_with_branch()
    answer = _end_after_run_ended(monkeypatch, run_id, cleaned=True)
    assert isinstance(answer, StaleInvocation) or answer["results"][0]["result"] != "ok"
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    assert step["status"] == "cancelled" and "output" not in step
