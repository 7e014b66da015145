"""EzFlow's interpreter: the engine's own app in every project, never one of the project's.

The interpreter is the stack's `flows` function (`settings().flows_url`). Its app is not a
record any API call can reach: there is none. The engine makes it up where it needs it
(`interpreter_app`), under an ID derived from the project (`core.flows.jobs.
interpreter_app_id`) that no app a user creates can have, with the signing key the
function derives from the token secret. The registry's reads hide that ID too
(`registry_store.get_app`, for records an earlier version of the engine wrote), so no
`{appId}`, `StartRun`, schedule, subscription or `ctx.step.invoke(app=…)` can name it; the
runs API hides its runs (`service.runs`). Jobs start only through the flows API, flow
schedules and flow subscriptions (`service.flow_jobs`).
"""

from __future__ import annotations

from ezgh_engine.config import settings
from ezgh_engine.core.flows.jobs import INTERPRETER_APP, INTERPRETER_WORKFLOW, interpreter_app_id
from ezgh_engine.core.models import App, Principal, Run
from ezgh_engine.interpreter.hosting import signing_key
from ezgh_engine.protocol import PROTOCOL_VERSION

# The interpreter app's creation time, as its record would show it (it has none).
_EPOCH = "1970-01-01T00:00:00.000Z"


def engine_app(org_id: str, project_id: str) -> App:
    """The project's interpreter app: synced, hosting `flow`, at the stack's function."""
    return App(
        id=interpreter_app_id(project_id),
        slug="",
        org_id=org_id,
        project_id=project_id,
        name=INTERPRETER_APP,
        kind="push",
        url=settings().flows_url or None,
        status="synced",
        workflows=(INTERPRETER_WORKFLOW,),
        signing_key=signing_key(),
        created_at=_EPOCH,
        # The interpreter is a `PushApp` of the SDK shipped with the engine: it speaks the
        # engine's protocol (bounded requests, however large a job's history).
        protocol=PROTOCOL_VERSION,
    )


def interpreter_app(principal: Principal) -> App:
    """The interpreter app of the principal's project (`ezgh dev` prints it at start)."""
    return engine_app(principal.org_id, principal.project_id)


def is_interpreter_run(run: Run) -> bool:
    """Whether the run is a job: a run of the project's interpreter app."""
    return run.app_id == interpreter_app_id(run.project_id)


def is_hosted(app: App) -> bool:
    """The app is the interpreter (in `ezgh dev` it runs in the engine's own process)."""
    return app.id == interpreter_app_id(app.project_id)


def interpreter_app_of(run: Run) -> App | None:
    """The interpreter app, when the run is a job (None otherwise): what the engine's own
    work on a run (invoking it, its parallel branches) finds where the registry has no
    record, never what a caller's reference to an app finds."""
    return engine_app(run.org_id, run.project_id) if is_interpreter_run(run) else None
