"""`service.repair` over stored run shapes, on moto and on DynamoDB Local (issue 15): what the
tables say is owed is listed, re-armed with `apply`, and a healthy run is left alone."""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import messages
from ezgh_engine.adapters import run_items as items
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run
from ezgh_engine.service.repair import repair
from ezgh_engine.topology import TOPOLOGY

from tests.api.conftest import ENV
from tests.api.test_ops_stuck_runs import PROJECT, _put, _run, _step

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
SCHEDULER_ROLE_ARN = "arn:aws:iam::123456789012:role/ezgh-scheduler"


def _timed_step(run: Run, step_id: str, status: str, wake_at: str) -> None:
    _step(run, step_id, "sleep", status, wakeAt=wake_at)


def _invocation_messages() -> list[dict[str, object]]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    got = sqs.receive_message(
        QueueUrl=ENV["EZGH_INVOCATIONS_QUEUE_URL"], MaxNumberOfMessages=10, WaitTimeSeconds=0
    )
    return [json.loads(m["Body"]) for m in got.get("Messages", [])]


@pytest.fixture
def shapes(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Run]:
    # Long timers are Scheduler schedules targeting the invocations queue (as deployed).
    monkeypatch.setenv(config.ENV_INVOCATIONS_QUEUE_ARN, QUEUE_ARN)
    monkeypatch.setenv(TOPOLOGY.scheduler_role_env_var, SCHEDULER_ROLE_ARN)
    config.reset_settings()
    past = clock.iso(clock.now() - timedelta(hours=1))
    far = clock.iso(clock.now() + timedelta(days=3))
    owed = _run(invoke_seq=3)  # an invocation owed and no lease: its message was lost
    overslept = _run()  # a sleep past its wake time: its timer was lost
    far_off = _run()  # a three-day sleep whose schedule is gone
    healthy = _run(lease_until_ms=clock.now_ms() + 3_600_000)  # being invoked now
    ended = _run(status="completed", invoke_seq=5)  # ended: owed nothing
    for run in (owed, overslept, far_off, healthy, ended):
        _put(items.run_values(run))
    _timed_step(overslept, "nap", "sleeping", past)
    _timed_step(far_off, "wait-3d", "sleeping", far)
    _timed_step(healthy, "nap", "sleeping", past)
    return {"owed": owed, "overslept": overslept, "far_off": far_off}


def test_a_dry_run_lists_what_is_owed_and_sends_nothing(shapes: dict[str, Run]) -> None:
    found = repair(PROJECT, older_than_seconds=60)
    assert sorted((a.run_id, a.kind, a.step_id) for a in found) == sorted(
        [
            (shapes["owed"].id, "invocation", ""),
            (shapes["overslept"].id, "timer", "nap"),
            (shapes["far_off"].id, "schedule", "wait-3d"),
        ]
    )
    assert _invocation_messages() == []


def test_apply_re_arms_each_and_a_second_repair_finds_only_what_is_still_due(
    shapes: dict[str, Run],
) -> None:
    repair(PROJECT, apply=True, older_than_seconds=60)
    sent = {(m["type"], m["runId"]) for m in _invocation_messages()}
    assert sent == {("invoke", shapes["owed"].id), ("timer", shapes["overslept"].id)}
    far = shapes["far_off"]
    [step] = [s for s in _steps(far) if s[0] == "wait-3d"]
    names = messages.timer_schedule_names(far.id, "wait-3d", step[1])
    scheduler = boto3.client("scheduler", region_name="us-east-1")
    found = scheduler.get_schedule(Name=names[0], GroupName=settings().scheduler_group)
    assert json.loads(found["Target"]["Input"])["stepId"] == "wait-3d"
    # The schedule now exists; the invocation and the timer stay owed until they are handled.
    again = repair(PROJECT, older_than_seconds=60)
    assert {a.kind for a in again} == {"invocation", "timer"}


def _steps(run: Run) -> list[tuple[str, str]]:
    from ezgh_engine.adapters import runs_store

    got = runs_store.get_run(run.id, with_steps=True)
    assert got is not None
    return [(s.id, s.wake_at or "") for s in got.steps]
