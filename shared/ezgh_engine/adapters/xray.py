"""X-Ray: the run's trace segments (`observability.traces`)."""

from __future__ import annotations

import logging

from ezgh_engine.adapters.aws import client

log = logging.getLogger(__name__)


def put_segments(documents: list[str]) -> None:
    """`PutTraceSegments` of segment documents (JSON text each); those X-Ray refused are
    logged (their IDs and why)."""
    answer = client("xray").put_trace_segments(TraceSegmentDocuments=documents)
    for refused in answer.get("UnprocessedTraceSegments") or ():
        log.warning("X-Ray refused segment %s: %s", refused.get("Id"), refused.get("Message"))
