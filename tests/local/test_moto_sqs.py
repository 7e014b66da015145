"""The emulator's retention check of a received SQS message (`emulator.lighten_sqs`)
answers what moto's does, from the queue's retention period alone (moto's built every
attribute of the queue, walking every message, for each message it handed out)."""

from __future__ import annotations

import threading
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


def test_a_send_between_two_overlapping_deletes_is_kept(emulator: Emulator) -> None:
    """Two deletes of one queue overlap, and a message is sent meanwhile: moto's delete
    walked the queue's message list without its lock and then stored the list it kept, so
    the delete that stored last put back a list made before the send. SQS had answered the
    send with its MessageId; the message was gone (no receive, no dead-letter queue,
    nothing due): the fault campaign's run whose owed invocation, an asynchronous invoke's
    event in the invoker's event queue, never reached the invoker. The first delete here
    stops in its walk while the second delete and the send run; with the queue's lock held
    by a delete they wait for it instead (`emulator.serialize_sqs_queues`)."""
    emulator.reset()
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="events")["QueueUrl"]
    for body in ("first", "second", "other"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    handles = {
        m["Body"]: m["ReceiptHandle"]
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    }
    backend = models.sqs_backends[ACCOUNT_ID][REGION]
    queue = backend.get_queue("events")
    sent: list[str] = []

    def meanwhile() -> None:
        backend.delete_message("events", handles["second"])
        sent.append(backend.send_message("events", "sent meanwhile").id)

    other = threading.Thread(target=meanwhile)
    walked = next(m for m in queue._messages if m.body == "other")
    had_receipt_handle = walked.had_receipt_handle

    def pausing(receipt_handle: str) -> bool:
        if not other.is_alive() and not sent:  # once, mid-walk of the first delete
            other.start()
            if not queue._messages_lock._is_owned():
                other.join()  # nothing holds it back: it runs to its end now
        return bool(had_receipt_handle(receipt_handle))

    walked.had_receipt_handle = pausing  # type: ignore[method-assign]
    backend.delete_message("events", handles["first"])
    other.join()
    assert sent
    assert sorted(m.body for m in queue._messages) == ["other", "sent meanwhile"]
