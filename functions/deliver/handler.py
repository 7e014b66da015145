"""Lambda handler for subscriptions: one EZGH queue message, delivered to its subscription.

Its event source mappings are made at run time, one per subscription (see
`ezgh_engine.adapters.event_sources`), with batch size 1 and ReportBatchItemFailures.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine.observability import emit, logs, queues
from ezgh_engine.service.deliver import lambda_handler

logger = logs.configure("ezgh-deliver")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    with emit.flushing():
        queues.record_batch(event, "subscriptions")
        return lambda_handler(event, context)
