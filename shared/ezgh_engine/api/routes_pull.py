"""Routes for pull apps: workers announce themselves and long-poll tasks (API key), and post
outcomes and heartbeats of a task (its invocation token). Logic in `service.pull`."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, Field
from pydantic import ValidationError as PydanticError

from ezgh_engine.api import models as m
from ezgh_engine.api.auth import bearer_token, principal_for
from ezgh_engine.api.errors import validation_message
from ezgh_engine.api.responses import json_response, no_content
from ezgh_engine.core.validation import MAX_APP_WORKFLOWS
from ezgh_engine.errors import Unauthorized, ValidationError
from ezgh_engine.service import pull

router = APIGatewayHttpRouter()

PREFIX = "/v1/organizations/<orgId>/projects/<projectId>"
WorkflowName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class AnnounceRequest(BaseModel):
    workerId: Annotated[str, Field(min_length=1, max_length=128)]
    workflows: Annotated[list[WorkflowName], Field(max_length=MAX_APP_WORKFLOWS)]
    # The newest invocation protocol the worker speaks (1.5 and later say it): the app's
    # tasks are written in it (docs/protocol.md, "Versions").
    protocol: Annotated[str, Field(pattern=r"^[0-9]{1,4}(\.[0-9]{1,4}){0,3}$")] | None = None


class PollRequest(BaseModel):
    waitSeconds: Annotated[int, Field(ge=0, le=20)] = 20
    workerId: Annotated[str, Field(max_length=128)] | None = None


@router.post(
    f"{PREFIX}/apps/<appId>/workers",
    security=m.API_KEY,
    summary="Announce a pull app's worker",
    responses=m.doc(200, m.AppAnswer, "the app, synced"),
)
def announce(
    orgId: str, projectId: str, appId: str, body: Annotated[AnnounceRequest, Body()]
) -> Response[Any]:
    principal = principal_for(router.current_event, orgId, projectId)
    app = pull.announce(
        principal,
        appId,
        worker_id=body.workerId,
        workflows=body.workflows,
        protocol=body.protocol,
    )
    return json_response(200, app.to_api())


@router.post(
    f"{PREFIX}/apps/<appId>/tasks/poll",
    security=m.API_KEY,
    summary="Long-poll a pull app's next task (at most 20 s)",
    responses=m.doc(200, None, "a task: the invoke request, with taskId (204: none)"),
)
def poll(orgId: str, projectId: str, appId: str) -> Response[Any]:
    principal = principal_for(router.current_event, orgId, projectId)
    raw = router.current_event.json_body if router.current_event.body else None
    wait = pull.MAX_POLL_SECONDS
    if isinstance(raw, dict) and raw:
        try:
            wait = PollRequest.model_validate(raw).waitSeconds
        except PydanticError as exc:
            raise ValidationError(validation_message([dict(e) for e in exc.errors()])) from None
    task = pull.poll(principal, appId, wait)
    return no_content() if task is None else json_response(200, task)


@router.post(
    f"{PREFIX}/apps/<appId>/tasks/access",
    security=m.API_KEY,
    summary="Credentials to long-poll a pull app's task queue directly (one hour)",
    responses=m.doc(
        200,
        None,
        "{queueUrl, endpointUrl, region, waitSeconds, expiresInSeconds, credentials}: receive "
        "and delete on this app's queue only; claim each task with a heartbeat (409: none "
        "vended, use tasks/poll)",
    ),
)
def access(orgId: str, projectId: str, appId: str) -> Response[Any]:
    principal = principal_for(router.current_event, orgId, projectId)
    return json_response(200, pull.queue_access(principal, appId))


def _token() -> str:
    token = bearer_token(router.current_event)
    if token is None:
        raise Unauthorized("missing invocation token (Authorization: Bearer <token>)")
    return token


@router.post(
    "/v1/invocations/outcome",
    security=m.INVOCATION_TOKEN,
    summary="A pull worker's outcome of a task (protocol: the invoke answer plus taskId)",
    responses=m.doc(200, None, "{result: ok}"),
)
def outcome(body: Annotated[dict[str, Any], Body()]) -> Response[Any]:
    return json_response(200, pull.post_outcome(_token(), body))


@router.post(
    "/v1/invocations/heartbeat",
    security=m.INVOCATION_TOKEN,
    summary="Extend a pull task's lease while its worker runs it",
    responses=m.doc(200, None, "{leaseSeconds, leaseExpiresAt}"),
)
def heartbeat(body: Annotated[dict[str, Any], Body()]) -> Response[Any]:
    return json_response(200, pull.heartbeat(_token(), body))
