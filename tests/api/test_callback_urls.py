"""A callback's URL on its step in GetRun, for a key that may complete it.

The URL is a bearer capability (whoever holds it completes the callback), so GetRun shows it
to a key that holds `workflows.runs.resume` on the run, not to one that may only read it.
It is made again from the token secret and the step's salt: the table holds no usable
secret, and the URL keeps its guarantees (one completion, 404 unknown, 409 completed).
"""

from __future__ import annotations

from typing import Any

from ezgh_engine import ids
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import waits_store as ws

from tests.api.conftest import Project, call
from tests.api.steps_helpers import lease_token, steps_call
from tests.api.test_run_scopes import key, pull_app, start

CALLBACK = {"op": "callback", "stepId": "approve#1", "name": "approve", "timeoutSeconds": None}


def _waiting_on_a_callback(project: Project) -> tuple[str, str]:
    """A run of `billing/approval` whose step `approve#1` waits on a callback made by the
    `callback` op; (run ID, the URL the op answered)."""
    app = pull_app(project, "billing", ["approval"])
    run_id = start(project, app, "approval")
    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None
    status, body, _ = steps_call(lease_token(run), [CALLBACK])
    assert status == 200, body
    return run_id, str(body["results"][0]["url"])


def _step(answer: Any) -> dict[str, Any]:
    assert answer.status == 200, answer.body
    (step,) = answer.body["steps"]
    return dict(step)


def test_getrun_shows_the_callback_url_to_a_key_that_may_resume(project: Project) -> None:
    run_id, url = _waiting_on_a_callback(project)
    resumer = key(
        project,
        ("workflows.runs.read", "billing/approval"),
        ("workflows.runs.resume", "billing/approval"),
    )
    shown = _step(project.call("GET", f"/runs/{run_id}", key=resumer))
    assert shown["kind"] == "callback" and shown["status"] == "waiting"
    assert shown["url"] == url
    admin = _step(project.call("GET", f"/runs/{run_id}"))
    assert admin["url"] == url

    # The URL shown is the one that works: once, then 409; a changed token is 404.
    token = url.rsplit("/", 1)[1]
    assert call("POST", f"/v1/callbacks/{token}", body={"ok": True}).status == 200
    assert call("POST", f"/v1/callbacks/{token}", body={"ok": True}).status == 409
    assert call("POST", f"/v1/callbacks/{token[:-2]}xx", body={}).status == 404
    done = _step(project.call("GET", f"/runs/{run_id}", key=resumer))
    assert done["status"] == "completed" and done["output"] == {"ok": True}
    assert "url" not in done  # it completes nothing any more


def test_a_key_that_may_only_read_the_run_gets_no_url(project: Project) -> None:
    run_id, _ = _waiting_on_a_callback(project)
    reader = key(project, ("workflows.runs.read", "billing/approval"))
    elsewhere = key(
        project,
        ("workflows.runs.read", "billing/approval"),
        ("workflows.runs.resume", "billing/other"),
    )
    for caller in (reader, elsewhere):
        step = _step(project.call("GET", f"/runs/{run_id}", key=caller))
        assert step["kind"] == "callback" and "url" not in step


def test_the_table_keeps_no_usable_secret(project: Project) -> None:
    """What is stored is the salt and the token's hash: neither is the URL's token."""
    run_id, url = _waiting_on_a_callback(project)
    token = url.rsplit("/", 1)[1]
    index = ws.get(ws.callback_pk(ids.sha256_hex(token)), "CALLBACK")
    assert index is not None and index["runId"] == run_id
    raw = runs_store.get_run(run_id)
    assert raw is not None
    stored = repr(raw) + repr(index)
    assert token not in stored
