"""A throttle is never a failed delivery: an invocation whose step calls stayed throttled
answers `throttled` (docs/protocol.md section 1.2), and the invoker delivers it again with a
jittered backoff, at least the answer's `retryAfter`, counting no failure; past
`MAX_THROTTLED_DELIVERIES` in a row each counts as one, so a run is never delivered forever.

Before: the SDK answered such an invocation HTTP 500, a failed delivery, and eight in a row
under a throttle burst failed the run `workflows.app_unreachable` (the fault campaign).
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.config import settings
from ezgh_engine.core import protocol_rules as rules
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service import invoker

from tests.api.steps_helpers import stored_run
from tests.api.test_protocol_races import _raw_run

APP = SimpleNamespace(kind="push", name="app", notifications=None, protocol="1.5")
THROTTLED = {"protocol": "1.5", "outcome": "throttled", "reason": "HTTP 503", "retryAfter": 3}
SLEEP = {
    "protocol": "1.5",
    "outcome": "suspended",
    "waits": [{"stepId": "nap#1", "name": "nap", "kind": "sleep", "seconds": 60}],
}


class Answers:
    """A push app answering from a list, then always its last answer."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, app: Any, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _deliver_again(run_id: str, skip_clock: clock.SkipClock, after: float) -> Any:
    """The message comes back when its delay ends, the backoff's lease with it."""
    skip_clock.advance(timedelta(seconds=after + 0.01))
    return invoker.invoke(run_id, int(_raw_run(run_id)["invokeSeq"]))


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    return lambda answers: monkeypatch.setattr(invoker, "invoke_app", answers)


def test_throttled_deliveries_fail_nothing_and_back_off(
    aws_env: None, app: Any, skip_clock: clock.SkipClock
) -> None:
    app(Answers(THROTTLED))
    run = stored_run()
    retry = invoker.invoke(run.id, 1)
    waits = []
    for _ in range(settings().invoke_max_attempts * 2):  # twice the failure budget
        assert retry is not None
        waits.append(retry.after_seconds)
        raw = _raw_run(run.id)
        assert int(raw.get("invokeFailures", 0)) == 0
        assert int(raw["leaseUntil"]) > clock.now_ms()  # held by the backoff until it ends
        retry = _deliver_again(run.id, skip_clock, retry.after_seconds)
    assert runs_store.get_run(run.id).status == "running"  # type: ignore[union-attr]
    assert int(_raw_run(run.id)[items.INVOKE_THROTTLES_ATTR]) == len(waits) + 1
    assert min(waits) >= 3  # never before the answer's retryAfter
    assert max(waits) <= rules.THROTTLED_MAX_DELAY_SECONDS  # doubling, capped: no hot loop
    assert waits[-1] > waits[0]


def test_an_outcome_after_throttles_starts_their_count_again(
    aws_env: None, app: Any, skip_clock: clock.SkipClock
) -> None:
    app(Answers(THROTTLED, THROTTLED, SLEEP))
    run = stored_run()
    retry = invoker.invoke(run.id, 1)
    retry = _deliver_again(run.id, skip_clock, retry.after_seconds)  # type: ignore[union-attr]
    assert int(_raw_run(run.id)[items.INVOKE_THROTTLES_ATTR]) == 2
    assert _deliver_again(run.id, skip_clock, retry.after_seconds) is None  # type: ignore[union-attr]
    raw = _raw_run(run.id)
    assert items.INVOKE_THROTTLES_ATTR not in raw and int(raw["invokeFailures"]) == 0


def test_past_its_bound_a_throttled_delivery_counts_as_a_failed_one(
    aws_env: None, app: Any, skip_clock: clock.SkipClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(invoker, "MAX_THROTTLED_DELIVERIES", 2)
    answers = Answers(THROTTLED)
    app(answers)
    run = stored_run()
    retry = invoker.invoke(run.id, 1)
    while retry is not None:
        retry = _deliver_again(run.id, skip_clock, retry.after_seconds)
    assert answers.calls == 2 + settings().invoke_max_attempts
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "failed"
    assert done.error is not None and done.error.code == "workflows.app_unreachable"
    assert "stayed throttled" in done.error.message


@pytest.mark.parametrize(
    ("given", "read"), [(3, 3.0), (0.5, 0.5), (None, None), (-1, None), ("2", None), (True, None)]
)
def test_a_throttled_answer_s_retry_after_is_read_or_ignored(given: Any, read: Any) -> None:
    outcome = outcome_rules.parse({**THROTTLED, "retryAfter": given}, clock.now())
    assert outcome.kind == "throttled" and outcome.retry_after == read


def test_the_throttled_backoff_doubles_to_its_cap_with_jitter() -> None:
    assert rules.throttled_delay_seconds(1, None, 0.0) == 1.0
    assert rules.throttled_delay_seconds(1, None, 0.999) < 2.0
    assert rules.throttled_delay_seconds(3, None, 0.999) < 8.0
    assert rules.throttled_delay_seconds(1000, None, 0.999) <= 60.0
    assert rules.throttled_delay_seconds(1, 30, 0.0) == 30.0
    assert rules.throttled_delay_seconds(1, 10**9, 0.0) == rules.THROTTLED_MAX_RETRY_AFTER_SECONDS


def test_a_throttled_branch_delivery_releases_its_step_uncounted(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch invocation (one parallel step) whose step calls stayed throttled: its step
    stays pending and uncounted, held until the backoff ends, then delivered again."""
    from ezgh_engine.adapters import waits_store as ws
    from ezgh_engine.service import branch_answers, branches

    from tests.api.test_branch_outcomes import STEP, _app, _run_with_branch

    run_id = _run_with_branch()
    monkeypatch.setattr(branches, "invoke_app", lambda app, request: THROTTLED)
    monkeypatch.setattr(branches.registry_store, "get_app", lambda p, a: _app(p))
    before = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    retry = branches.invoke_branch(run_id, STEP)
    assert retry is not None and retry.after_seconds >= 3
    step = ws.get(items.run_pk(run_id), items.STEP_PREFIX + STEP) or {}
    # Not failed, and the attempt the lease take started is kept (the throttled call may have
    # been the step's end, after its body ran): the next lease take starts the next one.
    assert step["status"] == "running" and "error" not in step
    assert int(step["attempt"]) == int(before.get("attempt", 0)) + 1
    assert int(step.get("branchFailures", 0)) == 0
    assert int(step[branch_answers.BRANCH_THROTTLES_ATTR]) == 1
    assert int(step["branchLeaseUntil"]) > clock.now_ms()


def test_a_throttled_answer_with_malformed_ops_is_a_failed_delivery(
    aws_env: None, app: Any
) -> None:
    """Ops a `throttled` answer carries are held to an answer's rules: malformed ones make
    it a failed delivery (counted), as on any other outcome, and nothing is written."""
    app(Answers({**THROTTLED, "ops": [{"op": "complete"}]}))
    run = stored_run()
    retry = invoker.invoke(run.id, 1)
    assert retry is not None
    raw = _raw_run(run.id)
    assert int(raw["invokeFailures"]) == 1
    assert items.INVOKE_THROTTLES_ATTR not in raw
