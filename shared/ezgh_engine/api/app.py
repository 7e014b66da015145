"""The HTTP API: one Powertools resolver with every route, request validation on, errors
mapped in `api.errors`, and its OpenAPI document at `GET /v1/openapi.json`."""

from __future__ import annotations

import re
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types

from ezgh_engine.api import errors, gate
from ezgh_engine.api import models as m
from ezgh_engine.api.routes_apps import router as apps_router
from ezgh_engine.api.routes_console import router as console_router
from ezgh_engine.api.routes_flows import router as flows_router
from ezgh_engine.api.routes_pull import router as pull_router
from ezgh_engine.api.routes_queues import router as queues_router
from ezgh_engine.api.routes_runs import router as runs_router
from ezgh_engine.api.routes_schedules import router as schedules_router

TITLE = "EZGH Workflows (self-hosted)"
VERSION = "1.0.0"


def _parse_body(raw: str) -> Any:
    """`errors.parse_json_body` with the limit of the request's path (a step call's and a
    pull worker's outcome are larger: `errors.MAX_STEP_CALL_BYTES`)."""
    large = resolver.current_event.path in errors.LARGE_BODY_PATHS
    return errors.parse_json_body(
        raw, errors.MAX_STEP_CALL_BYTES if large else errors.MAX_BODY_BYTES
    )


resolver = APIGatewayHttpResolver(
    enable_validation=True,
    # Size (413) and JSON (400) checks run here, before any route or validation sees a body.
    json_body_deserializer=_parse_body,
)
errors.install(resolver)
# Authentication (and an API key's rate) before validation, on every route.
gate.install(resolver)


@resolver.get(
    "/v1/health",
    summary="Health",
    responses={200: {"description": "ok", "content": {"application/json": {"model": m.Health}}}},
)
def health() -> dict[str, str]:
    return {"status": "ok"}


_openapi_cache: dict[str, str] = {}


@resolver.get("/v1/openapi.json", include_in_schema=False)
def openapi() -> Response[Any]:
    # Generating the schema walks every route; do it once per process.
    if "json" not in _openapi_cache:
        # Powertools' OpenAPI document models (a hundred pydantic classes, a third of a
        # second to build) are needed by this route only: not at every cold start.
        from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

        _openapi_cache["json"] = resolver.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            security_schemes={
                "apiKey": HTTPBearer(description="Authorization: Bearer <api key>"),
                "invocationToken": HTTPBearer(description="the invocation's api.token"),
            },
        )
    return Response(
        status_code=200, content_type=content_types.APPLICATION_JSON, body=_openapi_cache["json"]
    )


resolver.include_router(apps_router)
resolver.include_router(runs_router)
resolver.include_router(schedules_router)  # cron schedules
resolver.include_router(pull_router)  # pull apps and their workers' tasks
resolver.include_router(queues_router)  # queues and subscriptions
resolver.include_router(console_router)  # the web console's static files
resolver.include_router(flows_router)  # EzFlow graph workflows


def route_keys() -> list[str]:
    """Each route's HTTP API route key (`"POST /v1/callbacks/{token}"`), in the resolver's
    order: infra gives the HTTP API these routes, all to the api function, so that its
    access log names the route (with `{token}`, never the token) instead of the path.
    A route whose path is a regular expression (a payload's nested path) has none: it is
    served through `$default`."""
    routes = [*resolver._static_routes, *resolver._dynamic_routes]
    return [
        f"{route.method} {route.openapi_path}"
        for route in routes
        if re.fullmatch(r"[A-Za-z0-9/{}._-]+", route.openapi_path)
    ]
