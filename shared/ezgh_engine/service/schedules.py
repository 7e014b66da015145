"""Schedules: start runs of one workflow on a cron timetable (seed 000, CONTRACT "Schedules").

Permissions: managing a schedule (create, update, pause, resume, delete) needs
`workflows.runs.start` on `<app name>/<workflow>`: a schedule starts runs in the caller's
stead. Reading one needs `workflows.runs.read` or `workflows.runs.start` on the same resource.

A schedule acts for the key that created it or last changed it (update, pause, resume:
`keyId`), as a flow schedule does (`service.acting_keys`).

Firing: EventBridge Scheduler sends a `core.messages.Cron` (`scheduleId`, `scheduledTime`) to the
invocations queue; `fire` computes the planned time (the cron occurrence at or before the
scheduled time, or now when Scheduler gave none) and starts the run
`ids.derived_id("schedule", <id>, <planned ISO time>)`: a duplicate fire starts nothing new.
The key the schedule acts for must still hold `workflows.runs.start` on the workflow then; a
fire that starts nothing (that key revoked or narrowed, the app not synced or not hosting
the workflow) is the schedule's `lastError` until a later fire starts its run.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

from ezgh_engine import clock, ids
from ezgh_engine.adapters import registry_store
from ezgh_engine.adapters import schedules_store as store
from ezgh_engine.adapters.schedules_store import Schedule
from ezgh_engine.core import cron, validation
from ezgh_engine.core.messages import Cron
from ezgh_engine.core.models import App, Principal
from ezgh_engine.errors import EngineError, Forbidden, NotFound
from ezgh_engine.service import derived_runs, flow_schedules
from ezgh_engine.service.acting_keys import ActingKey
from ezgh_engine.service.flow_schedules import is_flow_schedule

log = logging.getLogger(__name__)

START = "workflows.runs.start"
READ = "workflows.runs.read"

# Sentinel for "PATCH did not mention this field".
UNSET: Any = object()


def _resource(app: App | None, workflow: str) -> str | None:
    return f"{app.name}/{workflow}" if app else None


def _require_start(principal: Principal, app: App, workflow: str) -> None:
    resource = _resource(app, workflow)
    if not principal.allows(START, resource):
        raise Forbidden(f"this API key may not {START} on {resource}")


def _may_read(principal: Principal, s: Schedule) -> bool:
    app = registry_store.get_app(s.project_id, s.app_id)
    resource = _resource(app, s.workflow)
    return principal.allows(READ, resource) or principal.allows(START, resource)


def _app(principal: Principal, app_ref: str) -> App:
    app = registry_store.get_app(principal.project_id, app_ref)
    if app is None:
        raise NotFound(f"app {app_ref} not found")
    return app


def _check_workflow(app: App, workflow: str) -> None:
    validation.check_workflow_name(workflow)
    if app.status == "synced" and workflow not in app.workflows:
        raise NotFound(f"workflow {workflow} not found in app {app.name}")


def next_run_at(s: Schedule, now: datetime | None = None) -> str | None:
    if s.status != "active":
        return None
    return clock.iso(cron.next_after(s.cron, s.timezone, now or clock.now()))


def to_api(s: Schedule) -> dict[str, Any]:
    return s.to_api(next_run_at(s))


def create_schedule(
    principal: Principal,
    *,
    app_ref: str,
    workflow: str,
    cron_expression: str,
    timezone: str | None,
    input: Any,
) -> Schedule:
    expression = cron.check_cron(cron_expression)
    zone = cron.check_timezone(timezone)
    validation.encode_item_value(input, "input")  # the schedule's item keeps it
    app = _app(principal, app_ref)
    _require_start(principal, app, workflow)
    _check_workflow(app, workflow)
    now = clock.iso(clock.now())
    s = Schedule(
        id=ids.new_id(),
        slug=ids.slug("wfs"),
        org_id=principal.org_id,
        project_id=principal.project_id,
        app_id=app.id,
        workflow=workflow,
        cron=expression,
        timezone=zone,
        input=input,
        status="active",
        created_at=now,
        updated_at=now,
        key_id=principal.key_id,
    )
    store.create(s)
    try:
        store.put_timer(s, create=True)
    except Exception:
        store.delete(s)
        raise
    return s


def get_schedule(principal: Principal, ref: str) -> Schedule:
    s = store.find(principal.project_id, ref)
    if s is None or is_flow_schedule(s):  # a flow's: only `/flows/{flowId}/schedules`
        raise store.not_found(ref)
    if not _may_read(principal, s):
        raise Forbidden(f"this API key may not {READ} on schedule {ref}")
    return s


def list_schedules(principal: Principal) -> list[Schedule]:
    """The schedules the key may read (a scoped key: those of its resources); 403 for a key
    holding neither action on any resource."""
    if not (principal.holds(READ) or principal.holds(START)):
        raise Forbidden(f"this API key may not {READ}")
    return [
        s
        for s in store.list_for(principal.project_id)
        if not is_flow_schedule(s) and _may_read(principal, s)
    ]


def _managed(principal: Principal, ref: str) -> tuple[Schedule, App | None]:
    s = get_schedule(principal, ref)
    app = registry_store.get_app(principal.project_id, s.app_id)
    if app is not None:
        _require_start(principal, app, s.workflow)
    elif not principal.allows(START):
        raise Forbidden(f"this API key may not {START}")
    return s, app


def update_schedule(
    principal: Principal,
    ref: str,
    *,
    workflow: Any = UNSET,
    cron_expression: Any = UNSET,
    timezone: Any = UNSET,
    input: Any = UNSET,
) -> Schedule:
    s, app = _managed(principal, ref)
    changed = replace(s, key_id=principal.key_id)  # it acts for the key that changed it
    if cron_expression is not UNSET:
        changed = replace(changed, cron=cron.check_cron(cron_expression))
    if timezone is not UNSET:
        changed = replace(changed, timezone=cron.check_timezone(timezone))
    if input is not UNSET:
        validation.encode_item_value(input, "input")  # the schedule's item keeps it
        changed = replace(changed, input=input)
    if workflow is not UNSET and workflow != s.workflow:
        if app is None:
            raise NotFound(f"app {s.app_id} not found")
        _require_start(principal, app, workflow)
        _check_workflow(app, workflow)
        changed = replace(changed, workflow=workflow)
    if changed == s:
        return s
    return _save(s, replace(changed, updated_at=clock.iso(clock.now())))


def _save(old: Schedule, new: Schedule) -> Schedule:
    saved = store.save(old, new)
    timer_changed = (old.cron, old.timezone, old.status, old.workflow) != (
        new.cron,
        new.timezone,
        new.status,
        new.workflow,
    )
    if timer_changed:
        store.put_timer(saved, create=False)
    return saved


def set_status(principal: Principal, ref: str, status: Literal["active", "paused"]) -> Schedule:
    s, _ = _managed(principal, ref)
    if s.status == status and s.key_id == principal.key_id:
        return s
    changed = replace(s, status=status, key_id=principal.key_id)
    return _save(s, replace(changed, updated_at=clock.iso(clock.now())))


def delete_schedule(principal: Principal, ref: str) -> None:
    s, _ = _managed(principal, ref)
    store.delete_timer(s.id)
    store.delete(s)


# --- firing ----------------------------------------------------------------------------------


def planned_time(s: Schedule, scheduled_time: Any) -> datetime:
    """The occurrence this fire is for: the latest planned time at or before Scheduler's
    scheduled time (when it sent one) or now."""
    reference = clock.now()
    if isinstance(scheduled_time, str) and not scheduled_time.startswith("<"):
        with contextlib.suppress(ValueError):
            reference = clock.parse_iso(scheduled_time)
    return cron.latest(s.cron, s.timezone, reference)


def run_id_for(schedule_id: str, planned: datetime) -> str:
    return ids.derived_id("schedule", schedule_id, clock.iso(planned))


def fire(message: Cron) -> str | None:
    """Start the run of one fire; answers its run ID, or None when nothing started."""
    schedule_id = message.schedule_id
    s = store.get(schedule_id) if schedule_id else None
    if s is None:
        log.info("cron fire for unknown schedule %r: dropped", schedule_id)
        return None
    if s.status != "active":
        log.info("schedule %s is paused: fire dropped", s.id)
        return None
    planned = planned_time(s, message.scheduled_time)
    run_id = run_id_for(s.id, planned)
    started_what = "Job" if is_flow_schedule(s) else "Run"
    try:
        started = _start(s, run_id)
    except derived_runs.NotStartable as exc:
        fire_failed(s, f"Run not started: {exc}")
        return None
    except EngineError as err:
        if err.retryable:  # throttled, briefly unavailable: the fire's message comes again
            raise
        fire_failed(s, f"{started_what} not started: {err.status} {err.code}: {err.message}")
        return None
    if started is None:
        log.info("schedule %s: %s for %s exists already", s.id, run_id, clock.iso(planned))
        return None
    fire_succeeded(s)
    return started


def _start(s: Schedule, run_id: str) -> str | None:
    """Start the fire's run (a flow schedule's: its job), for the key the schedule acts
    for; its ID, or None when it existed. `NotStartable`, or a 403 `EngineError` when that
    key may no longer start it."""
    if is_flow_schedule(s):
        return flow_schedules.fire(s, run_id)
    app = derived_runs.startable_app(s.project_id, s.app_id, s.workflow)
    acting_key(s).require((START, f"{app.name}/{s.workflow}"))
    run = derived_runs.start_derived_run(
        run_id=run_id,
        org_id=s.org_id,
        project_id=s.project_id,
        app=app,
        workflow=s.workflow,
        input=s.input,
        schedule_id=s.id,
    )
    return run.id if run is not None else None


def acting_key(s: Schedule) -> ActingKey:
    """The key the schedule's runs start for."""
    return ActingKey(s.project_id, s.key_id, f"schedule {s.id}")


def fire_failed(s: Schedule, reason: str) -> None:
    """A fire started nothing: say why where its readers look (`lastError`), and log it."""
    log.warning("schedule %s started nothing: %s", s.id, reason)
    store.record_fire_error(s.id, reason, clock.iso(clock.now()))


def fire_succeeded(s: Schedule) -> None:
    """A fire started its run: an error a fire before it left is past."""
    if s.last_error is not None:
        store.clear_fire_error(s)
