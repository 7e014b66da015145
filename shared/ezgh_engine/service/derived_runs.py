"""Runs the engine starts by itself (schedules, queue subscriptions), with derived IDs.

A derived ID is the same for the same cause, so "start exactly once" is the conditional put
of the run item: a second start with the same ID starts nothing and answers None. The app
must be synced and host the workflow (`startable_app`); the caller checks, between the two,
that the key its cause acts for may still start the workflow (`service.acting_keys`).
"""

from __future__ import annotations

import logging
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import registry_store, runs_store
from ezgh_engine.core.models import App, Run
from ezgh_engine.service.new_runs import new_run

log = logging.getLogger(__name__)


class NotStartable(Exception):
    """The app is gone, not synced, or does not host the workflow."""


def startable_app(project_id: str, app_ref: str, workflow: str) -> App:
    """The app that runs `workflow` now; `NotStartable` when it cannot."""
    # The app as read a moment ago (`registry_store.get_app_cached`: a burst of starts reads
    # it once); a refusal is read again first, so only a startable answer can be stale.
    app = registry_store.get_app_cached(project_id, app_ref)
    if _refusal(app, app_ref, workflow) is not None:
        app = registry_store.get_app(project_id, app_ref)
    refusal = _refusal(app, app_ref, workflow)
    if refusal is not None or app is None:
        raise NotStartable(refusal or f"app {app_ref} not found")
    return app


def start_derived_run(
    *,
    run_id: str,
    org_id: str,
    project_id: str,
    app: App,
    workflow: str,
    input: Any,
    schedule_id: str | None = None,
    parent_run_id: str | None = None,
) -> Run | None:
    """Start run `run_id` of `app` (a `startable_app`) unless it exists; answers the new
    run, or None when it existed."""
    run = new_run(
        run_id=run_id,
        org_id=org_id,
        project_id=project_id,
        app=app,
        workflow=workflow,
        value=input,
        schedule_id=schedule_id,
        parent_run_id=parent_run_id,
    )
    try:
        runs_store.create_run(run, now_epoch_s=int(clock.now().timestamp()))
    except runs_store.RunExists:
        return None
    return run


def _refusal(app: App | None, app_ref: str, workflow: str) -> str | None:
    """Why `app` cannot start `workflow` now, or None."""
    if app is None:
        return f"app {app_ref} not found"
    if app.status != "synced":
        return f"app {app.name} has not synced yet"
    if workflow not in app.workflows:
        return f"workflow {workflow} not found in app {app.name}"
    return None
