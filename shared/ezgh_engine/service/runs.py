"""Runs as the API sees them: start, read, search, cancel, retry, delete, events, payloads.

Permission checks happen here, against the run's app and workflow (`<app name>/<workflow>`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

from ezgh_engine import clock, ids
from ezgh_engine.adapters import payloads, registry_store, runs_store
from ezgh_engine.adapters import run_control_store as control
from ezgh_engine.adapters import run_items as items
from ezgh_engine.core import validation
from ezgh_engine.core.models import ENDED_STATUSES, App, Principal, Run
from ezgh_engine.errors import Conflict, Forbidden, NotFound, ValidationError
from ezgh_engine.service import retention, waits
from ezgh_engine.service.flow_hosting import is_interpreter_run
from ezgh_engine.service.new_runs import new_run

MAX_TIMEOUT_SECONDS = 365 * 86_400  # a run lasts at most a year (the default too)
READ = "workflows.runs.read"
START = "workflows.runs.start"
CANCEL = "workflows.runs.cancel"
RESUME = "workflows.runs.resume"
RUN_STATUSES = ("running", "cancelling", "completed", "failed", "cancelled", "timedOut")


def _require(principal: Principal, action: str, app: App, workflow: str) -> None:
    resource = f"{app.name}/{workflow}"
    if not principal.allows(action, resource):
        raise Forbidden(f"this API key may not {action} on {resource}")


def run_resource(run: Run, apps: dict[str, str | None] | None = None) -> str | None:
    """The run's resource, `<app name>/<workflow>`, from the app name the run keeps, so it
    survives the app's deletion. A run from before runs kept it takes its app's (looked up
    once per app in `apps`); None when that app is gone: only an unscoped grant covers it."""
    name = run.app_name
    if name is None:
        cache = {} if apps is None else apps
        if run.app_id not in cache:
            app = registry_store.get_app(run.project_id, run.app_id)
            cache[run.app_id] = app.name if app else None
        name = cache[run.app_id]
    return f"{name}/{run.workflow}" if name else None


def _require_on_run(principal: Principal, action: str, run: Run) -> None:
    resource = run_resource(run)
    if not principal.allows(action, resource):
        scope = f" on {resource}" if resource else " on this run (its app is gone)"
        raise Forbidden(f"this API key may not {action}{scope}")


def _app(principal: Principal, app_ref: str) -> App:
    app = registry_store.get_app(principal.project_id, app_ref)
    if app is None:
        raise NotFound(f"app {app_ref} not found")
    return app


def _new_run(principal: Principal, app: App, workflow: str, value: Any, run_key: str | None) -> Run:
    return new_run(
        # Under an Idempotency-Key, the ID its first attempt used (`ids.effect_id`).
        run_id=ids.effect_id("run") or ids.new_id(),
        org_id=principal.org_id,
        project_id=principal.project_id,
        app=app,
        workflow=workflow,
        value=value,
        run_key=run_key,
    )


def start_run(
    principal: Principal,
    *,
    app_ref: str,
    workflow: str,
    input: Any,
    run_key: str | None,
    timeout_seconds: int | None = None,
) -> tuple[Run, bool]:
    """Start a run; with a run key that exists, answer that run (same workflow and input) or
    `409 run_key_conflict`. Answers (run, created)."""
    validation.check_workflow_name(workflow)
    if run_key is not None:
        validation.check_run_key(run_key)
    app = _app(principal, app_ref)
    _require(principal, START, app, workflow)
    if app.status != "synced":
        raise Conflict(f"app {app.name} has not synced yet", code="app_not_synced")
    if workflow not in app.workflows:
        raise NotFound(f"workflow {workflow} not found in app {app.name}")
    run = _new_run(principal, app, workflow, input, run_key)
    if timeout_seconds is not None:
        if isinstance(timeout_seconds, bool) or not 1 <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise ValidationError("timeoutSeconds must be from 1 to 31536000 (a year)")
        from datetime import timedelta

        deadline = clock.parse_iso(run.created_at) + timedelta(seconds=timeout_seconds)
        run = replace(run, deadline_at=clock.iso(deadline))
    if run_key is not None and (earlier := _run_of_an_unscoped_key(principal, run)) is not None:
        return earlier, False
    try:
        runs_store.create_run(run, now_epoch_s=int(clock.now().timestamp()))
    except runs_store.RunExists:
        # Only a run ID derived from an Idempotency-Key's seed meets its own run: the
        # attempt that started it died before its answer was stored. Answer that run.
        return _run_of_a_dead_attempt(run), True
    except runs_store.RunKeyTaken as taken:
        return _run_of_a_taken_key(principal, taken.run_id, run)
    return _hydrate(run), True


def _run_of_a_taken_key(principal: Principal, owner: str, run: Run) -> tuple[Run, bool]:
    """The run a taken key names (the same start: answered; else 409); when that run is
    gone (expired), `run` takes the key over (created), or answers the start that did
    first. Answers (run, created)."""
    existing = _existing_for_key(principal, owner, run)
    if existing is not None:
        return existing, False
    now = int(clock.now().timestamp())
    if runs_store.create_run_over_stale_key(run, owner, now_epoch_s=now):
        return _hydrate(run), True
    # Another start took it over first: answer its run (or 409 if another).
    scope = items.run_key_scope(run.app_id, run.workflow)
    winner_id = runs_store.run_id_for_key(run.project_id, run.run_key or "", scope)
    winner = _existing_for_key(principal, winner_id, run) if winner_id else None
    if winner is None:
        raise Conflict("run key is being released; try again", code="run_key_conflict") from None
    return winner, False


def _run_of_an_unscoped_key(principal: Principal, wanted: Run) -> Run | None:
    """A key taken before keys were scoped to a workflow is project-wide: it still answers
    its own workflow's start (or 409s it), until its run goes. Another workflow's is not
    this start's business. (Never written any more: one read per keyed start.)"""
    owner = runs_store.run_id_for_key(wanted.project_id, wanted.run_key or "", None)
    earlier = runs_store.get_run(owner, with_steps=False) if owner else None
    if earlier is None or (earlier.app_id, earlier.workflow) != (wanted.app_id, wanted.workflow):
        return None
    return _existing_for_key(principal, earlier.id, wanted)


