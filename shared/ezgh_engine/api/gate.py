"""Who gets as far as a route's validation: the caller is authenticated, and an API key held to
its rate, before anything reads the shape of the request.

Powertools validates a request (path, query, headers, body) in a middleware that runs before
the route's function, and the routes authenticated inside their function: a caller with a bad
key (or none) was told `400 validation_error`, naming fields, before `401`, and so learned the
API's shapes without a key. The gate runs in front of that validation, for every route:

- a route under `/v1/organizations/<orgId>/projects/<projectId>`: the API key (`401`; `404` for
  another project's path, as the routes answer), then the key's rate (`429 rate_limited`,
  `service.rate_limits`). The principal is kept for the route (`auth.principal_for`), so the
  key is read once per request;
- a route whose OpenAPI security is the invocation token (step calls, pull outcomes and
  heartbeats): the token's signature and expiry (`401`), a pure check with no lookup;
- every other route (health, the OpenAPI document, the console's files, a callback's URL,
  whose token the route looks up before it reads the body) passes.

A request matching no route never reaches the gate's checks: it is answered 404, or 405 when
its path is served with other methods (`api.errors`).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.middlewares import BaseMiddlewareHandler, NextMiddleware

from ezgh_engine import clock
from ezgh_engine.api import auth
from ezgh_engine.api import models as m
from ezgh_engine.config import settings
from ezgh_engine.core import tokens
from ezgh_engine.errors import Unauthorized
from ezgh_engine.service import rate_limits

# The path parameters of every project route (`/v1/organizations/<orgId>/projects/<projectId>`).
PROJECT_PARAMS = ("orgId", "projectId")


def check(app: APIGatewayHttpResolver) -> auth.Authenticated | None:
    """Authenticate the current request for its route (see the module's docstring); answers
    what the route may reuse, or None. Raises the error to answer instead."""
    route = app.context.get("_route")
    args: dict[str, Any] = app.context.get("_route_args") or {}
    if all(name in args for name in PROJECT_PARAMS):
        principal = auth.authenticate_key(app.current_event, args["orgId"], args["projectId"])
        rate_limits.admit(principal.key_id)
        return auth.Authenticated(app.current_event.raw_event, principal)
    if getattr(route, "security", None) == m.INVOCATION_TOKEN:
        token = auth.bearer_token(app.current_event)
        if token is None:
            raise Unauthorized("missing invocation token (Authorization: Bearer <token>)")
        tokens.verify(settings().token_secret, token, clock.now_ms())
    return None


class AuthenticateFirst(BaseMiddlewareHandler[APIGatewayHttpResolver]):
    """Powertools' request validation, with `check` in front of it."""

    def __init__(self, validation: Any) -> None:
        super().__init__()
        self._validation = validation

    def handler(
        self, app: APIGatewayHttpResolver, next_middleware: NextMiddleware
    ) -> Response[Any]:
        with auth.authenticated(check(app)):
            answer: Response[Any] = self._validation(app, next_middleware)
            return answer


def install(resolver: APIGatewayHttpResolver) -> None:
    """Put the gate in front of the resolver's request validation (before any route runs:
    Powertools builds each route's middleware stack on its first request)."""
    validation = getattr(resolver, "_request_validation_middleware", None)
    if validation is None:  # Powertools moved it: refuse to run without the gate
        raise RuntimeError("Powertools' request validation middleware was not found")
    resolver._request_validation_middleware = AuthenticateFirst(validation)  # type: ignore[assignment]
