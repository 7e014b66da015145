"""The steps Lambda: step calls of invocations, at a function URL (no HTTP API fee).

Function URL events have the HTTP API's payload format 2.0, so the API's resolver answers
them. The URL is public (auth NONE): before anything else, a request that is not a POST of
an invocation call (a step call, or, protocol 1.5, a history or payload read) or whose
invocation token does not verify (its HMAC and expiry, no lookup) is refused from the raw
event (`api.function_url`), so junk costs a few microseconds of an environment, not a pass
through the resolver.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock
from ezgh_engine.api import function_url
from ezgh_engine.api.app import resolver
from ezgh_engine.api.errors import STEP_CALLS_PATH, logger
from ezgh_engine.api.events import as_json_request
from ezgh_engine.config import settings
from ezgh_engine.core import tokens
from ezgh_engine.errors import Unauthorized
from ezgh_engine.observability import emit, logs

logs.configure("ezgh-steps")

STEPS_PATH = STEP_CALLS_PATH
# What an invocation calls with its token: step calls, and its history's pages and the
# values its request gave as references (protocol 1.5).
INVOCATION_PATHS = frozenset({STEPS_PATH, "/v1/invocations/history", "/v1/invocations/payload"})


def _invocation_token(event: function_url.Event) -> None:
    token = function_url.bearer_token(event)
    if token is None:
        raise Unauthorized("missing invocation token (Authorization: Bearer <token>)")
    tokens.verify(settings().token_secret, token, clock.now_ms())


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Refuse what is not a signed invocation call at once; route the rest."""
    _, path = function_url.request_line(event)
    served = path if path in INVOCATION_PATHS else STEPS_PATH  # (another path: 404)
    refused = function_url.admit(event, method="POST", path=served, authenticate=_invocation_token)
    if refused is not None:
        return refused
    logger.set_correlation_id((event.get("requestContext") or {}).get("requestId"))
    with emit.flushing():  # the throttles its clients met
        return resolver.resolve(as_json_request(event), context)
