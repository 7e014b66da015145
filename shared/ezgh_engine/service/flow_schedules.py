"""Flow schedules: jobs of a flow on a cron timetable (`/flows/{flowId}/schedules`).

A flow schedule is a schedule of the engine's interpreter app (`adapters.schedules_store`,
fired by the same EventBridge Scheduler timer as any schedule), whose input names the flow,
the job's input and the API key that created it. `/schedules` never shows or changes one
(`service.schedules` hides them): the interpreter is no app a project can schedule. Each
fire starts a job (`ids.derived_id("schedule", <id>, <planned time>)`: a duplicate fire
starts none) acting for the creating key, read again then: a revoked key's schedule
starts nothing (the fire is logged, and shown as the schedule's `lastError`).

Permissions: creating and deleting need `flows.jobs.start` on the flow (and, to create,
what the flow's commit needs: the schedule starts jobs in the creator's stead); listing
needs `flows.jobs.read` or `flows.jobs.start` on it.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import flows_store
from ezgh_engine.adapters import schedules_store as store
from ezgh_engine.adapters.schedules_store import Schedule
from ezgh_engine.core import cron, validation
from ezgh_engine.core.flows.graph import parse_graph
from ezgh_engine.core.flows.jobs import INTERPRETER_WORKFLOW, Actor, interpreter_app_id
from ezgh_engine.core.models import Principal
from ezgh_engine.errors import Forbidden, NotFound
from ezgh_engine.service.flow_authority import acting_principal, check_graph_needs
from ezgh_engine.service.flow_jobs import START, check_tracking, start_job
from ezgh_engine.service.flows import check_branch, find_flow, require

READ = "flows.jobs.read"


def is_flow_schedule(s: Schedule) -> bool:
    """Whether the schedule starts jobs (of the interpreter app) rather than runs."""
    return s.app_id == interpreter_app_id(s.project_id)


def _input(s: Schedule) -> dict[str, Any]:
    return s.input if isinstance(s.input, dict) else {}


def to_api(s: Schedule) -> dict[str, Any]:
    """`{id, slug, flowId, cron, timezone, input, trackingId?, branch?, keyId, status,
    nextRunAt, lastError, createdAt, updatedAt}`."""
    data = _input(s)
    body: dict[str, Any] = {
        "id": s.id,
        "slug": s.slug,
        "flowId": data.get("flowId"),
        "cron": s.cron,
        "timezone": s.timezone,
        "input": data.get("input"),
        "keyId": data.get("keyId"),
        "status": s.status,
        "nextRunAt": clock.iso(cron.next_after(s.cron, s.timezone, clock.now()))
        if s.status == "active"
        else None,
        "lastError": s.last_error_api(),
        "createdAt": s.created_at,
        "updatedAt": s.updated_at,
    }
    for name in ("trackingId", "branch"):
        if data.get(name) is not None:
            body[name] = data[name]
    return body


def create_schedule(
    principal: Principal,
    flow_ref: str,
    *,
    cron_expression: str,
    timezone: str | None,
    input: Any,
    tracking_id: str | None,
    branch: str | None,
) -> Schedule:
    """A flow schedule whose jobs act for `principal`'s key."""
    expression = cron.check_cron(cron_expression)
    zone = cron.check_timezone(timezone)
    validation.encode_value(input, "input")
    if tracking_id is not None:
        check_tracking(tracking_id)
    flow = find_flow(principal, flow_ref)
    require(principal, START, flow.name)
    head = flows_store.branch_head(flow.id, check_branch(branch or flow.active_branch))
    if head is not None:
        check_graph_needs(principal, parse_graph(head.graph), who="this API key")
    now = clock.iso(clock.now())
    data = {"flowId": flow.id, "input": input, "keyId": principal.key_id}
    data.update({k: v for k, v in (("trackingId", tracking_id), ("branch", branch)) if v})
    s = Schedule(
        id=ids.new_id(),
        slug=ids.slug("wfs"),
        org_id=principal.org_id,
        project_id=principal.project_id,
        app_id=interpreter_app_id(principal.project_id),
        workflow=INTERPRETER_WORKFLOW,
        cron=expression,
        timezone=zone,
        input=data,
        status="active",
        created_at=now,
        updated_at=now,
    )
    store.create(s)
    try:
        store.put_timer(s, create=True)
    except Exception:
        store.delete(s)
        raise
    return s


def _of_flow(principal: Principal, flow_ref: str, *actions: str) -> tuple[str, list[Schedule]]:
    """The flow's ID and its schedules, once the key holds one of `actions` on it."""
    flow = find_flow(principal, flow_ref)
    if not any(principal.allows(a, flow.name) for a in actions):
        raise Forbidden(f"this API key may not {actions[0]} on flow {flow.name}")
    refs = {flow.id, flow.name, flow.slug}
    found = [
        s
        for s in store.list_for(principal.project_id)
        if is_flow_schedule(s) and _input(s).get("flowId") in refs
    ]
    return flow.id, found


def list_schedules(principal: Principal, flow_ref: str) -> list[Schedule]:
    return _of_flow(principal, flow_ref, READ, START)[1]


def delete_schedule(principal: Principal, flow_ref: str, schedule_ref: str) -> None:
    _, found = _of_flow(principal, flow_ref, START)
    s = next((s for s in found if schedule_ref in (s.id, s.slug)), None)
    if s is None:
        raise NotFound(f"schedule {schedule_ref} of flow {flow_ref} not found")
    store.delete_timer(s.id)
    store.delete(s)


def fire(s: Schedule, job_id: str) -> str | None:
    """Start the job of one fire (`job_id`: derived from the schedule and its planned
    time), acting for the key that created the schedule; its ID, or None when it existed.
    A 403 `EngineError` when that key may no longer start it (`service.schedules.fire`
    records it as the schedule's `lastError`)."""
    data = _input(s)
    key_id = data.get("keyId")
    actor = Actor(key_id, f"schedule:{s.id}") if isinstance(key_id, str) and key_id else None
    principal = acting_principal(s.project_id, actor, cached=True)
    job, created = start_job(
        principal,
        str(data.get("flowId")),
        input=data.get("input"),
        tracking_id=data.get("trackingId"),
        branch=data.get("branch"),
        job_id=job_id,
        via=f"schedule:{s.id}",
    )
    return str(job["id"]) if created else None
