"""Pure queue rules: message validation, message shape, notification bodies (seed 004)."""

from __future__ import annotations

import pytest
from ezgh_engine.core.queues import (
    MessageError,
    QueueRecord,
    check_messages,
    delivered_message,
    notification_body,
)
from ezgh_engine.service.notifications import just_ended

RUN = {
    "runId": "r1",
    "appId": "a1",
    "workflow": "chargeCustomer",
    "status": "completed",
    "attempt": 1,
    "startedAt": "2026-10-13T18:00:00Z",
    "endedAt": "2026-10-13T18:01:35Z",
}


def test_output_inline_within_256_kib_else_output_ref() -> None:
    small = notification_body({**RUN, "output": {"ok": True}})
    assert small == {"type": "workflows.run.ended", **RUN, "output": {"ok": True}}
    big = notification_body({**RUN, "output": "x" * (256 * 1024)})
    assert "output" not in big and big["outputRef"] == "output"
    stored = notification_body({**RUN, "outputRef": "output"})
    assert stored["outputRef"] == "output"


def test_error_only_for_failed_and_timed_out() -> None:
    error = {"code": "user", "name": "CardDeclinedError", "message": "Card declined"}
    assert notification_body({**RUN, "status": "failed", "error": error})["error"] == error
    assert "error" not in notification_body({**RUN, "status": "cancelled", "error": error})
    assert "output" not in notification_body({**RUN, "status": "failed", "output": 1})


def test_just_ended_once_per_attempt() -> None:
    assert just_ended({"status": "running", "attempt": 1}, {"status": "failed", "attempt": 1})
    assert not just_ended({"status": "failed", "attempt": 1}, {"status": "failed", "attempt": 1})
    assert just_ended({"status": "failed", "attempt": 1}, {"status": "failed", "attempt": 2})
    assert just_ended(None, {"status": "completed"})
    assert not just_ended(None, {"status": "running"})


@pytest.mark.parametrize(
    ("messages", "fifo", "where"),
    [
        ([{"body": "a"}] * 11, False, "messages"),
        ([{"body": "a"}], True, "messages[0].groupId"),
        ([{"body": "a", "groupId": "g"}], False, "messages[0].groupId"),
        ([{"body": "a", "attributes": {"k": 1}}], False, "messages[0].attributes.k"),
        ([{"body": "a", "attributes": {"AWS.x": "v"}}], False, "messages[0].attributes.AWS.x"),
        ([{"body": "x" * (256 * 1024 + 1)}], False, "messages[0]"),
        ([{"body": ""}], False, "messages[0].body"),
    ],
)
def test_bad_messages(messages: list[object], fifo: bool, where: str) -> None:
    with pytest.raises(MessageError) as err:
        check_messages(messages, fifo=fifo)
    assert err.value.field == where


def test_delivered_message_shape() -> None:
    queue = QueueRecord("q1", "o", "p", "n", True, 3, 30, "u", "arn", "du", "darn", "t")
    record = {
        "messageId": "m1",
        "body": "{}",
        "messageAttributes": {"source": {"stringValue": "web", "dataType": "String"}},
        "attributes": {
            "SentTimestamp": "1791914400000",
            "MessageGroupId": "acct-9",
            "SequenceNumber": "18446",
        },
    }
    assert delivered_message(record, queue) == {
        "messageId": "m1",
        "body": "{}",
        "attributes": {"source": "web"},
        "sentAt": "2026-10-13T18:00:00.000Z",
        "queueId": "q1",
        "groupId": "acct-9",
        "seq": "18446",
    }
