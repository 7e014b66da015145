"""The flows Lambda: EzFlow's graph interpreter (the engine's own push app) at its function URL.

The URL is public (auth NONE, as a push app's), and this function holds what a push app does
not: the token secret (its signing key is derived from it) and reads of the registry. So a
request is refused with 401 before any work (no secret read, no body parsed, no workflow
described) unless it is a POST that carries the engine's signature headers; then the SDK
verifies the signature itself (`interpreter/hosting.py`), as for any push app. The user's
expressions and URLs never run here: they go to the `sandbox` function.
"""

from __future__ import annotations

import json
from typing import Any

from ezgh_engine.adapters.push import SIGNATURE_HEADER, TIMESTAMP_HEADER
from ezgh_engine.interpreter.app import ezgh_flows
from ezgh_engine.interpreter.hosting import signing_key

_SIGNED = (TIMESTAMP_HEADER.lower(), SIGNATURE_HEADER.lower())


def _refused(event: Any) -> str | None:
    """Why a request is refused at once (None: it may be the engine's; verify it)."""
    if not isinstance(event, dict):
        return "not a function URL request"
    context = event.get("requestContext") or {}
    method = str((context.get("http") or {}).get("method") or event.get("httpMethod") or "")
    if method.upper() != "POST":
        return "only the engine's signed POST requests are answered here"
    headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
    if not all(headers.get(name) for name in _SIGNED):
        return "missing the engine's signature"
    return None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer one signed request of the engine (anything else is 401, before any work)."""
    problem = _refused(event)
    if problem is not None:
        body = {"error": {"code": "unauthorized", "message": problem}}
        return {
            "statusCode": 401,
            "headers": {"content-type": "application/json"},
            "body": json.dumps(body),
        }
    if not ezgh_flows.signing_key:
        ezgh_flows.signing_key = signing_key()
    return ezgh_flows.lambda_handler(event, context)
