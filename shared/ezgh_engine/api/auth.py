"""Who is calling: the `Authorization: Bearer <api key>` header of the current request.

Missing, malformed, unknown or revoked keys are `401 unauthorized`; a key used on a path of
another organization or project is `404 not_found` (the path names nothing the key can see).
The gate (`api.gate`) authenticates a project route's key before its validation and keeps the
principal here for the rest of the request, so the route's `principal_for` reads no key twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from ezgh_engine.core.models import Principal
from ezgh_engine.service import auth


@dataclass(frozen=True)
class Authenticated:
    """The principal the gate authenticated for one event (the raw event, by identity)."""

    event: Any
    principal: Principal


_current: ContextVar[Authenticated | None] = ContextVar("ezgh_authenticated", default=None)


@contextlib.contextmanager
def authenticated(done: Authenticated | None) -> Iterator[None]:
    """Keep `done` for the routes of this request only."""
    reset = _current.set(done)
    try:
        yield
    finally:
        _current.reset(reset)


def bearer(event: APIGatewayProxyEventV2) -> str | None:
    """The raw Authorization header (API Gateway lower-cases header names)."""
    headers = event.headers or {}
    value = headers.get("authorization") or headers.get("Authorization")
    return value if isinstance(value, str) else None


def authenticate_key(event: APIGatewayProxyEventV2, org_id: str, project_id: str) -> Principal:
    """The request's API key as a principal, checked against the path's organization and
    project (one read of the key)."""
    principal = auth.authenticate(bearer(event))
    auth.check_project(principal, org_id, project_id)
    return principal


def principal_for(event: APIGatewayProxyEventV2, org_id: str, project_id: str) -> Principal:
    """The caller's principal, checked against the path's organization and project: the one
    the gate authenticated for this event, else read now."""
    done = _current.get()
    if done is not None and done.event is event.raw_event:
        auth.check_project(done.principal, org_id, project_id)
        return done.principal
    return authenticate_key(event, org_id, project_id)


def bearer_token(event: APIGatewayProxyEventV2) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None (step calls' invocation token)."""
    scheme, _, token = (bearer(event) or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
