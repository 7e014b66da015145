"""The door of a public Lambda function URL (auth NONE): refuse what is not ours before any work.

Anyone on the internet can invoke a function URL, and every request is an invocation that
holds one of the function's reserved environments until it is answered. So a function URL's
handler answers a request that is not for it (another path or method) or carries no valid
credential from the raw event, with no routing, validation, body parsing or I/O: each such
refusal is a few microseconds of one environment (docs/benchmarks.md, "Junk at the function
URLs"), and a flood of them is throttled by Lambda at the function's reserved concurrency
rather than stalling the runs whose step calls share it.

`admit` takes the check that fits the door (the steps function: the invocation token's HMAC;
the flows function: the engine's request signature) and answers the refusal to return, or
None to go on. Answers are in the contract's error shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ezgh_engine.errors import EngineError

Event = Mapping[str, Any]


def refusal(status: int, code: str, message: str) -> dict[str, Any]:
    """A function URL answer in the contract's error shape."""
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"error": {"code": code, "message": message}}),
    }


def request_line(event: Event) -> tuple[str, str]:
    """The request's method and path (payload format 2.0)."""
    http = (event.get("requestContext") or {}).get("http") or {}
    return str(http.get("method") or ""), str(event.get("rawPath") or "")


def header(event: Event, name: str) -> str | None:
    """A request header (function URLs lower-case their names)."""
    value = (event.get("headers") or {}).get(name.lower())
    return value if isinstance(value, str) else None


def bearer_token(event: Event) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None."""
    scheme, _, token = (header(event, "authorization") or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def admit(
    event: Event, *, method: str, path: str, authenticate: Callable[[Event], None]
) -> dict[str, Any] | None:
    """None when `event` is `method path` and `authenticate(event)` returns; else the answer
    to give at once: 404 for another path, 405 (with `Allow`) for another method there, the
    error `authenticate` raised (an `EngineError`: 401 in practice)."""
    got_method, got_path = request_line(event)
    if got_path != path:
        return refusal(404, "not_found", f"this URL serves only {method} {path}")
    if got_method != method:
        answer = refusal(405, "method_not_allowed", f"this URL serves only {method} {path}")
        answer["headers"]["allow"] = method
        return answer
    try:
        authenticate(event)
    except EngineError as err:
        return refusal(err.status, err.code, err.message)
    return None
