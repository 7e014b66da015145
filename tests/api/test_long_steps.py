"""A step longer than the invoke timeout: it fails once, with an error naming the
limit; it never runs again beside itself because the invoker stopped waiting.

Before: the invoker's timeout counted a delivery failure, backed off 2 s and invoked again;
the replay found the step `running` (by the old epoch) and started attempt 2 while the
first body still ran, four times over, and the run ended `workflows.app_unreachable`.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import push, runs_store
from ezgh_engine.core import leases
from ezgh_engine.errors import StaleInvocation
from ezgh_engine.service import invoker, steps

from tests.api.steps_helpers import free_lease, lease_token, stored_run
from tests.api.test_protocol_races import _raw_run

APP = SimpleNamespace(kind="push", name="app", notifications=None, protocol="1.5")


def _start(token: str, step_id: str, name: str, attempt: int = 1) -> dict[str, Any]:
    ops = [{"op": "start", "stepId": step_id, "name": name, "attempt": attempt}]
    return steps.apply_ops(token, {"ops": ops})["results"][0]


class LongStepApp:
    """An app whose first invocation starts a step and is still in its body when the
    invoker's call times out; later invocations answer what the SDK would (the failed step
    raises in the workflow, which fails the run)."""

    def __init__(self, body_seconds: float = 301) -> None:
        self.body_seconds = body_seconds  # engine time the body has run at the timeout
        self.requests: list[dict[str, Any]] = []
        self.bodies_started = 0
        self.first_token = ""

    def __call__(self, app: Any, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        recorded = {s["id"]: s for s in request["steps"]}
        step = recorded.get("long#1")
        if step is None or step["status"] == "running":
            # The SDK starts (or restarts) the step and runs its body.
            result = _start(request["api"]["token"], "long#1", "long", attempt=len(self.requests))
            if result["result"] == "started":
                self.bodies_started += 1
            if not self.first_token:
                self.first_token = request["api"]["token"]
            skipping = clock.get_clock()
            assert isinstance(skipping, clock.SkipClock)
            skipping.advance(timedelta(seconds=self.body_seconds))
            raise push.AppTimedOut("app did not answer within 300 s")
        error = step["error"]
        return {"protocol": "1.3", "outcome": "failed", "error": error}


def test_a_step_longer_than_the_invoke_timeout_fails_once_naming_the_limit(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    app = LongStepApp()
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", app)
    run = stored_run()
    retry = invoker.invoke(run.id, 1)
    assert retry is not None  # invoked again, at once: not a delivery failure
    [step] = runs_store.get_run(run.id).steps  # type: ignore[union-attr]
    assert step.status == "failed", step
    assert step.error is not None and step.error.code == "workflows.step_timed_out"
    assert "invoke timeout of 300 s" in step.error.message
    assert "EZGH_INVOKE_TIMEOUT_SECONDS" in step.error.message
    raw = _raw_run(run.id)
    assert int(raw["invokeFailures"]) == 0
    assert int(raw["leaseUntil"]) <= clock.now_ms()  # the old invocation starts nothing more

    # The first body ends at last: its completion is refused, it records nothing.
    late = {"ops": [{"op": "complete", "stepId": "long#1", "output": "late"}]}
    with pytest.raises(StaleInvocation):
        steps.apply_ops(app.first_token, late)

    # The message comes back: the next invocation sees the failed step.
    assert invoker.invoke(run.id, int(raw["invokeSeq"])) is None
    done = runs_store.get_run(run.id)
    assert done is not None and done.status == "failed", done
    assert done.error is not None and done.error.code == "workflows.step_timed_out"
    assert app.bodies_started == 1  # never a second attempt beside the first


def test_an_app_that_hangs_before_any_step_is_a_delivery_failure(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No step was running: nothing to fail, the usual backoff and failure count."""

    def hangs(app: Any, request: dict[str, Any]) -> dict[str, Any]:
        raise push.AppTimedOut("app did not answer within 300 s")

    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", hangs)
    run = stored_run()
    retry = invoker.invoke(run.id, 1)
    assert retry is not None and retry.after_seconds == leases.BACKOFF_BASE_SECONDS
    assert int(_raw_run(run.id)["invokeFailures"]) == 1
    assert runs_store.get_run(run.id).steps == ()  # type: ignore[union-attr]


