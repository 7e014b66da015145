"""EzFlow's interpreter hosted by the stack: its app registered and synced in a project at
first use (the topology's `flows` function, `settings().flows_url`)."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from ezgh_engine import clock, ids
from ezgh_engine.adapters import flows_store, push, registry_store
from ezgh_engine.config import settings
from ezgh_engine.core.flows.jobs import INTERPRETER_APP, INTERPRETER_WORKFLOW
from ezgh_engine.core.models import App, Principal
from ezgh_engine.errors import Conflict, EngineError
from ezgh_engine.interpreter.hosting import signing_key
from ezgh_engine.protocol import PROTOCOL_VERSION


def interpreter_app(principal: Principal) -> App:
    """The project's interpreter app, registered and synced at first use where the stack
    hosts the interpreter (its `flows` function, `settings().flows_url`); else the app of
    that name someone registered. `409 app_not_synced` when there is none or it is not
    synced (the reason in the message)."""
    app_id = flows_store.find_app_id(principal.project_id, INTERPRETER_APP)
    app = registry_store.get_app(principal.project_id, app_id) if app_id else None
    url = settings().flows_url
    if url and (app is None or app.id == _hosted_id(principal.project_id)):
        app = _host_interpreter(principal, app, url)
    if app is None or app.status != "synced" or INTERPRETER_WORKFLOW not in app.workflows:
        raise Conflict(
            f"the flows interpreter app {INTERPRETER_APP!r} is not registered and synced in "
            "this project (see docs/flows.md)",
            code="app_not_synced",
        )
    return app


def _hosted_id(project_id: str) -> str:
    # Derived, so concurrent first uses write the same record and one of them wins.
    return ids.derived_id("ezgh-flows-app", project_id)


def is_hosted(app: App) -> bool:
    """The app is the interpreter the stack hosts (its `flows` function), not one of the
    user's: in `ezgh dev` it runs in the engine's own process."""
    return app.id == _hosted_id(app.project_id)


def _host_interpreter(principal: Principal, app: App | None, url: str) -> App:
    """Register the stack's interpreter in the project (once), keep its URL the stack's,
    and sync it until it is synced. Registering is the engine's own act: no key needs
    `workflows.apps.update` for it (nothing of the user's changes)."""
    if app is None:
        fresh = App(
            id=_hosted_id(principal.project_id),
            slug=ids.slug("wfa"),
            org_id=principal.org_id,
            project_id=principal.project_id,
            name=INTERPRETER_APP,
            kind="push",
            url=url,
            status="pending",
            workflows=(),
            signing_key=signing_key(),
            created_at=clock.iso(clock.now()),
        )
        try:
            app = registry_store.create_app(fresh)
        except Conflict:  # a concurrent first use registered it
            app = registry_store.get_app(principal.project_id, fresh.id)
            if app is None:
                raise
    if app.url != url:  # the stack's function moved (a new URL): follow it
        with contextlib.suppress(Conflict):  # a concurrent first use moved it already
            registry_store.save_app(replace(app, url=url, status="pending"))
        app = registry_store.get_app(principal.project_id, app.id) or app
    synced_now = app.status == "synced" and app.protocol == PROTOCOL_VERSION
    if synced_now and INTERPRETER_WORKFLOW in app.workflows and app.url == url:
        return app
    try:
        synced = push.sync_app(app)
    except EngineError as err:
        raise Conflict(
            f"the flows interpreter at {url} did not answer its sync: {err.message}",
            code="app_not_synced",
        ) from err
    return registry_store.update_app_after_sync(app, synced.workflows, synced.protocol)
