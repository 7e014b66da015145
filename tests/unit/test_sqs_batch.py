"""SQS handlers answer Lambda through Powertools' batch utility (service/sqs_batch):
a record whose handler raises, or asks for redelivery, is reported in `batchItemFailures`;
the rest are done. The local runtime's poller deletes exactly the others (tests/local)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.local import events
from ezgh_engine.service import sqs_batch


def _event(*bodies: str) -> dict[str, Any]:
    return {
        "Records": [
            {"messageId": f"m{i}", "body": body, "eventSource": "aws:sqs"}
            for i, body in enumerate(bodies)
        ]
    }


def _handler(record: dict[str, Any]) -> None:
    if record["body"] == "raise":
        raise RuntimeError("boom")
    if record["body"] == "later":
        raise sqs_batch.Redeliver("not yet")


def test_failed_and_held_records_are_reported_and_the_others_are_done() -> None:
    answer = sqs_batch.process(_event("ok", "raise", "ok", "later"), _handler)
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": "m3"}]}
    batch = ["m0", "m1", "m2", "m3"]
    assert events.failed_in_batch(answer, batch) == {"m1", "m3"}  # as the local poller reads it


def test_a_batch_that_fails_whole_is_answered_not_raised() -> None:
    answer = sqs_batch.process(_event("raise", "later"), _handler)
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m1"}]}


def test_a_batch_that_succeeds_and_an_empty_one_report_nothing() -> None:
    assert sqs_batch.process(_event("ok", "ok"), _handler) == {"batchItemFailures": []}
    assert sqs_batch.process({"Records": []}, _handler) == {"batchItemFailures": []}
    assert events.failed_in_batch(sqs_batch.process(_event("ok"), _handler), ["m0"]) == set()


def test_the_handler_sees_the_record_as_lambda_sent_it() -> None:
    seen: list[dict[str, Any]] = []
    sqs_batch.process(_event("ok"), seen.append)
    assert seen == _event("ok")["Records"]


def test_an_answer_handler_false_means_redeliver() -> None:
    handler = sqs_batch.from_answer(lambda record: record["body"] == "ok", "test message")
    assert sqs_batch.failed_ids(_event("ok", "no")["Records"], handler) == ["m1"]