def test_a_step_an_earlier_invocation_left_running_is_not_failed_by_a_hang(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """A crash left a step `running` long ago; the next invocation's app hangs before its
    first step and times out. That invocation never reached the step: it is not failed
    `workflows.step_timed_out` (the fault campaign lost a run so), the delivery counts as
    failed, and the next invocation starts the step again (at least once)."""
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    run = stored_run()
    token = lease_token(run)
    _start(token, "a#1", "a")
    # `long#1` started riding a#1's end (a mark, no item of its own yet); then that
    # invocation died.
    ops = [{"op": "complete", "stepId": "a#1", "output": 1}]
    ops.append({"op": "start", "stepId": "long#1", "name": "long", "attempt": 1})
    steps.apply_ops(token, {"ops": ops})
    free_lease(run)
    skip_clock.advance(timedelta(minutes=20))

    def hangs(app: Any, request: dict[str, Any]) -> dict[str, Any]:
        skip_clock.advance(timedelta(seconds=301))
        raise push.AppTimedOut("app did not answer within 300 s")

    monkeypatch.setattr(invoker, "invoke_app", hangs)
    retry = invoker.invoke(run.id, int(_raw_run(run.id)["invokeSeq"]))
    assert retry is not None and retry.after_seconds == leases.BACKOFF_BASE_SECONDS
    step = runs_store.get_run(run.id).steps[1]  # type: ignore[union-attr]
    assert step.id == "long#1" and step.status == "running" and step.error is None
    assert int(_raw_run(run.id)["invokeFailures"]) == 1


def test_a_read_timeout_is_app_timed_out(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a read timeout (the app took the request) is a timeout; a refused connection
    is unreachable, as before."""

    def times_out(*args: Any, **kwargs: Any) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out")

    def refused(*args: Any, **kwargs: Any) -> httpx.Response:
        raise httpx.ConnectError("refused")

    app = SimpleNamespace(name="app", url="http://127.0.0.1:9/", signing_key="k" * 32)
    monkeypatch.setattr(push, "check_target", lambda url: SimpleNamespace(url=url, address=None))
    monkeypatch.setattr(push, "pinned_post", times_out)
    with pytest.raises(push.AppTimedOut) as timed_out:
        push.invoke_app(app, {"type": "invoke", "invocationId": "i", "run": {"id": "r"}})  # type: ignore[arg-type]
    assert f"{config.settings().invoke_timeout_seconds:g} s" in timed_out.value.message
    monkeypatch.setattr(push, "pinned_post", refused)
    with pytest.raises(push.AppUnreachable) as unreachable:
        push.invoke_app(app, {"type": "invoke", "invocationId": "i", "run": {"id": "r"}})  # type: ignore[arg-type]
    assert not isinstance(unreachable.value, push.AppTimedOut)


def test_a_step_started_late_in_a_timed_out_invocation_keeps_the_lease(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """A step that had run less than half the limit when the invocation timed out (the
    steps before it took the time) is not failed: the lease is kept to its end, so its body
    may record itself, and no other attempt starts beside it meanwhile."""
    app = LongStepApp(body_seconds=10)
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", app)
    run = stored_run()
    began = clock.now_ms()
    retry = invoker.invoke(run.id, 1)
    assert retry is not None and retry.after_seconds > 300  # held to the lease's end
    [step] = runs_store.get_run(run.id).steps  # type: ignore[union-attr]
    assert step.status == "running"
    assert int(_raw_run(run.id)["leaseUntil"]) >= began + invoker._lease_ms()
    late = {"ops": [{"op": "complete", "stepId": "long#1", "output": "done"}]}
    assert steps.apply_ops(app.first_token, late)["results"][0]["result"] == "ok"
    [step] = runs_store.get_run(run.id).steps  # type: ignore[union-attr]
    assert step.status == "completed" and app.bodies_started == 1


class LateStepApp:
    """An app whose first invocation spends `before_s` on earlier work, then starts a step
    whose body runs `body_s` (within the limit from its own start), and is still in it when
    the invoker's call times out; every (re)start of the step is logged with its time."""

    def __init__(self, before_s: float, body_s: float) -> None:
        self.before_s, self.body_s = before_s, body_s
        self.bodies: list[tuple[int, int]] = []  # (start, end) in engine ms

    def __call__(self, app: Any, request: dict[str, Any]) -> dict[str, Any]:
        skipping = clock.get_clock()
        assert isinstance(skipping, clock.SkipClock)
        recorded = {s["id"]: s for s in request["steps"]}
        step = recorded.get("late#1")
        if step is not None and step["status"] != "running":
            return {"protocol": "1.3", "outcome": "failed", "error": step.get("error")}
        if not self.bodies:
            skipping.advance(timedelta(seconds=self.before_s))
        attempt = len(self.bodies) + 1
        if _start(request["api"]["token"], "late#1", "late", attempt)["result"] == "started":
            now = clock.now_ms()
            self.bodies.append((now, now + int(self.body_s * 1000)))
        if len(self.bodies) == 1:
            skipping.advance(timedelta(seconds=300 - self.before_s))
            raise push.AppTimedOut("app did not answer within 300 s")
        raise push.AppUnreachable("the test stops here")


def test_a_young_step_is_not_started_again_before_it_had_the_whole_limit(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, skip_clock: clock.SkipClock
) -> None:
    """A step started 250 s into an invocation that then timed out is young: not failed,
    the lease held. Its body runs 250 s, within the limit from its own start, past the
    invocation's token end (300 + 60 s). It records nothing after that token, so it is
    started again (at least once), but only once it had the whole limit from its start:
    never beside a body that keeps to the limit."""
    app = LateStepApp(before_s=250, body_s=250)
    monkeypatch.setattr(invoker.registry_store, "get_app", lambda *a, **k: APP)
    monkeypatch.setattr(invoker, "invoke_app", app)
    run = stored_run()
    assert invoker.invoke(run.id, 1) is not None  # the young step keeps the lease
    [(first_start, first_end)] = app.bodies
    seq = int(_raw_run(run.id)["invokeSeq"])
    for _ in range(20):  # the held invoke message comes back, 20 s apart
        skip_clock.advance(timedelta(seconds=20))
        with contextlib.suppress(push.AppUnreachable):
            invoker.invoke(run.id, seq)
        if len(app.bodies) > 1:
            break
    assert len(app.bodies) == 2, app.bodies  # started again: its end was never recorded
    restarted = app.bodies[1][0]
    assert restarted >= first_end, (restarted - first_start) / 1000  # not beside the first
