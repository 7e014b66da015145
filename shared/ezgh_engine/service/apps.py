"""Apps: register, read, update, sync and delete the deployments that host workflows.

Permissions: changing an app (create, update, sync, delete) needs `workflows.apps.update` on
the app's name; setting notifications also needs `queues.messages.send` on the queue (as the
seed docs say). Reading an app (`GET /apps`, `GET /apps/{appId}`) needs a grant on it: any
`workflows.*` grant on the app's name or on one of its workflows (`<app name>/<workflow>`),
or one on every app or workflow (`Principal.sees`). A list answers the apps the key may
read; a read of another is `403 forbidden`. (Its URL may carry a token in its query.)
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

from ezgh_engine import clock, ids
from ezgh_engine.adapters import push, registry_store, runs_store
from ezgh_engine.core import validation
from ezgh_engine.core.models import App, Notifications, Principal
from ezgh_engine.core.run_errors import APP_DELETED
from ezgh_engine.errors import Conflict, EngineError, Forbidden, NotFound, ValidationError
from ezgh_engine.service import timers
from ezgh_engine.service.pull import delete_task_queue

APP_NAME_RE = re.compile(r"^[a-z0-9-]{1,64}$")
NOTIFY_ON = ("completed", "failed", "cancelled", "timedOut")
UPDATE_ACTION = "workflows.apps.update"

# Sentinel for "PATCH did not mention this field" (None means "set to null").
UNSET: Any = object()


def _require(principal: Principal, action: str, resource: str) -> None:
    if not principal.allows(action, resource):
        raise Forbidden(f"this API key lacks {action!r} on {resource!r}")


def _check_url(kind: str, url: str | None) -> str | None:
    """A push app's URL, checked; None while it has none yet (it is set later by PATCH: an
    app served by its owner gets its signing key first, then a URL, then a sync)."""
    if kind == "pull":
        if url is not None:
            raise ValidationError("url: only push apps have a URL")
        return None
    if url is None:
        return None
    if not url:
        raise ValidationError("url: a push app's URL, or none yet")
    try:
        # The literal host and every address it resolves to; loopback/private only in dev.
        return push.check_app_url(url)
    except ValidationError as err:
        raise ValidationError(f"url: {err.message}") from None


def create_app(
    principal: Principal, *, name: str, kind: Literal["push", "pull"], url: str | None
) -> App:
    """Register an app (status `pending`); its `signing_key` is read once from the answer."""
    if not APP_NAME_RE.match(name):
        raise ValidationError("name: must match ^[a-z0-9-]{1,64}$")
    _require(principal, UPDATE_ACTION, name)
    app = App(
        id=ids.new_id(),
        slug=ids.slug("wfa"),
        org_id=principal.org_id,
        project_id=principal.project_id,
        name=name,
        kind=kind,
        url=_check_url(kind, url),
        status="pending",
        workflows=(),
        signing_key=ids.secret_token(32),
        created_at=clock.iso(clock.now()),
        key_id=principal.key_id,
    )
    return registry_store.create_app(app)


def get_app(principal: Principal, app_ref: str) -> App:
    """An app of the caller's project by UUID, slug or name; 404 otherwise."""
    app = registry_store.get_app(principal.project_id, app_ref)
    if app is None:
        raise NotFound(f"app {app_ref} not found")
    return app


def read_app(principal: Principal, app_ref: str) -> App:
    """`GET /apps/{appId}`: the app, if the key may read it (403 otherwise)."""
    app = get_app(principal, app_ref)
    if not principal.sees("app", app.name):
        raise Forbidden(f"this API key holds no grant on app {app.name} or its workflows")
    return app


def list_apps(principal: Principal) -> list[App]:
    """The apps of the caller's project it may read, by name."""
    return [
        a for a in registry_store.list_apps(principal.project_id) if principal.sees("app", a.name)
    ]


