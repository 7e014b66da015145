"""Lambda handler for the `runs` table's stream, second reader: what runs do, as metrics,
log lines and trace segments (`ezgh_engine.service.observe`)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.observability import logs
from ezgh_engine.service.observe import handle_batch

logger = logs.configure("ezgh-observe")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    handle_batch(event.get("Records", []))
    return {"batchItemFailures": []}
