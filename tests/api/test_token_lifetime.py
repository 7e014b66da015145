"""An invocation token works while its invocation holds the lease, and no longer.

After its invocation answered (here `suspended`, waiting on a callback), or once its lease
ran out, the token starts, ends, records and cancels nothing: 409 `invalid_state`, the
protocol's "stop" (docs/protocol.md section 2). The answer itself is applied exactly once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import runs_store
from ezgh_engine.errors import StaleInvocation

from tests.api.steps_helpers import complete, lease_token, start, steps_call, stored_run
from tests.api.test_step_writes import _answer

CALLBACK = {"op": "callback", "stepId": "cb#1", "name": "cb", "timeoutSeconds": None}


def _record(step: str, value: Any) -> dict[str, Any]:
    return {"op": "record", "stepId": step, "name": step.split("#")[0], "kind": "value",
            "output": value}  # fmt: skip


def _steps(run_id: str) -> dict[str, tuple[str, Any]]:
    found = runs_store.get_run(run_id)
    assert found is not None
    return {s.id: (s.status, s.output) for s in found.steps}


def _refused(answer: tuple[int, Any, list[str]]) -> None:
    status, body, _ = answer  # a refused transaction may be tried: the state tells
    assert status == 409 and body["error"]["code"] == "invalid_state", body


def test_a_suspended_invocations_token_does_nothing_more(aws_env: None) -> None:
    run = stored_run()
    token = lease_token(run)
    assert steps_call(token, [start("a#1")])[0] == 200
    assert steps_call(token, [CALLBACK])[0] == 200
    # The answer carries a#1's held end and suspends on the callback.
    answer = {
        "outcome": "suspended",
        "waits": [{"stepId": "cb#1", "name": "cb", "kind": "callback"}],
        "ops": [complete("a#1", "A")],
    }
    _answer(run, token, answer)
    before = _steps(run.id)
    assert before["a#1"] == ("completed", "A") and before["cb#1"][0] == "waiting"

    _refused(steps_call(token, [start("b#1")]))
    _refused(steps_call(token, [_record("v#1", 42)]))
    _refused(steps_call(token, [{"op": "cancel", "stepId": "cb#1", "name": "cb",
                                 "kind": "callback"}]))  # fmt: skip
    _refused(steps_call(token, [start("a#1", attempt=2)]))
    assert _steps(run.id) == before
    found = runs_store.get_run(run.id, with_steps=False)
    assert found is not None and found.status == "running"


def test_an_answer_is_applied_once(aws_env: None) -> None:
    """The same answer posted again (a pull worker's retry) is refused, not applied twice."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1"), CALLBACK])
    wait = {"stepId": "cb#1", "name": "cb", "kind": "callback"}
    answer = {"outcome": "suspended", "waits": [wait], "ops": [complete("a#1", "A")]}
    _answer(run, token, answer)
    handled = runs_store.get_run(run.id, with_steps=False)
    assert handled is not None
    with pytest.raises(StaleInvocation):
        _answer(run, token, answer)
    again = runs_store.get_run(run.id, with_steps=False)
    assert again is not None and again.version == handled.version


def test_a_long_lived_token_stops_when_its_lease_ends(
    aws_env: None,
    skip_clock: clock.SkipClock,
) -> None:
    """A pull task's token lives 24 hours; it works only while heartbeats keep the lease."""
    from ezgh_engine import config
    from ezgh_engine.adapters import invocations_store as inv
    from ezgh_engine.core import tokens
    from ezgh_engine.service import pull

    run = stored_run()
    leased = inv.take_lease(run.id, 1, now_ms=clock.now_ms(), lease_ms=60_000)
    assert leased is not None
    claims = tokens.InvocationClaims(
        run.id, run.project_id, leased.epoch, 1, clock.now_ms() + pull.TOKEN_LIFETIME_MS
    )
    token = tokens.mint(config.settings().token_secret, claims)
    assert steps_call(token, [start("a#1")])[0] == 200
    skip_clock.advance(timedelta(seconds=61))  # no heartbeat: the lease ended
    _refused(steps_call(token, [complete("a#1", 1), start("b#1")]))
    _refused(steps_call(token, [_record("v#1", 1)]))
    with pytest.raises(StaleInvocation):  # nor can a late heartbeat bring it back
        pull.set_lease(run.id, leased.epoch, clock.now_ms() + 60_000)
    assert _steps(run.id) == {"a#1": ("running", None)}


def test_a_branch_invocations_token_does_nothing_once_it_answered(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The branch answered with its step due again (a retry): until the next branch
    invocation takes the step's lease, the old token must not start it."""
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.adapters import waits_store as ws
    from ezgh_engine.service import branches

    from tests.api.test_branch_outcomes import STEP, _app, _put, _run_with_branch

    run_id = _run_with_branch()
    seen: dict[str, str] = {}

    def invoke_app(app: Any, request: dict[str, Any]) -> dict[str, Any]:
        seen["token"] = request["api"]["token"]
        step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
        _put({**step, "status": "waiting", "attempt": int(step.get("attempt", 0)) + 1})
        return {"protocol": "1.3", "deploymentId": None, "outcome": "branch", "stepId": STEP}

    monkeypatch.setattr(branches, "invoke_app", invoke_app)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    assert branches.invoke_branch(run_id, STEP) is None
    before = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP)
    assert before is not None and before["status"] == "waiting"
    op = {"op": "start", "stepId": STEP, "name": "fan-0", "kind": "run"}
    _refused(steps_call(seen["token"], [op]))
    assert ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) == before
