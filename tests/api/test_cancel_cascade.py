"""A parent's cancel racing its child's end (once an intermittent failure of
tests/e2e/test_control.py::test_cancelling_during_a_wait_runs_cleanup[child]).

CancelRun makes the parent `cancelling` and cancels its waiting child; the child's
invocation may end it `cancelled` before the parent's invocation sends its `cancel` op for
the wait. The child's end then ended the parent's wait `failed` (`workflows.child_cancelled`),
as if the child had been cancelled on its own. Played here in that order, deterministically.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.service import waits

from tests.api.steps_helpers import stored_run
from tests.api.test_races import _run_of

WAIT = {"name": "sub", "kind": "invoke", "status": "waiting", "attempt": 1, "order": "1"}


def _parent_waiting_on_a_child() -> tuple[Any, Any]:
    parent = stored_run()
    child = _run_of(
        parent.project_id, parent.app_id, parent_run_id=parent.id, parent_step_id="sub#1"
    )
    assert ws.transact([ws.step_put(parent.id, "sub#1", {**WAIT, "childRunId": child.id})])
    return parent, child


def _child_ends(child_id: str, status: str) -> None:
    """The child's end as the stream sees it (its new image)."""
    child = runs_store.get_run(child_id, with_steps=False)
    assert child is not None
    ended = items.run_values(child)
    ended["status"] = status
    waits.on_run_ended(ended)


def test_a_child_cancelled_by_its_parents_cancel_ends_the_wait_cancelled(aws_env: None) -> None:
    parent, child = _parent_waiting_on_a_child()
    control.request_cancel(parent, at=clock.iso(clock.now()))
    _child_ends(child.id, "cancelled")  # before the parent's invocation sends its cancel op
    done = runs_store.get_run(parent.id)
    assert done is not None and done.status == "cancelling"
    [step] = done.steps
    assert step.status == "cancelled", step
    assert step.error is not None and step.error.code == "workflows.cancelled"


def test_a_child_cancelled_on_its_own_still_fails_the_wait(aws_env: None) -> None:
    """The parent was not cancelled: the child's cancel is the child's own outcome."""
    parent, child = _parent_waiting_on_a_child()
    _child_ends(child.id, "cancelled")
    done = runs_store.get_run(parent.id)
    assert done is not None and done.status == "running"
    [step] = done.steps
    assert step.status == "failed"
    assert step.error is not None and step.error.code == "workflows.child_cancelled"
