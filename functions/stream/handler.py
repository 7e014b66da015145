"""Lambda handler for the `runs` table's stream (the outbox)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.observability import emit, logs
from ezgh_engine.service.stream import handle_batch

logger = logs.configure("ezgh-stream")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    def time_left() -> float:
        return float(context.get_remaining_time_in_millis()) / 1000

    with emit.flushing():  # the throttles its clients met
        failed = handle_batch(event.get("Records", []), time_left if context is not None else None)
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in failed]}
