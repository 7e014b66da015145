"""The steps Lambda: step calls of invocations, at a function URL (no HTTP API fee).

Function URL events have the HTTP API's payload format 2.0, so the API's resolver answers
them; every other path is refused here, so this URL exposes nothing but step calls.
"""

from __future__ import annotations

import json
from typing import Any

from ezgh_engine.api.app import resolver
from ezgh_engine.api.errors import logger
from ezgh_engine.api.events import as_json_request

STEPS_PATH = "/v1/invocations/steps"


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Route a step call; anything else is 404 in the contract's error shape."""
    logger.set_correlation_id((event.get("requestContext") or {}).get("requestId"))
    method = ((event.get("requestContext") or {}).get("http") or {}).get("method")
    if event.get("rawPath") != STEPS_PATH or method != "POST":
        error = {"code": "not_found", "message": "this URL serves only POST " + STEPS_PATH}
        return {
            "statusCode": 404,
            "headers": {"content-type": "application/json"},
            "body": json.dumps({"error": error}),
        }
    return resolver.resolve(as_json_request(event), context)
