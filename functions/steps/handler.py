"""The steps Lambda: step calls of invocations, at a function URL (no HTTP API fee).

Function URL events have the HTTP API's payload format 2.0, so the API's resolver answers
them; every other path is refused here, so this URL exposes nothing but the invocation
calls: step calls, and (protocol 1.5) the history and payload reads.
"""

from __future__ import annotations

import json
from typing import Any

from ezgh_engine.api.app import resolver
from ezgh_engine.api.errors import logger
from ezgh_engine.api.events import as_json_request

STEPS_PATH = "/v1/invocations/steps"
# What an invocation calls with its token: step calls, and its history's pages and the
# values its request gave as references (protocol 1.5).
INVOCATION_PATHS = frozenset({STEPS_PATH, "/v1/invocations/history", "/v1/invocations/payload"})


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Route a step call; anything else is 404 in the contract's error shape."""
    logger.set_correlation_id((event.get("requestContext") or {}).get("requestId"))
    method = ((event.get("requestContext") or {}).get("http") or {}).get("method")
    if event.get("rawPath") not in INVOCATION_PATHS or method != "POST":
        served = ", ".join(sorted(INVOCATION_PATHS))
        error = {"code": "not_found", "message": "this URL serves only POST " + served}
        return {
            "statusCode": 404,
            "headers": {"content-type": "application/json"},
            "body": json.dumps({"error": error}),
        }
    return resolver.resolve(as_json_request(event), context)