def _run_of_a_dead_attempt(wanted: Run) -> Run:
    existing = runs_store.get_run(wanted.id)
    same = existing is not None and existing.project_id == wanted.project_id
    if existing is None or not same or existing.workflow != wanted.workflow:
        raise Conflict("this Idempotency-Key's run is gone", code="idempotency_conflict")
    return _hydrate(existing)


def _existing_for_key(principal: Principal, run_id: str, wanted: Run) -> Run | None:
    """The run the key names, if it is `wanted`'s (409 otherwise); None when it is gone."""
    existing = runs_store.get_run(run_id)
    for pause in (0.02, 0.05, 0.1):
        if existing is not None:
            break
        # DynamoDB writes the key and the run atomically; an emulator may show the key a
        # moment before the run. Only a run deleted meanwhile stays missing.
        time.sleep(pause)
        existing = runs_store.get_run(run_id)
    if existing is None:  # expired, or deleted between the two reads
        return None
    existing = _hydrate(existing)
    if (
        existing.workflow != wanted.workflow
        or existing.app_id != wanted.app_id
        or (validation.encode_value(existing.input) != validation.encode_value(wanted.input))
    ):
        # The run is named only to a caller that may read it.
        readable = principal.allows(READ, run_resource(existing))
        which = f"run {existing.id}" if readable else "another run"
        raise Conflict(
            f"run key {wanted.run_key} belongs to {which} of {wanted.workflow} with another input",
            code="run_key_conflict",
        )
    return existing


def _hydrate(run: Run) -> Run:
    """Fill in an input stored outside the item."""
    if run.input_ref and run.input is None:
        return replace(run, input=payloads.get(run.project_id, run.id, run.input_ref))
    return run


def _visible_run(principal: Principal, run_id: str, *actions: str, with_steps: bool = True) -> Run:
    """The run, when the key holds every one of `actions` on it (all checked before the
    caller acts, so a refusal has no effect); 404 for a run of another project."""
    run = runs_store.get_run(run_id, with_steps=with_steps)
    # A job is the engine's run, not the project's: only the flows API reaches it.
    if run is None or run.project_id != principal.project_id or is_interpreter_run(run):
        raise NotFound(f"run {run_id} not found")
    for action in actions:
        _require_on_run(principal, action, run)
    return _hydrate(run)


def get_run(principal: Principal, run_id: str) -> Run:
    return _visible_run(principal, run_id, READ)


def may_resume(principal: Principal, run: Run) -> bool:
    """Whether the key may make the run's waits go on (`workflows.runs.resume` on it): the
    key GetRun shows a callback's URL to, since whoever holds the URL may complete it."""
    return principal.allows(RESUME, run_resource(run))


