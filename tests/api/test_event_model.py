"""ListRunEvents reads a run's events from the items the engine's own writes make, through the
one event model (core/events): a run started (the run item's `startEvtId`), a step
completed by the app's step call (the step's `evtId`), the invocation that ended the run (its
start, its outcome and the run's end carried by the run item's `lastOut`, the commit of that
outcome), and a run ended by its time limit (a plain event item)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext
from ezgh_engine import clock
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import events
from ezgh_engine.core.models import Run

from tests.api.conftest import make_event
from tests.api.steps_helpers import new_run


class _App:
    kind, name, notifications, protocol = "push", "app", None, "1.5"


def _new_run() -> Run:
    run = new_run()
    runs_store.create_run(run, now_epoch_s=int(clock.now().timestamp()))
    return run


def _step_call(token: str, op: dict[str, Any]) -> None:
    from functions.steps.handler import handler

    body = {"deploymentId": "dep-1", "ops": [op]}
    event = make_event(
        "POST", "/v1/invocations/steps", body=body, headers={"authorization": f"Bearer {token}"}
    )
    answer = handler(event, LambdaContext())
    assert answer["statusCode"] == 200, json.loads(answer["body"])


def _app_with_one_step(app: Any, request: dict[str, Any]) -> dict[str, Any]:
    """A push app whose workflow runs step `a` and completes with its output."""
    token = request["api"]["token"]
    _step_call(token, {"op": "start", "stepId": "a#1", "name": "a", "attempt": 1})
    _step_call(token, {"op": "complete", "stepId": "a#1", "output": 1})
    return {"protocol": "1.4", "outcome": "completed", "output": 1, "deploymentId": "dep-1"}


def _listed(run: Run) -> list[dict[str, Any]]:
    listed, cursor = runs_store.list_events(run.id, limit=100, cursor=None)
    assert cursor is None
    return listed


def _shapes(run: Run) -> list[str]:
    return sorted(str(events.shape_of(v)) for v in ws.query_pk(items.run_pk(run.id)))


def test_every_item_shape_the_engine_writes_lists_as_its_events(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ezgh_engine.service import invoker, timers

    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: _App())
    monkeypatch.setattr(invoker, "invoke_app", _app_with_one_step)
    run = _new_run()
    assert invoker.invoke(run.id, 1) is None
    listed = _listed(run)
    assert [e["type"] for e in listed] == [
        "run.started",
        "invocation.started",
        "step.completed",
        "invocation.completed",
        "run.completed",
    ]
    assert listed[2]["stepId"] == "a#1" and listed[2]["deploymentId"] == "dep-1"
    assert _shapes(run) == ["run", "step"]  # the outcome is the run item's `lastOut`
    stored = runs_store.get_run(run.id, with_steps=False)
    assert stored is not None and stored.last_outcome is not None

    limited = _new_run()
    assert timers.time_out(limited.id)
    assert [e["type"] for e in _listed(limited)] == ["run.started", "run.timedOut"]
    assert "event" in _shapes(limited)
