"""Routes for apps and API keys (under `/v1/organizations/{orgId}/projects/{projectId}`).

Each route: find the caller, call one service function, shape the answer. Errors are mapped
in `api.errors`; permissions are decided in the services.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from ezgh_engine.api import models as m
from ezgh_engine.api import pages
from ezgh_engine.api.auth import principal_for
from ezgh_engine.api.idempotency import Answer, answer_once
from ezgh_engine.api.models import PageCursor
from ezgh_engine.api.responses import json_response, no_content
from ezgh_engine.core.models import Principal
from ezgh_engine.service import apps, auth

router = APIGatewayHttpRouter()

PREFIX = "/v1/organizations/<orgId>/projects/<projectId>"
IdempotencyKey = Annotated[
    str | None, Header(alias="idempotency-key", description="replays the first answer for 48 h")
]


def _by(field: str) -> Callable[[dict[str, Any]], str]:
    """A list's order: the field its items are sorted by (`pages.by_size`)."""
    return lambda item: str(item[field])


def _caller(org_id: str, project_id: str) -> Principal:
    return principal_for(router.current_event, org_id, project_id)


# --- apps ----------------------------------------------------------------------------------


@router.post(
    f"{PREFIX}/apps",
    security=m.API_KEY,
    summary="Create an app",
    responses=m.doc(201, m.CreatedAppAnswer, "the app, with its signingKey (this answer only)"),
)
def create_app(
    orgId: str,
    projectId: str,
    body: Annotated[m.CreateAppRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def run() -> Answer:
        app = apps.create_app(principal, name=body.name, kind=body.kind, url=body.url)
        return 201, {**app.to_api(), "signingKey": app.signing_key}

    return answer_once(principal, "POST /apps", idempotency_key, body.model_dump(mode="json"), run)


@router.get(
    f"{PREFIX}/apps",
    security=m.API_KEY,
    summary="List apps",
    description=(
        "The apps this key may read: those it holds a workflows.* grant on (on the app's "
        "name or one of its workflows), or all with such a grant on every resource"
    ),
    responses=m.doc(200, m.AppList, "the project's apps this key may read"),
)
def list_apps(orgId: str, projectId: str, cursor: PageCursor = None) -> Response[Any]:
    principal = _caller(orgId, projectId)
    found = [a.to_api() for a in apps.list_apps(principal)]
    scope = f"apps:{principal.project_id}"
    return json_response(200, pages.by_size("apps", found, _by("name"), cursor=cursor, scope=scope))


@router.get(
    f"{PREFIX}/apps/<appId>",
    security=m.API_KEY,
    summary="Get an app by UUID, slug or name",
    responses=m.doc(200, m.AppAnswer, "the app"),
)
def get_app(orgId: str, projectId: str, appId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, apps.read_app(principal, appId).to_api())


@router.patch(
    f"{PREFIX}/apps/<appId>",
    security=m.API_KEY,
    summary="Update an app's url or notifications",
    responses=m.doc(200, m.AppAnswer, "the app"),
)
def update_app(
    orgId: str, projectId: str, appId: str, body: Annotated[m.UpdateAppRequest, Body()]
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    given = body.model_fields_set  # absent fields stay as they are; null is a value
    changes: dict[str, Any] = {}
    if "url" in given:
        changes["url"] = body.url
    if "notifications" in given:
        changes["notifications"] = (
            body.notifications.model_dump() if body.notifications is not None else None
        )
    return json_response(200, apps.update_app(principal, appId, **changes).to_api())


@router.post(
    f"{PREFIX}/apps/<appId>/sync",
    security=m.API_KEY,
    summary="Sync a push app",
    responses=m.doc(200, m.AppAnswer, "the synced app"),
)
def sync_app(orgId: str, projectId: str, appId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, apps.sync_app(principal, appId).to_api())


@router.delete(
    f"{PREFIX}/apps/<appId>",
    security=m.API_KEY,
    summary="Delete an app",
    responses=m.doc(204, None, "deleted"),
)
def delete_app(orgId: str, projectId: str, appId: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    apps.delete_app(principal, appId)
    return no_content()


# --- API keys ------------------------------------------------------------------------------


@router.post(
    f"{PREFIX}/apiKeys",
    security=m.API_KEY,
    summary="Create an API key",
    responses=m.doc(201, m.CreatedApiKeyAnswer, "the key, with its secret (this answer only)"),
)
def create_api_key(
    orgId: str,
    projectId: str,
    body: Annotated[m.CreateApiKeyRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    permissions = tuple((p.action, p.resource) for p in body.permissions)

    def run() -> Answer:
        key, secret = auth.create_api_key(principal, name=body.name, permissions=permissions)
        return 201, {**key.to_api(), "key": secret}

    return answer_once(
        principal, "POST /apiKeys", idempotency_key, body.model_dump(mode="json"), run
    )


@router.get(
    f"{PREFIX}/apiKeys",
    security=m.API_KEY,
    summary="List API keys (no secrets)",
    description=(
        "A page of the keys this key may manage (every permission of each one is one this "
        "key holds, as creating or revoking it needs): an admin key sees every key"
    ),
    responses=m.doc(200, m.ApiKeyList, "a page of the project's keys"),
)
def list_api_keys(
    orgId: str,
    projectId: str,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query()] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def fetch(count: int) -> tuple[list[dict[str, Any]], str | None]:
        found, following = auth.list_api_keys(principal, limit=count, cursor=cursor)
        return [k.to_api() for k in found], following

    found, following = pages.fewer(fetch, limit)
    return json_response(200, {"apiKeys": found, "nextCursor": following})


@router.delete(
    f"{PREFIX}/apiKeys/<id>",
    security=m.API_KEY,
    summary="Revoke an API key",
    responses=m.doc(204, None, "revoked"),
)
def delete_api_key(orgId: str, projectId: str, id: str) -> Response[Any]:
    principal = _caller(orgId, projectId)
    auth.delete_api_key(principal, id)
    return no_content()
