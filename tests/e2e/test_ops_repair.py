"""`ezgh ops repair`: re-arm a lost invocation message, a lost timer schedule (a
sleep's) and a lost year-limit bucket."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws, year_limit_store
from ezgh_engine.cli.main import main
from ezgh_engine.config import settings
from ezgh_engine.topology import YEAR_LIMIT_SWEEP

from tests.e2e.test_durable_runs import wait_ended, wait_sleeping

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.moto_only(
        "the CLI: repair's reads and writes run on both in tests/api/test_repair.py"
    ),
]


def _repair(*args: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["ops", "repair", "--older-than", "0", "--json", *args])
    return code, json.loads(out.getvalue())


def _kinds(answer: dict[str, Any], run_id: str) -> list[str]:
    return [r["kind"] for r in answer["repairs"] if r["runId"] == run_id]


def _steps(answer: dict[str, Any], run_id: str) -> list[tuple[str, str]]:
    return sorted((r["kind"], r["stepId"]) for r in answer["repairs"] if r["runId"] == run_id)


def _timers(scheduler: Any, group: str) -> list[dict[str, Any]]:
    """The group's schedules but the stack's own hourly sweep (topology `YEAR_LIMIT_SWEEP`)."""
    listed = scheduler.list_schedules(GroupName=group)["Schedules"]
    return [s for s in listed if s["Name"] != YEAR_LIMIT_SWEEP.name]


def test_repair_re_arms_a_lost_timer_schedule(engine, client, app_id):
    run = client.start_run(app_id, "onboarding", {})
    sleeping = wait_sleeping(engine, client, run["id"])
    scheduler = aws.client("scheduler")
    group = settings().scheduler_group
    timers = engine.wait_for(lambda: _timers(scheduler, group) or None)
    # The sleep's timer (the run's year limit holds no schedule: the hourly sweep keeps it),
    # and the run's year-limit bucket: both lost.
    assert len(timers) == 1, timers
    scheduler.delete_schedule(GroupName=group, Name=timers[0]["Name"])
    bucket = (year_limit_store.hour_of(clock.parse_iso(run["createdAt"])), engine.project_id)
    engine.wait_for(lambda: year_limit_store.bucket_exists(*bucket) or None)
    year_limit_store.delete_bucket(*bucket)
    [sleep_id] = [s["id"] for s in sleeping["steps"] if s["status"] == "sleeping"]
    lost = sorted([("year-limit", "$deadline"), ("schedule", sleep_id)])
    assert _repair() == (1, _repair()[1])  # a dry run changes nothing, and says so
    code, answer = _repair()
    assert code == 1 and _steps(answer, run["id"]) == lost, answer
    assert not _timers(scheduler, group)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ops", "repair", "--older-than", "0"]) == 1
    assert f"would re-arm year-limit $deadline of run {run['id']}: " in out.getvalue()
    assert "one-year limit" in out.getvalue()
    code, answer = _repair("--yes")
    assert code == 0 and answer["applied"] and _steps(answer, run["id"]) == lost
    assert len(_timers(scheduler, group)) == 1
    assert year_limit_store.bucket_exists(*bucket)
    assert _repair() == (0, {"applied": False, "repairs": []})  # healthy now
    engine.clock.advance(timedelta(days=3, minutes=1))
    done = wait_ended(engine, client, run["id"])
    assert done["status"] == "completed", done


def test_repair_re_arms_a_lost_invocation_message(engine, client, app_id):
    """The run's start is an asynchronous invoke of the invoker: its event is
    lost in Lambda's queue (which may drop events it cannot keep up with); repair re-arms."""
    invoker = next(p for p in engine.pollers if p.name == "async:invoker")
    invoker.pause()
    sqs = aws.client("sqs")
    url = engine.async_invokes.queue_urls["invoker"]

    def queued() -> int:
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        names = ("", "NotVisible", "Delayed")
        return sum(int(counts[f"ApproximateNumberOf Messages{n}".replace(" ", "")]) for n in names)

    try:
        run = client.start_run(app_id, "onboarding", {})
        engine.wait_for(lambda: client.get_run(run["id"]) and queued() >= 1, timeout=30)
        engine.wait_for(lambda: invoker.parked.is_set(), timeout=30)
        sqs.purge_queue(QueueUrl=url)  # the run's invocation event is lost
        code, answer = _repair("--yes")
        assert code == 0 and _kinds(answer, run["id"]) == ["invocation"], answer
    finally:
        invoker.resume()
    sleeping = wait_sleeping(engine, client, run["id"])
    assert [s["name"] for s in sleeping["steps"]][:2] == ["load-user", "welcome-email"]
