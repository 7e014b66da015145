"""SQS batches on Powertools' batch utility: one record handler, partial batch responses.

Every SQS-fed function (invoker, deliver, notify) answers Lambda with
`process_partial_response`: a record whose handler raises is reported in `batchItemFailures`
and comes back (the event source mappings have `ReportBatchItemFailures`, and the local
runtime's poller honours the same answer); the others are deleted. A handler that wants its
message back later without it being an error raises `Redeliver`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from ezgh_engine.service import at_once

log = logging.getLogger(__name__)

RecordHandler = Callable[[dict[str, Any]], None]


class Redeliver(Exception):
    """Raised by a record handler: leave this message in the queue (it comes back later)."""


def process(event: dict[str, Any], handler: RecordHandler, context: Any = None) -> dict[str, Any]:
    """Lambda's answer for an SQS `event`: `{"batchItemFailures": [...]}`.

    `handler` gets each record as Lambda sent it (a dict); it raises to leave the message in
    the queue. A batch whose every record fails is answered like any other (no exception), so
    a held-back batch is not logged as a failed invocation."""
    if not event.get("Records"):
        return {"batchItemFailures": []}
    # A processor per call: it keeps the batch's state, and the local runtime calls one
    # function's handler from several threads at once.
    processor = BatchProcessor(EventType.SQS, raise_on_entire_batch_failure=False)

    def on_record(record: SQSRecord) -> None:
        handler(record.raw_event)

    return dict(process_partial_response(event, on_record, processor, context))


def process_at_once(event: dict[str, Any], handler: RecordHandler) -> dict[str, Any]:
    """`process`, every record handled at the same time on a thread of its own (for handlers
    that wait on the network: the invoker's pushes). One record's failure is reported for
    it alone; the others are answered as they went."""
    records = list(event.get("Records") or [])
    answers = at_once.run_all([_bind(handler, record) for record in records])
    return {
        "batchItemFailures": [
            {"itemIdentifier": str(record.get("messageId", ""))}
            for record, answer in zip(records, answers, strict=True)
            if isinstance(answer, Exception)
        ]
    }


def _bind(handler: RecordHandler, record: dict[str, Any]) -> Callable[[], None]:
    return lambda: handler(record)


def failed_ids(records: list[dict[str, Any]], handler: RecordHandler) -> list[str]:
    """The message IDs of `records` to leave in the queue (as `process` reports them)."""
    answer = process({"Records": records}, handler)
    return [str(item["itemIdentifier"]) for item in answer["batchItemFailures"]]


def from_answer(handler: Callable[[dict[str, Any]], bool], what: str) -> RecordHandler:
    """A record handler of `handler`, which answers False for a message that must come back
    (and may raise for one that failed: logged with the message ID, then reported)."""

    def on_record(record: dict[str, Any]) -> None:
        try:
            done = handler(record)
        except Exception:
            log.exception("%s %s raised", what, record.get("messageId"))
            raise
        if not done:
            raise Redeliver(f"{what} {record.get('messageId')} not done yet")

    return on_record
