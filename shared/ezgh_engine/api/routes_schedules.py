"""Routes for schedules (under the project prefix): create, list, get, update, pause, resume,
delete. Logic and permissions are in `ezgh_engine.service.schedules`."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, Field

from ezgh_engine.api import models as m
from ezgh_engine.api import pages
from ezgh_engine.api.auth import principal_for
from ezgh_engine.api.errors import check_value_size
from ezgh_engine.api.idempotency import Answer, answer_once
from ezgh_engine.api.models import PageCursor
from ezgh_engine.api.responses import json_response, no_content
from ezgh_engine.core.models import Principal
from ezgh_engine.service import schedules

router = APIGatewayHttpRouter()

PREFIX = "/v1/organizations/<orgId>/projects/<projectId>"
SCHEDULE = f"{PREFIX}/schedules/<scheduleId>"


class CreateScheduleRequest(BaseModel):
    appId: Annotated[str, Field(min_length=1, max_length=128)]
    workflow: Annotated[str, Field(min_length=1, max_length=64)]
    # Checked by the service (croniter, zoneinfo) so the message names the field.
    cron: Annotated[str, Field(min_length=1, max_length=256)]
    timezone: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    input: Any = None


class UpdateScheduleRequest(BaseModel):
    workflow: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    cron: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    timezone: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    input: Any = None


class ScheduleAnswer(BaseModel):
    id: str
    slug: str
    appId: str
    workflow: str
    cron: str
    timezone: str
    input: Any = None
    status: str
    nextRunAt: str | None
    keyId: str | None = Field(
        default=None,
        description=(
            "the API key its runs start for: the one that created it or last changed it "
            "(null: made before schedules recorded one)"
        ),
    )
    lastError: m.FireError | None = None
    createdAt: str
    updatedAt: str


class ScheduleList(BaseModel):
    schedules: list[ScheduleAnswer]
    nextCursor: str | None = None


def _caller(org_id: str, project_id: str) -> Principal:
    return principal_for(router.current_event, org_id, project_id)


@router.post(
    f"{PREFIX}/schedules",
    security=m.API_KEY,
    summary="Create a schedule",
    responses=m.doc(201, ScheduleAnswer, "the schedule"),
)
def create_schedule(
    orgId: str,
    projectId: str,
    body: Annotated[CreateScheduleRequest, Body()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key")] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    check_value_size(body.input, "input")

    def run() -> Answer:
        created = schedules.create_schedule(
            principal,
            app_ref=body.appId,
            workflow=body.workflow,
            cron_expression=body.cron,
            timezone=body.timezone,
            input=body.input,
        )
        return 201, schedules.to_api(created)

    return answer_once(
        principal, "POST /schedules", idempotency_key, body.model_dump(mode="json"), run
    )


@router.get(
    f"{PREFIX}/schedules",
    security=m.API_KEY,
    summary="List schedules",
    responses=m.doc(200, ScheduleList, "the project's schedules, oldest first"),
)
def list_schedules(orgId: str, projectId: str, cursor: PageCursor = None) -> Response[Any]:
    principal = _caller(orgId, projectId)
    found = [schedules.to_api(s) for s in schedules.list_schedules(principal)]
    scope = f"schedules:{principal.project_id}"
    page = pages.by_size("schedules", found, _created, cursor=cursor, scope=scope)
    return json_response(200, page)


def _created(schedule: dict[str, Any]) -> str:
    """The schedules' order (oldest first, as the store's index sorts them)."""
    return f"{schedule['createdAt']}#{schedule['id']}"


@router.get(
    SCHEDULE,
    security=m.API_KEY,
    summary="Get a schedule by UUID or slug",
    responses=m.doc(200, ScheduleAnswer, "the schedule"),
)
def get_schedule(orgId: str, projectId: str, scheduleId: str) -> Response[Any]:
    found = schedules.get_schedule(_caller(orgId, projectId), scheduleId)
    return json_response(200, schedules.to_api(found))


@router.patch(
    SCHEDULE,
    security=m.API_KEY,
    summary="Update a schedule's workflow, cron, timezone or input",
    responses=m.doc(200, ScheduleAnswer, "the schedule"),
)
def update_schedule(
    orgId: str, projectId: str, scheduleId: str, body: Annotated[UpdateScheduleRequest, Body()]
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    if "workflow" in given and body.workflow is not None:
        changes["workflow"] = body.workflow
    if "cron" in given and body.cron is not None:
        changes["cron_expression"] = body.cron
    if "timezone" in given:
        changes["timezone"] = body.timezone  # null: back to UTC
    if "input" in given:
        check_value_size(body.input, "input")
        changes["input"] = body.input
    updated = schedules.update_schedule(principal, scheduleId, **changes)
    return json_response(200, schedules.to_api(updated))


@router.post(
    f"{SCHEDULE}/pause",
    security=m.API_KEY,
    summary="Pause a schedule",
    responses=m.doc(200, ScheduleAnswer, "the paused schedule"),
)
def pause_schedule(orgId: str, projectId: str, scheduleId: str) -> Response[Any]:
    s = schedules.set_status(_caller(orgId, projectId), scheduleId, "paused")
    return json_response(200, schedules.to_api(s))


@router.post(
    f"{SCHEDULE}/resume",
    security=m.API_KEY,
    summary="Resume a paused schedule",
    responses=m.doc(200, ScheduleAnswer, "the active schedule"),
)
def resume_schedule(orgId: str, projectId: str, scheduleId: str) -> Response[Any]:
    s = schedules.set_status(_caller(orgId, projectId), scheduleId, "active")
    return json_response(200, schedules.to_api(s))


@router.delete(
    SCHEDULE,
    security=m.API_KEY,
    summary="Delete a schedule",
    responses=m.doc(204, None, "deleted"),
)
def delete_schedule(orgId: str, projectId: str, scheduleId: str) -> Response[Any]:
    schedules.delete_schedule(_caller(orgId, projectId), scheduleId)
    return no_content()