def search_runs(
    principal: Principal,
    *,
    app_ref: str | None = None,
    workflow: str | None = None,
    status: str | None = None,
    run_key: str | None = None,
    created_after: str | None = None,
    created_before: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> tuple[list[Run], str | None]:
    # A key sees the runs it may read: with only scoped grants, the runs of those
    # `<app name>/<workflow>` resources (whatever the filters ask); with none, 403.
    readable = principal.resources(READ)
    if readable is not None and not readable:
        raise Forbidden(f"this API key may not {READ}")
    if not 1 <= limit <= 100:
        raise ValidationError("limit must be from 1 to 100")
    if status is not None and status not in RUN_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(RUN_STATUSES)}")
    filters: dict[str, str] = {}
    if app_ref is not None:
        app = registry_store.get_app(principal.project_id, app_ref)
        if app is None:
            return [], None
        filters["appId"] = app.id
    for name, value in (("workflow", workflow), ("status", status), ("runKey", run_key)):
        if value is not None:
            filters[name] = value
    after = clock.iso(clock.parse_iso(created_after)) if created_after else None
    before = clock.iso(clock.parse_iso(created_before)) if created_before else None
    runs, nxt = runs_store.search_runs(
        principal.project_id,
        filters=filters,
        created_after=after,
        created_before=before,
        limit=limit,
        cursor=cursor,
        keep=_listed_for(readable),
    )
    # An input kept in S3 is not read: a list gives it as a reference (`run_views`).
    return runs, nxt


def _listed_for(resources: frozenset[str] | None) -> Callable[[Run], bool]:
    """Which runs a search answers: never a job (the engine's run; `GET /jobs` lists jobs),
    and for a key with only scoped grants, the runs of its resources."""
    apps: dict[str, str | None] = {}
    if resources is None:
        return lambda run: not is_interpreter_run(run)
    return lambda run: not is_interpreter_run(run) and run_resource(run, apps) in resources


def cancel_run(principal: Principal, run_id: str) -> Run:
    """Cancel a live run; needs `workflows.runs.cancel`, and `workflows.runs.read` for the
    run it answers, both checked before anything is written."""
    run = _visible_run(principal, run_id, CANCEL, READ, with_steps=False)
    if run.status in ENDED_STATUSES:
        raise Conflict(f"run {run_id} has ended ({run.status})", code="invalid_state")
    control.request_cancel(run, at=clock.iso(clock.now()))
    current = runs_store.get_run(run_id)
    for step in current.steps if current else ():  # its running children too
        if step.kind == "invoke" and step.child_run_id and step.status == "waiting":
            waits.cancel_run_quietly(step.child_run_id)
    return _visible_run(principal, run_id)


def retry_run(principal: Principal, run_id: str) -> Run:
    """Run a failed or timed-out run again; needs `workflows.runs.start`, and
    `workflows.runs.read` for the run it answers, both checked before anything is written."""
    run = _visible_run(principal, run_id, START, READ)
    if run.status not in ("failed", "timedOut"):
        raise Conflict(f"only a failed or timed-out run can be retried; run is {run.status}")
    control.retry(run, at=clock.iso(clock.now()))
    return _visible_run(principal, run_id)


def delete_run(principal: Principal, run_id: str) -> None:
    run = _visible_run(principal, run_id, CANCEL, with_steps=False)
    if run.status not in ENDED_STATUSES:
        raise Conflict(f"run {run_id} has not ended; cancel it first", code="invalid_state")
    retention.delete_callbacks(run.id)  # (an ended run's callbacks are refused anyway)
    runs_store.delete_run(run)
    payloads.delete_run_payloads(run.project_id, run.id)


def list_events(
    principal: Principal, run_id: str, *, limit: int = 100, cursor: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    _visible_run(principal, run_id, READ, with_steps=False)
    if not 1 <= limit <= 1000:
        raise ValidationError("limit must be from 1 to 1000")
    return runs_store.list_events(run_id, limit=limit, cursor=cursor)


def get_payload(principal: Principal, run_id: str, path: str) -> Any:
    """A large value of the run: `output`, `input`, or `steps/<stepId>/output`."""
    run = _visible_run(principal, run_id, READ)
    path = path.strip("/")
    if path == payloads.RUN_OUTPUT_PATH:
        if run.output_ref:
            return payloads.get(run.project_id, run.id, run.output_ref)
        if run.has_output:
            return run.output
    elif path == payloads.RUN_INPUT_PATH:
        return run.input
    elif path.startswith("steps/") and path.endswith("/output"):
        for step in run.steps:  # the path a step's outputRef names
            if step.output_ref == path:
                return payloads.get(run.project_id, run.id, step.output_ref)
        step_id = unquote(path[len("steps/") : -len("/output")])
        for step in run.steps:
            if step.id == step_id and step.output_ref:
                return payloads.get(run.project_id, run.id, step.output_ref)
            if step.id == step_id and step.has_output:
                return step.output
    raise NotFound(f"no payload {path!r} for run {run_id}")