def parse_notifications(value: dict[str, Any] | None) -> Notifications | None:
    """Validate a `notifications` object (already shaped by the API model) or null."""
    if value is None:
        return None
    queue_id = value.get("queueId")
    if not isinstance(queue_id, str) or not queue_id.strip():
        raise ValidationError("notifications.queueId: a queue ID is required")
    on = value.get("on")
    if not isinstance(on, list) or not on or any(s not in NOTIFY_ON for s in on):
        raise ValidationError(f"notifications.on: a non-empty subset of {list(NOTIFY_ON)}")
    workflows = value.get("workflows")
    if workflows is not None and not isinstance(workflows, list):
        raise ValidationError("notifications.workflows: null or a list of workflow names")
    if workflows is not None:  # kept in the app's item, as the app's own workflows are
        validation.check_app_workflows(list(dict.fromkeys(workflows)), "notifications.workflows")
    group_by: Literal["run", "workflow"] = "run"
    if value.get("groupBy") == "workflow":
        group_by = "workflow"
    elif value.get("groupBy") not in (None, "run"):
        raise ValidationError("notifications.groupBy: 'run' or 'workflow'")
    return Notifications(
        queue_id=queue_id,
        on=tuple(dict.fromkeys(on)),  # keep order, drop repeats
        workflows=None if workflows is None else tuple(dict.fromkeys(workflows)),
        group_by=group_by,
    )


def update_app(
    principal: Principal, app_ref: str, *, url: Any = UNSET, notifications: Any = UNSET
) -> App:
    """PATCH: change `url` and/or `notifications` (null turns notifications off).

    A new URL keeps the app's status and workflows (same app, moved); sync again to refresh.
    """
    app = get_app(principal, app_ref)
    _require(principal, UPDATE_ACTION, app.name)
    changed = app
    if url is not UNSET and url != app.url:
        # New code answers at the new URL: it acts for the key that pointed the app there.
        changed = replace(changed, url=_check_url(app.kind, url), key_id=principal.key_id)
    if notifications is not UNSET:
        parsed = parse_notifications(notifications)
        if parsed is not None:
            _require(principal, "queues.messages.send", parsed.queue_id)
        changed = replace(changed, notifications=parsed)
    if changed == app:
        return app
    return registry_store.save_app(changed)


def sync_app(principal: Principal, app_ref: str) -> App:
    """Ask a push app which workflows it hosts and record them (status `synced`).

    Any failure to reach the app or understand its answer is `409 app_not_synced` with the
    reason: the app's state, not the request, is what is wrong.
    """
    app = get_app(principal, app_ref)
    _require(principal, UPDATE_ACTION, app.name)
    if app.kind != "push":
        raise Conflict("a pull app is synced by its workers announcing themselves")
    if not app.url:
        raise Conflict(
            f"sync failed: app {app.name} has no URL yet; set it first "
            f"(PATCH /apps/{{appId}} {{url}}, or `ezgh workflows apps update {app.name} --url URL`)",
            code="app_not_synced",
        )
    try:
        synced = push.sync_app(app)  # names checked as a pull app's: at most 1,000, valid
    except EngineError as err:
        raise Conflict(f"sync failed: {err.message}", code="app_not_synced") from err
    return registry_store.update_app_after_sync(
        app, synced.workflows, synced.protocol, key_id=principal.key_id
    )


def _end_deleted(run_id: str, end_now: Any) -> bool:
    """End one run for its deleted app; a write lost to another change is tried again."""
    return any(end_now(run_id, "failed", APP_DELETED) for _ in range(3))


def delete_app(principal: Principal, app_ref: str) -> None:
    """Delete the app; its name is free again at once. Its live runs end `failed` with
    `workflows.app_deleted` now: nothing could run their next step (a run waiting on a
    callback without a timeout would otherwise stay `running` for ever)."""
    app = get_app(principal, app_ref)
    _require(principal, UPDATE_ACTION, app.name)
    registry_store.delete_app(app)
    if app.kind == "pull":  # its task queue goes with it
        delete_task_queue(app.id)
    end_runs_of_deleted_app(app.project_id, app.id)


def end_runs_of_deleted_app(project_id: str, app_id: str) -> int:
    """End every live run of a deleted app `failed` (`workflows.app_deleted`); answer how
    many. One query of the project's runs index per page (filtered to the app's running
    and cancelling runs), then one transaction per run. Idempotent: a run that ended
    meanwhile is skipped; the invoker ends one it meets later the same way."""
    ended = 0
    for status in ("running", "cancelling"):
        cursor: str | None = None
        while True:
            runs, cursor = runs_store.search_runs(
                project_id,
                filters={"appId": app_id, "status": status},
                created_after=None,
                created_before=None,
                limit=100,
                cursor=cursor,
            )
            ended += sum(_end_deleted(run.id, timers.end_now) for run in runs)
            if cursor is None:
                break
    return ended
