"""Lambda handler for the `notifications` queue: run-ended messages to the apps' queues."""

from __future__ import annotations

from typing import Any

from ezgh_engine.observability import emit, logs, queues
from ezgh_engine.service.notifications import lambda_handler

logger = logs.configure("ezgh-notify")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    with emit.flushing():
        queues.record_batch(event, "notifications")
        return lambda_handler(event, context)
