"""The scheduler emulation fires due `at()` schedules once, by the engine's clock."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.local.pollers import Activity
from ezgh_engine.local.resources import Provisioned
from ezgh_engine.local.scheduler import Scheduler

from .conftest import make_queue

GROUP = "test-timers"  # not the runtime's group, so no other scheduler sees these


@pytest.fixture()
def skip_clock() -> Iterator[clock.SkipClock]:
    previous = clock.get_clock()
    skip = clock.SkipClock()
    clock.set_clock(skip)
    yield skip
    clock.set_clock(previous)


@pytest.fixture()
def target(resources: Provisioned) -> tuple[str, str]:
    aws.client("scheduler").create_schedule_group(Name=GROUP)
    return make_queue("timers")


def _create(
    name: str,
    expression: str,
    arn: str,
    body: dict[str, Any],
    tz: str = "UTC",
    after: str = "DELETE",
) -> None:
    aws.client("scheduler").create_schedule(
        Name=name,
        GroupName=GROUP,
        ScheduleExpression=expression,
        ScheduleExpressionTimezone=tz,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": arn,
            "RoleArn": "arn:aws:iam::123456789012:role/x",
            "Input": json.dumps(body),
        },
        ActionAfterCompletion=after,
    )


def _at(moment: Any) -> str:
    return f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})"


def _bodies(url: str) -> list[Any]:
    answer = aws.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in answer.get("Messages", [])]


def _names() -> list[str]:
    answer = aws.client("scheduler").list_schedules(GroupName=GROUP)
    return [s["Name"] for s in answer["Schedules"]]


def test_due_schedule_fires_once_and_is_deleted(
    target: tuple[str, str], skip_clock: clock.SkipClock
) -> None:
    url, arn = target
    now = clock.now()
    _create("due", _at(now - timedelta(seconds=1)), arn, {"wake": 1})
    _create("later", _at(now + timedelta(hours=1)), arn, {"wake": 2})
    _create("cron", "cron(0 * * * ? *)", arn, {"wake": 3})
    scheduler = Scheduler(group=GROUP, activity=Activity())
    assert scheduler.scan() == 1
    assert scheduler.scan() == 0
    assert _bodies(url) == [{"wake": 1}]
    assert sorted(_names()) == ["cron", "later"]

    skip_clock.advance(timedelta(hours=1, seconds=1))  # the SkipClock makes "later" due
    # ... and the top of the next hour passed: the cron schedule fires that occurrence once.
    assert scheduler.scan() == 2
    assert scheduler.scan() == 0
    assert sorted(_bodies(url), key=lambda b: b["wake"]) == [{"wake": 2}, {"wake": 3}]
    assert _names() == ["cron"]  # recurring: kept


def test_time_zone_and_keep_after_completion(target: tuple[str, str]) -> None:
    url, arn = target
    tokyo = clock.now().astimezone(ZoneInfo("Asia/Tokyo")) - timedelta(seconds=5)
    _create("tokyo", _at(tokyo), arn, {"tz": "tokyo"}, tz="Asia/Tokyo", after="NONE")
    # The same wall time read as UTC is 9 hours in the future: not due.
    _create("utc", _at(tokyo.replace(tzinfo=UTC)), arn, {"tz": "utc"})
    scheduler = Scheduler(group=GROUP, activity=Activity())
    assert scheduler.scan() == 1
    assert scheduler.scan() == 0  # ActionAfterCompletion NONE: kept, but fired once
    assert _bodies(url) == [{"tz": "tokyo"}]
    assert sorted(_names()) == ["tokyo", "utc"]


def test_scheduler_thread_fires_without_being_asked(target: tuple[str, str]) -> None:
    url, arn = target
    scheduler = Scheduler(group=GROUP, activity=Activity(), interval_seconds=0.05)
    scheduler.start()
    try:
        _create("soon", _at(clock.now() - timedelta(seconds=1)), arn, {"n": 1})
        deadline, pause = clock.monotonic() + 5, threading.Event()
        while scheduler.fired_count == 0 and clock.monotonic() < deadline:
            pause.wait(0.02)
        assert scheduler.fired_count == 1
        assert _bodies(url) == [{"n": 1}]
    finally:
        scheduler.stop()


def test_a_scan_asks_aws_nothing_until_a_schedule_is_due(
    target: tuple[str, str], skip_clock: clock.SkipClock
) -> None:
    """Many far schedules (long sleeps and waits): a scan reads the list in moto's store
    and fetches a one-time schedule only once it comes due, so hundreds of them cost no
    request per scan."""
    url, arn = target
    now = clock.now()
    for n in range(3):
        _create(f"far-{n}", _at(now + timedelta(days=366)), arn, {"far": n})
    _create("soon", _at(now + timedelta(hours=1)), arn, {"soon": 1})
    requests: list[str] = []
    stop = aws.observe(lambda record: requests.append(str(record["operation"])))
    try:
        scheduler = Scheduler(group=GROUP, activity=Activity())
        assert scheduler.scan() == 0
        assert scheduler.scan() == 0
        assert requests == []
        skip_clock.advance(timedelta(hours=1, seconds=1))
        assert scheduler.scan() == 1
    finally:
        stop()
    # The due one, fetched once, then fired (its queue's URL looked up once) and deleted.
    assert requests == ["GetSchedule", "GetQueueUrl", "SendMessage", "DeleteSchedule"]
    assert _bodies(url) == [{"soon": 1}]
    assert sorted(_names()) == ["far-0", "far-1", "far-2"]
