"""Who is calling: the `Authorization: Bearer <api key>` header of the current request.

Missing, malformed, unknown or revoked keys are `401 unauthorized`; a key used on a path of
another organization or project is `404 not_found` (the path names nothing the key can see).
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from ezgh_engine.core.models import Principal
from ezgh_engine.service import auth


def bearer(event: APIGatewayProxyEventV2) -> str | None:
    """The raw Authorization header (API Gateway lower-cases header names)."""
    headers = event.headers or {}
    value = headers.get("authorization") or headers.get("Authorization")
    return value if isinstance(value, str) else None


def principal_for(event: APIGatewayProxyEventV2, org_id: str, project_id: str) -> Principal:
    """The caller's principal, checked against the path's organization and project."""
    principal = auth.authenticate(bearer(event))
    auth.check_project(principal, org_id, project_id)
    return principal


def bearer_token(event: APIGatewayProxyEventV2) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None (step calls' invocation token)."""
    scheme, _, token = (bearer(event) or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
