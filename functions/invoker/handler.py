"""Lambda handler for the invocations queue: each message to its handler, partial batch answer."""

from __future__ import annotations

from typing import Any

from ezgh_engine.observability import emit, logs, queues
from ezgh_engine.service.invocation_queue import lambda_handler

logger = logs.configure("ezgh-invoker")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    with emit.flushing():
        queues.record_batch(event, "invocations")
        return lambda_handler(event, context)
