"""Whose authority an app's code acts with when it starts another app's workflow.

`ctx.step.invoke(name, workflow=…, app=…)` starts a run of another app of the project: what
`StartRun` does, so it needs what `StartRun` needs, `workflows.runs.start` on
`<app name>/<workflow>`. An app holds no API key, so it acts for the key recorded on it
(`App.key_id`): the key that last set what code it runs (created it, changed its URL, synced
it, announced one of its workers), as a flow's job acts for the key that started it. The key
is read again by its ID at each such invoke, so a revoked key (or one whose creator was
revoked) or a narrowed one stops it at once. A pull app's task handed out by
`tasks/poll` acts for the key that polled it instead (`Run.task_key_id`,
`core.task_claims`): a key that may only poll the app's tasks gets no more through the
app's code than it holds itself. Refused, the `invoke` step fails with
`workflows.forbidden` and no child run is started; the workflow sees the step's error.

Invoking the app's own workflows needs nothing: that is the app's own code. A job of EzFlow's
interpreter acts for its job's key instead, checked by the interpreter before each node
(`service.flow_authority`).
"""

from __future__ import annotations

from ezgh_engine.adapters import api_keys_store, registry_store
from ezgh_engine.core.flows.jobs import interpreter_app_id
from ezgh_engine.core.models import App, Run, RunError

START = "workflows.runs.start"
FORBIDDEN_CODE = "workflows.forbidden"
FORBIDDEN_NAME = "InvokeForbidden"


def _refused(message: str) -> RunError:
    return RunError(FORBIDDEN_CODE, FORBIDDEN_NAME, f"403 forbidden: {message}")


def invoke_refusal(parent: Run, target: App | None, workflow: str) -> RunError | None:
    """Why `parent`'s app may not start `workflow` of `target` (None: it may). A missing
    target (deleted meanwhile) is no start: its child ends `workflows.app_deleted`."""
    if target is None or target.id == parent.app_id:
        return None
    if parent.app_id == interpreter_app_id(parent.project_id):
        return None  # a job's node, checked against the job's key by the interpreter
    resource = f"{target.name}/{workflow}"
    caller = registry_store.get_app(parent.project_id, parent.app_id)
    if caller is None:
        return _refused(f"the app of run {parent.id} is gone; it starts nothing")
    key_id, whose = caller.key_id, f"app {caller.name} acts for"
    if parent.task_key_id is not None:
        key_id, whose = parent.task_key_id, f"the task of app {caller.name} was polled with"
    if key_id is None:
        return _refused(
            f"app {caller.name} records no API key to act for (registered before apps "
            "recorded one): sync it, or restart its workers, to record the key that does"
        )
    key = api_keys_store.get_api_key(parent.project_id, key_id)
    if key is None:
        return _refused(f"the API key {whose} ({key_id}) is revoked")
    if not key.principal().allows(START, resource):
        return _refused(f"the API key {whose} ({key_id}) may not {START} on {resource}")
    return None
