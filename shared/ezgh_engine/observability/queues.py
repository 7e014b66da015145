"""Queue records as metrics: how long each message waited before its first receipt
(`QueueAge`, seconds from SQS's `SentTimestamp`; on the invocations queue this includes a
message's own delay: short timers and held invocations are delayed on purpose) and how many
were received again (`Redeliveries`: `ApproximateReceiveCount` over 1). Counted by the
handler of each SQS-fed function, once per record, with the queue's role as `Queue`
(`names.QUEUES`)."""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock
from ezgh_engine.observability import metrics, names


def record_batch(event: Any, queue: str) -> None:
    """Count an SQS event's records (anything else, e.g. an asynchronous invocation's
    event, has none). Never raises."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list):
        return
    now_ms = clock.now_ms()
    for record in records:
        attributes = record.get("attributes") if isinstance(record, dict) else None
        if not isinstance(attributes, dict) or record.get("eventSource") != "aws:sqs":
            continue
        try:
            received = int(attributes.get("ApproximateReceiveCount") or 1)
            sent_ms = int(attributes.get("SentTimestamp") or now_ms)
        except (TypeError, ValueError):
            continue
        if received > 1:
            metrics.add(names.REDELIVERIES, 1, queue=queue)
        else:
            metrics.add(names.QUEUE_AGE, max(0, now_ms - sent_ms) / 1000, queue=queue)
