"""Routes for runs (under the project prefix) and the SDK's step calls.

The logic, including run permissions, is in `ezgh_engine.service.runs` and
`ezgh_engine.service.steps`; they are imported inside the routes so the rest of the API keeps
serving if they fail to import.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from ezgh_engine import clock
from ezgh_engine.api import models as m
from ezgh_engine.api import pages
from ezgh_engine.api.auth import bearer_token, principal_for
from ezgh_engine.api.errors import MAX_BODY_BYTES, check_value_size
from ezgh_engine.api.idempotency import Answer, answer_once
from ezgh_engine.api.responses import json_response
from ezgh_engine.config import settings
from ezgh_engine.core import tokens, validation
from ezgh_engine.core.models import Principal
from ezgh_engine.core.validation import iso_time
from ezgh_engine.errors import PayloadTooLarge, Unauthorized, ValidationError
from ezgh_engine.observability import logs
from ezgh_engine.service import callbacks, invocation_state, run_views, runs, steps, wire

router = APIGatewayHttpRouter()

PREFIX = "/v1/organizations/<orgId>/projects/<projectId>"
RUN = f"{PREFIX}/runs/<runId>"


def _caller(org_id: str, project_id: str) -> Principal:
    return principal_for(router.current_event, org_id, project_id)


def _run_answer(principal: Principal, run: Any, steps_cursor: str | None = None) -> Any:
    """The run as GetRun shows it to `principal`: its callback steps' URLs only for a key
    that may complete them (`runs.may_resume`)."""
    return run_views.run_answer(
        run, steps_cursor=steps_cursor, with_callback_urls=runs.may_resume(principal, run)
    )


@router.post(
    f"{PREFIX}/runs",
    security=m.API_KEY,
    summary="StartRun",
    responses=m.doc(201, m.RunAnswer, "the new run (200: the existing run of this runKey)"),
)
def start_run(
    orgId: str,
    projectId: str,
    body: Annotated[m.StartRunRequest, Body()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key")] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    check_value_size(body.input, "input")

    def run() -> Answer:
        started, created = runs.start_run(
            principal,
            app_ref=body.appId,
            workflow=body.workflow,
            input=body.input,
            run_key=body.runKey,
            timeout_seconds=body.timeoutSeconds,
        )
        return (201 if created else 200), _run_answer(principal, started)

    return answer_once(principal, "POST /runs", idempotency_key, body.model_dump(mode="json"), run)


@router.get(
    f"{PREFIX}/runs",
    security=m.API_KEY,
    summary="SearchRuns",
    description=(
        "Runs newest first, with their input and output. A key sees only the runs it may "
        "read: one whose workflows.runs.read grants (or * grants) all name a resource gets "
        "the runs of those <app name>/<workflow> resources only, whatever the filters ask "
        "(an appId or workflow it may not read answers an empty list); a key without "
        "workflows.runs.read on any resource gets 403."
    ),
    responses=m.doc(200, m.RunList, "runs, newest first"),
)
def search_runs(
    orgId: str,
    projectId: str,
    appId: Annotated[str | None, Query()] = None,
    workflow: Annotated[str | None, Query()] = None,
    status: Annotated[m.RunStatus | None, Query()] = None,
    runKey: Annotated[str | None, Query()] = None,
    createdAfter: Annotated[str | None, Query(description="ISO 8601")] = None,
    createdBefore: Annotated[str | None, Query(description="ISO 8601")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query()] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    after, before = iso_time(createdAfter, "createdAfter"), iso_time(createdBefore, "createdBefore")

    def fetch(n: int) -> tuple[list[dict[str, Any]], str | None]:
        found, next_cursor = runs.search_runs(
            principal,
            app_ref=appId,
            workflow=workflow,
            status=status,
            run_key=runKey,
            created_after=after,
            created_before=before,
            limit=n,
            cursor=cursor,
        )
        return run_views.list_answer(found), next_cursor

    # Values that do not fit are references (`run_views`); the records alone always do, but
    # a page of them is asked for again, smaller, if ever they did not.
    found, following = pages.fewer(fetch, limit)
    return json_response(200, {"runs": found, "nextCursor": following})


@router.get(
    RUN,
    security=m.API_KEY,
    summary="GetRun",
    description=(
        "The run with its steps. Values are inline while the answer stays within Lambda's "
        "6 MB, in order (the input, the output, each step's result); the others are "
        "references read with GetPayload (inputRef, outputRef). When the steps' records "
        "alone do not fit, the answer holds the first ones and nextStepsCursor: pass it as "
        "stepsCursor for the run with the next ones. A waiting callback step carries its url "
        "for a key that also holds workflows.runs.resume on the run (whoever holds the URL "
        "may complete the callback)."
    ),
    responses=m.doc(200, m.RunAnswer, "the run with its steps"),
)
def get_run(
    orgId: str,
    projectId: str,
    runId: str,
    stepsCursor: Annotated[str | None, Query(max_length=4096)] = None,
) -> Response[Any]:
    principal = _caller(orgId, projectId)
    run = runs.get_run(principal, runId)
    return json_response(200, _run_answer(principal, run, steps_cursor=stepsCursor))


@router.post(
    f"{RUN}/cancel",
    security=m.API_KEY,
    summary="CancelRun",
    description=(
        "Needs workflows.runs.cancel and, as it answers the run, workflows.runs.read on the "
        "run's <app name>/<workflow>; both are checked before the run is touched."
    ),
    responses=m.doc(202, m.RunAnswer, "cancelling"),
)
def cancel_run(orgId: str, projectId: str, runId: str) -> Response[Any]:
    return json_response(
        202, run_views.run_answer(runs.cancel_run(_caller(orgId, projectId), runId))
    )


@router.post(
    f"{RUN}/retry",
    security=m.API_KEY,
    summary="RetryRun",
    description=(
        "Needs workflows.runs.start and, as it answers the run, workflows.runs.read on the "
        "run's <app name>/<workflow>; both are checked before the run is touched."
    ),
    responses=m.doc(200, m.RunAnswer, "running again"),
)
def retry_run(orgId: str, projectId: str, runId: str) -> Response[Any]:
    return json_response(
        200, run_views.run_answer(runs.retry_run(_caller(orgId, projectId), runId))
    )


@router.delete(RUN, security=m.API_KEY, summary="DeleteRun", responses=m.doc(204, None, "deleted"))
def delete_run(orgId: str, projectId: str, runId: str) -> Response[Any]:
    runs.delete_run(_caller(orgId, projectId), runId)
    return Response(status_code=204, body="")


@router.get(
    f"{RUN}/events",
    security=m.API_KEY,
    summary="ListRunEvents",
    responses=m.doc(200, m.EventList, "events in order"),
)
def list_run_events(
    orgId: str,
    projectId: str,
    runId: str,
    limit: Annotated[int, Query(ge=1, le=100)] = 100,
    cursor: Annotated[str | None, Query()] = None,
) -> Response[Any]:
    events, next_cursor = runs.list_events(
        _caller(orgId, projectId), runId, limit=limit, cursor=cursor
    )
    return json_response(200, {"events": events, "nextCursor": next_cursor})


def _payload(org_id: str, project_id: str, run_id: str) -> Response[Any]:
    principal = _caller(org_id, project_id)
    # The payload path may hold slashes and percent-escapes (`steps/load-user%231/output`):
    # take it from the request path as sent; the service decodes the step ID.
    path = router.current_event.path.split("/payloads/", 1)[1]
    return json_response(200, runs.get_payload(principal, run_id, path))


@router.get(
    f"{RUN}/payloads/<path>",
    security=m.API_KEY,
    summary="GetPayload",
    responses=m.doc(200, None, "the JSON value"),
)
def get_payload(orgId: str, projectId: str, runId: str, path: str) -> Response[Any]:
    return _payload(orgId, projectId, runId)


# Paths with slashes (`steps/<stepId>/output`): Powertools' `<name>` stops at `/`, so a second,
# undocumented route takes the rest; the documented one above describes both.
@router.get(f"{RUN}/payloads/.+", include_in_schema=False)
def get_payload_nested(orgId: str, projectId: str, runId: str) -> Response[Any]:
    return _payload(orgId, projectId, runId)


@router.post(
    "/v1/invocations/steps",
    security=m.INVOCATION_TOKEN,
    summary="Step calls from the SDK (invocation token)",
    responses=m.doc(200, None, "{results: [...]}"),
)
def step_calls(body: Annotated[dict[str, Any], Body()]) -> Response[Any]:
    token = bearer_token(router.current_event)
    if token is None:
        raise Unauthorized("missing invocation token (Authorization: Bearer <token>)")
    # 1.5: large recorded outputs by reference; the lines logged carry the run's ID.
    with wire.answering(body.get("protocol")), logs.bound(**_call_ids(token, body)):
        return json_response(200, steps.apply_ops(token, body))


def _call_ids(token: str, body: Any) -> dict[str, str | None]:
    """The IDs a step call's log lines carry: the run its invocation token names (none
    when it does not verify: the call is refused as it is) and the step of a call with one
    op (one call per step since protocol 1.3)."""
    try:
        run_id: str | None = tokens.verify(settings().token_secret, token, clock.now_ms()).run_id
    except Unauthorized:
        return {}
    ops = body.get("ops") if isinstance(body, dict) else None
    one = ops[0] if isinstance(ops, list) and len(ops) == 1 else None
    try:  # only a valid step ID (the op is refused as it is otherwise)
        step_id = validation.check_step_id(one.get("stepId")) if isinstance(one, dict) else None
    except ValidationError:
        step_id = None
    return {"run_id": run_id, "step_id": step_id}


def _invocation_token() -> str:
    token = bearer_token(router.current_event)
    if token is None:
        raise Unauthorized("missing invocation token (Authorization: Bearer <token>)")
    return token


@router.post(
    "/v1/invocations/history",
    security=m.INVOCATION_TOKEN,
    summary="A page of an invocation's history (protocol 1.5; invocation token)",
    responses=m.doc(200, None, "{steps: [...], nextCursor}"),
)
def read_history(body: Annotated[dict[str, Any], Body()]) -> Response[Any]:
    return json_response(200, invocation_state.read_history(_invocation_token(), body))


@router.post(
    "/v1/invocations/payload",
    security=m.INVOCATION_TOKEN,
    summary="A value an invoke request gave as a reference (protocol 1.5; invocation token)",
    responses=m.doc(200, None, "{value: <json>}"),
)
def read_payload(body: Annotated[dict[str, Any], Body()]) -> Response[Any]:
    return json_response(200, invocation_state.read_payload(_invocation_token(), body))


@router.post(
    "/v1/callbacks/<token>",
    summary="Complete a callback (no API key: the URL's token authorizes)",
    responses={
        200: {"description": "completed"},
        404: {"description": "no such callback (unknown, forged or expired token)"},
        409: {"description": "invalid_state: already completed or timed out"},
        413: {"description": "payload_too_large: the body is over 1 MiB"},
    },
)
def complete_callback(token: str) -> Response[Any]:
    found = callbacks.find(token)  # the URL's token first: 404 before any body check
    # Any JSON value is a body here, not only an object: read it as sent.
    raw = router.current_event.decoded_body or ""
    if len(raw.encode()) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"the body is larger than {MAX_BODY_BYTES} bytes (1 MiB)")
    body = validation.parse_json(raw, "the body") if raw.strip() else None
    return json_response(200, callbacks.complete(token, body, found))
