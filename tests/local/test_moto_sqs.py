"""The emulator's retention check of a received SQS message (`emulator.lighten_sqs`)
answers what moto's does, from the queue's retention period alone (moto's built every
attribute of the queue, walking every message, for each message it handed out)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters import aws
from ezgh_engine.local import emulator as emulator_module
from ezgh_engine.local.account import ACCOUNT_ID, REGION
from ezgh_engine.local.emulator import Emulator
from moto.sqs import models


def _queue_and_messages(count: int) -> tuple[Any, Any, list[Any]]:
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="kept", Attributes={"MessageRetentionPeriod": "60"})[
        "QueueUrl"
    ]
    for i in range(count):
        sqs.send_message(QueueUrl=url, MessageBody=str(i))
    backend = models.sqs_backends[ACCOUNT_ID][REGION]
    return backend, backend.get_queue("kept"), list(backend.get_queue("kept")._messages)


def test_retention_is_judged_as_moto_judges_it(emulator: Emulator) -> None:
    emulator.reset()
    backend, queue, messages = _queue_and_messages(3)
    assert isinstance(queue.message_retention_period, int)
    moto_judges = models.SQSBackend.__dict__["is_message_valid_based_on_retention_period"]
    ours = moto_judges.__name__ == "is_message_valid_based_on_retention_period"
    assert ours and moto_judges.__module__ == emulator_module.__name__  # the patch is in place
    messages[1].sent_timestamp -= 61_000  # past the 60 s retention
    messages[2].sent_timestamp -= 59_000  # within it
    judged = [backend.is_message_valid_based_on_retention_period("kept", m) for m in messages]
    assert judged == [True, False, True]
    assert judged == [_moto_judgement(backend, m) for m in messages]


def _moto_judgement(backend: Any, message: Any) -> bool:
    """moto's own check (`SQSBackend.is_message_valid_based_on_retention_period`)."""
    period = backend.get_queue_attributes("kept", ["MessageRetentionPeriod"])
    return bool(
        period["MessageRetentionPeriod"] + message.sent_timestamp / 1000 > models.unix_time()
    )


def test_an_expired_message_is_not_received(emulator: Emulator) -> None:
    emulator.reset()
    _, _, messages = _queue_and_messages(1)
    messages[0].sent_timestamp -= 61_000
    url = aws.client("sqs").get_queue_url(QueueName="kept")["QueueUrl"]
    answer = aws.client("sqs").receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert answer.get("Messages", []) == []
    assert emulator  # started: its patches are installed
