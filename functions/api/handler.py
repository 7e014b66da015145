"""The API Lambda: API Gateway HTTP API events in, the resolver's answers out."""

from __future__ import annotations

from typing import Any

from ezgh_engine.api.app import resolver
from ezgh_engine.api.errors import logger
from ezgh_engine.api.events import as_json_request
from ezgh_engine.observability import emit, logs

logs.configure("ezgh-api")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Route one request (tagging its log lines with API Gateway's request ID)."""
    logger.set_correlation_id((event.get("requestContext") or {}).get("requestId"))
    with emit.flushing():  # the throttles its clients met
        return resolver.resolve(as_json_request(event), context)
