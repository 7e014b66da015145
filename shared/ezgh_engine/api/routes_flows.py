"""Routes for flows, their commits and module types, jobs and failed items (contract,
"Flows"). The logic and permissions are in `service.flows` and `service.flow_jobs`."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from ezgh_engine.api import models as m
from ezgh_engine.api import models_flows as fm
from ezgh_engine.api import pages
from ezgh_engine.api.auth import principal_for
from ezgh_engine.api.errors import check_value_size
from ezgh_engine.api.idempotency import Answer, answer_once
from ezgh_engine.api.models import PageCursor
from ezgh_engine.api.responses import json_response, no_content
from ezgh_engine.core.models import Principal
from ezgh_engine.core.validation import iso_time
from ezgh_engine.service import flow_jobs, flow_schedules, flows

router = APIGatewayHttpRouter()

PREFIX = "/v1/organizations/<orgId>/projects/<projectId>"
FLOW = f"{PREFIX}/flows/<flowId>"
IdempotencyKey = Annotated[
    str | None, Header(alias="idempotency-key", description="replays the first answer for 48 h")
]


def _caller(org_id: str, project_id: str) -> Principal:
    return principal_for(router.current_event, org_id, project_id)


# Registered before `/flows/<flowId>` so that this path is not read as a flow's ID.
@router.get(
    f"{PREFIX}/flows/moduleTypes",
    security=m.API_KEY,
    summary="List module types",
    responses=m.doc(200, fm.ModuleTypeList, "every built-in module type with its config schema"),
)
def module_types(orgId: str, projectId: str) -> Response[Any]:
    _caller(orgId, projectId)
    return json_response(200, {"moduleTypes": flows.module_types()})


@router.post(
    f"{PREFIX}/flows",
    security=m.API_KEY,
    summary="Create a flow",
    responses=m.doc(201, fm.FlowAnswer, "the new flow"),
)
def create_flow(
    orgId: str,
    projectId: str,
    body: Annotated[fm.CreateFlowRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def run() -> Answer:
        flow = flows.create_flow(principal, name=body.name, description=body.description)
        return 201, flow.to_api()

    return answer_once(principal, "POST /flows", idempotency_key, body.model_dump(), run)


@router.get(
    f"{PREFIX}/flows",
    security=m.API_KEY,
    summary="List flows",
    responses=m.doc(200, fm.FlowList, "the project's flows, by name"),
)
def list_flows(orgId: str, projectId: str, cursor: PageCursor = None) -> Response[Any]:
    principal = _caller(orgId, projectId)
    found = [f.to_api() for f in flows.list_flows(principal)]
    scope = f"flows:{principal.project_id}"
    page = pages.by_size("flows", found, lambda f: str(f["name"]), cursor=cursor, scope=scope)
    return json_response(200, page)


@router.get(
    FLOW,
    security=m.API_KEY,
    summary="Get a flow by ID, slug or name",
    responses=m.doc(200, fm.FlowAnswer, "the flow"),
)
def get_flow(orgId: str, projectId: str, flowId: str) -> Response[Any]:
    return json_response(200, flows.get_flow(_caller(orgId, projectId), flowId).to_api())


@router.patch(
    FLOW,
    security=m.API_KEY,
    summary="Update a flow (activeBranch, description)",
    responses=m.doc(200, fm.FlowAnswer, "the flow"),
)
def update_flow(
    orgId: str, projectId: str, flowId: str, body: Annotated[fm.UpdateFlowRequest, Body()]
) -> Response[Any]:
    changes = body.model_dump(exclude_unset=True)
    flow = flows.update_flow(_caller(orgId, projectId), flowId, changes)
    return json_response(200, flow.to_api())


@router.delete(
    FLOW, security=m.API_KEY, summary="Delete a flow", responses=m.doc(204, None, "deleted")
)
def delete_flow(orgId: str, projectId: str, flowId: str) -> Response[Any]:
    flows.delete_flow(_caller(orgId, projectId), flowId)
    return no_content()


@router.post(
    f"{FLOW}/commits",
    security=m.API_KEY,
    summary="Commit a graph to a branch",
    responses=m.doc(201, fm.CommitAnswer, "the commit (400 validation_error names the fault)"),
)
def commit(
    orgId: str,
    projectId: str,
    flowId: str,
    body: Annotated[fm.CommitRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    raw = body.model_dump(mode="json")

    def run() -> Answer:
        made = flows.commit(
            principal, flowId, graph=raw["graph"], branch=body.branch, message=body.message
        )
        return 201, made.to_api()

    return answer_once(principal, f"POST /flows/{flowId}/commits", idempotency_key, raw, run)


@router.get(
    f"{FLOW}/commits",
    security=m.API_KEY,
    summary="List commits, newest first",
    responses=m.doc(200, fm.CommitList, "commits"),
)
def list_commits(
    orgId: str,
    projectId: str,
    flowId: str,
    branch: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query()] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def fetch(n: int) -> tuple[list[dict[str, Any]], str | None]:
        found, nxt = flows.list_commits(principal, flowId, branch=branch, limit=n, cursor=cursor)
        return [c.to_api() for c in found], nxt

    commits, following = pages.fewer(fetch, limit)  # within one answer's size
    return json_response(200, {"commits": commits, "nextCursor": following})


@router.post(
    f"{FLOW}/jobs",
    security=m.API_KEY,
    summary="Start a job",
    responses=m.doc(201, fm.JobAnswer, "the job, RUNNING"),
)
def start_job(
    orgId: str,
    projectId: str,
    flowId: str,
    body: Annotated[fm.StartJobRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    check_value_size(body.input, "input")
    raw = body.model_dump(mode="json")

    def run() -> Answer:
        job, _ = flow_jobs.start_job(
            principal, flowId, input=body.input, tracking_id=body.trackingId, branch=body.branch
        )
        return 201, job

    return answer_once(principal, f"POST /flows/{flowId}/jobs", idempotency_key, raw, run)


@router.post(
    f"{FLOW}/schedules",
    security=m.API_KEY,
    summary="Create a flow schedule: a job at each time of a cron, for the creating key",
    responses=m.doc(201, fm.FlowScheduleAnswer, "the schedule"),
)
def create_flow_schedule(
    orgId: str,
    projectId: str,
    flowId: str,
    body: Annotated[fm.CreateFlowScheduleRequest, Body()],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    check_value_size(body.input, "input")
    raw = body.model_dump(mode="json")

    def run() -> Answer:
        made = flow_schedules.create_schedule(
            principal,
            flowId,
            cron_expression=body.cron,
            timezone=body.timezone,
            input=body.input,
            tracking_id=body.trackingId,
            branch=body.branch,
        )
        return 201, flow_schedules.to_api(made)

    return answer_once(principal, f"POST /flows/{flowId}/schedules", idempotency_key, raw, run)


@router.get(
    f"{FLOW}/schedules",
    security=m.API_KEY,
    summary="List a flow's schedules",
    responses=m.doc(200, fm.FlowScheduleList, "the flow's schedules"),
)
def list_flow_schedules(orgId: str, projectId: str, flowId: str) -> Response[Any]:
    found = flow_schedules.list_schedules(_caller(orgId, projectId), flowId)
    return json_response(200, {"schedules": [flow_schedules.to_api(s) for s in found]})


@router.delete(
    f"{FLOW}/schedules/<scheduleId>",
    security=m.API_KEY,
    summary="Delete a flow schedule",
    responses=m.doc(204, None, "deleted"),
)
def delete_flow_schedule(orgId: str, projectId: str, flowId: str, scheduleId: str) -> Response[Any]:
    flow_schedules.delete_schedule(_caller(orgId, projectId), flowId, scheduleId)
    return no_content()


@router.get(
    f"{PREFIX}/jobs",
    security=m.API_KEY,
    summary="Search jobs, newest first",
    responses=m.doc(200, fm.JobList, "jobs (without their actions)"),
)
def search_jobs(
    orgId: str,
    projectId: str,
    flowId: Annotated[str | None, Query()] = None,
    status: Annotated[fm.JobStatus | None, Query()] = None,
    trackingId: Annotated[str | None, Query()] = None,
    createdAfter: Annotated[str | None, Query(description="ISO 8601")] = None,
    createdBefore: Annotated[str | None, Query(description="ISO 8601")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query()] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    after, before = iso_time(createdAfter, "createdAfter"), iso_time(createdBefore, "createdBefore")

    def fetch(n: int) -> tuple[list[dict[str, Any]], str | None]:
        return flow_jobs.search_jobs(
            principal,
            flow_ref=flowId,
            status=status,
            tracking_id=trackingId,
            created_after=after,
            created_before=before,
            limit=n,
            cursor=cursor,
        )

    jobs, following = pages.fewer(fetch, limit)  # within one answer's size
    return json_response(200, {"jobs": jobs, "nextCursor": following})


@router.get(
    f"{PREFIX}/jobs/<jobId>",
    security=m.API_KEY,
    summary="Get a job with its actions",
    description=(
        "The job and its actions within one answer's size: values inline while they fit, "
        "the others as references (inputRef, outputRef) read with the job's payloads route. "
        "When the actions' records alone do not fit, nextActionsCursor: pass it as "
        "actionsCursor for the job with the next ones."
    ),
    responses=m.doc(200, fm.JobAnswer, "the job"),
)
def get_job(
    orgId: str,
    projectId: str,
    jobId: str,
    actionsCursor: Annotated[str | None, Query(max_length=4096)] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    return json_response(200, flow_jobs.get_job(principal, jobId, actionsCursor))


def _job_payload(org_id: str, project_id: str, job_id: str) -> Response[Any]:
    principal = _caller(org_id, project_id)
    # The path may hold slashes and percent-escapes (`actions/a%2Fb/input`): take it from
    # the request path as sent; the service decodes the node or step ID.
    path = router.current_event.path.split("/payloads/", 1)[1]
    return json_response(200, flow_jobs.get_job_payload(principal, job_id, path))


@router.get(
    f"{PREFIX}/jobs/<jobId>/payloads/<path>",
    security=m.API_KEY,
    summary="Get a value of a job given by reference",
    description=(
        "`input`, `output`, `actions/<nodeId>/input`, or an action's outputRef "
        "(`steps/<stepId>/output`); needs flows.jobs.read on the job's flow."
    ),
    responses=m.doc(200, None, "the JSON value"),
)
def get_job_payload(orgId: str, projectId: str, jobId: str, path: str) -> Response[Any]:
    return _job_payload(orgId, projectId, jobId)


# Paths with slashes: Powertools' `<name>` stops at `/`, so a second, undocumented route
# takes the rest; the documented one above describes both.
@router.get(f"{PREFIX}/jobs/<jobId>/payloads/.+", include_in_schema=False)
def get_job_payload_nested(orgId: str, projectId: str, jobId: str) -> Response[Any]:
    return _job_payload(orgId, projectId, jobId)


@router.post(
    f"{PREFIX}/jobs/<jobId>/cancel",
    security=m.API_KEY,
    summary="Cancel a job",
    responses=m.doc(202, fm.JobAnswer, "cancelling"),
)
def cancel_job(orgId: str, projectId: str, jobId: str) -> Response[Any]:
    return json_response(202, flow_jobs.cancel_job(_caller(orgId, projectId), jobId))


@router.get(
    f"{PREFIX}/failedItems",
    security=m.API_KEY,
    summary="List failed items",
    responses=m.doc(200, fm.FailedItemList, "failed node executions, newest first"),
)
def list_failed_items(
    orgId: str,
    projectId: str,
    flowId: Annotated[str | None, Query()] = None,
    jobId: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query()] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)

    def fetch(n: int) -> tuple[list[dict[str, Any]], str | None]:
        found, nxt = flow_jobs.list_failed_items(
            principal, flow_ref=flowId, job_id=jobId, limit=n, cursor=cursor
        )
        return [f.to_api() for f in found], nxt

    items, following = pages.fewer(fetch, limit)  # within one answer's size
    return json_response(200, {"failedItems": items, "nextCursor": following})


@router.post(
    f"{PREFIX}/failedItems/<failedItemId>/retry",
    security=m.API_KEY,
    summary="Retry a failed item: its job resumes from that node",
    responses=m.doc(202, fm.JobAnswer, "the job, running again"),
)
def retry_failed_item(orgId: str, projectId: str, failedItemId: str) -> Response[Any]:
    return json_response(202, flow_jobs.retry_failed_item(_caller(orgId, projectId), failedItemId))
