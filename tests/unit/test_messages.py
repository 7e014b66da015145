"""The invocations queue's messages are dumped and parsed by one module (core/messages, issue
19): each type round-trips in the wire format the queue has always carried, a body that is none
of ours is refused (and dropped by the consumer, never redelivered), and every type has its
handler in the consumer's dispatch table."""

from __future__ import annotations

import json
import logging
import typing
from typing import Any

import pytest
from ezgh_engine.core import messages as wire

# The bodies the producers sent before the typed messages: messages in flight across a deploy
# must still parse, and a producer must still write exactly these.
WIRE = [
    (wire.Invoke("r1", 3), {"type": "invoke", "runId": "r1", "seq": 3}),
    (
        wire.Timer("r1", "nap#1", "2026-01-05T10:15:00.000Z"),
        {"type": "timer", "runId": "r1", "stepId": "nap#1", "wakeAt": "2026-01-05T10:15:00.000Z"},
    ),
    (wire.Branch("r1", "a#1"), {"type": "branch", "runId": "r1", "stepId": "a#1"}),
    (
        wire.Cron("sch1", "<aws.scheduler.scheduled-time>"),
        {"type": "cron", "scheduleId": "sch1", "scheduledTime": "<aws.scheduler.scheduled-time>"},
    ),
    (
        wire.TaskWatch("r1", 2, 5),
        {"type": "task-watch", "runId": "r1", "seq": 2, "epoch": 5},
    ),
    (
        wire.YearLimitSweep("<aws.scheduler.scheduled-time>"),
        {"type": "year-limit-sweep", "scheduledTime": "<aws.scheduler.scheduled-time>"},
    ),
]


def test_the_year_limit_sweep_schedule_sends_that_message() -> None:
    """The stack's hourly schedule (topology, made by infra and the local runtime) carries
    the body the consumer parses."""
    from ezgh_engine.topology import TOPOLOGY, YEAR_LIMIT_SWEEP

    assert YEAR_LIMIT_SWEEP in TOPOLOGY.recurring
    assert json.loads(YEAR_LIMIT_SWEEP.message) == wire.dump(
        wire.YearLimitSweep("<aws.scheduler.scheduled-time>")
    )
    assert TOPOLOGY.function(YEAR_LIMIT_SWEEP.function).async_invoke is not None


@pytest.mark.parametrize(("message", "body"), WIRE, ids=lambda v: getattr(v, "TYPE", ""))
def test_each_message_round_trips_in_the_wire_format(message: Any, body: dict[str, Any]) -> None:
    assert wire.dump(message) == body
    assert json.loads(wire.dumps(message)) == body
    assert " " not in wire.dumps(message)  # compact: a queue message is paid by the byte
    assert wire.parse(json.dumps(body)) == message
    assert wire.load({**body, "later": "a field a newer producer adds"}) == message


def test_every_message_type_is_covered() -> None:
    assert {type(m) for m, _ in WIRE} == set(typing.get_args(wire.Message))


def test_a_cron_message_without_its_fire_time_parses() -> None:
    # A schedule made before `scheduledTime` was in its input, or a hand-sent fire.
    assert wire.parse('{"type":"cron","scheduleId":"s"}') == wire.Cron("s", None)
    assert wire.parse('{"type":"cron","scheduleId":"s","scheduledTime":7}') == wire.Cron("s")


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        "null",
        '{"runId": "r1", "seq": 1}',
        '{"type": "nope", "runId": "r1"}',
        '{"type": ["invoke"], "runId": "r1", "seq": 1}',
        '{"type": "invoke", "runId": "r1"}',
        '{"type": "invoke", "runId": "r1", "seq": "1"}',
        '{"type": "invoke", "runId": "r1", "seq": true}',
        '{"type": "invoke", "runId": "", "seq": 1}',
        '{"type": "invoke", "runId": 5, "seq": 1}',
        '{"type": "timer", "runId": "r1", "stepId": "s"}',
        '{"type": "branch", "runId": "r1"}',
        '{"type": "cron"}',
        '{"type": "task-watch", "runId": "r1", "seq": 1}',
    ],
)
def test_a_body_that_is_none_of_ours_is_refused(body: str) -> None:
    with pytest.raises(wire.MalformedMessage):
        wire.parse(body)


def test_the_consumer_drops_a_body_that_is_none_of_ours(caplog: pytest.LogCaptureFixture) -> None:
    """Dropped (the message is deleted), with an error log: no delivery of it could succeed,
    so it must not come back until the dead-letter limit."""
    from ezgh_engine.service import invocation_queue

    records = [
        {"messageId": "m1", "body": "not json"},
        {"messageId": "m2", "body": '{"type": "invoke", "runId": "r1"}'},
        {"messageId": "m3", "body": '{"type": "nope"}'},
    ]
    with caplog.at_level(logging.ERROR):
        assert invocation_queue.handle_batch(records) == []
    assert sum("none of ours" in r.getMessage() for r in caplog.records) == 3


def test_the_dispatch_table_has_a_handler_for_every_message_type() -> None:
    from ezgh_engine.service import invocation_queue

    assert set(invocation_queue.HANDLERS) == set(typing.get_args(wire.Message))
