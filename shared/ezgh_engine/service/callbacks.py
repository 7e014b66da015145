"""Callbacks: a step whose URL anyone may POST a JSON body to, without an API key.

The URL carries a token of 256 bits: HMAC-SHA256 (the engine's token secret) of the run, the
step and a random salt (`ids.secret_token`, 128 bits) kept on the step. The table keeps only
the salt and the token's SHA-256 (the index item `CALLBACK#<hash>`), so reading the table
does not give the URLs away, while every invocation can show the step's URL again.
Completing is one transaction: the step `waiting` → `completed` with the body, and an
`invokeSeq` bump of its live run. A body posted before the run reaches its wait completes the
step all the same; the wait then finds it completed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.intents import NewItem, NewStep
from ezgh_engine.config import settings
from ezgh_engine.core.models import Step
from ezgh_engine.errors import Conflict, NotFound
from ezgh_engine.service import waits

CALLBACK_PATH = "/v1/callbacks/"
_NOT_FOUND = "no such callback"  # the same answer for unknown, forged and expired tokens


def token_for(run_id: str, step_id: str, salt: str) -> str:
    digest = hmac.new(
        settings().token_secret.encode(), f"cb:{run_id}:{step_id}:{salt}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def url_for(run_id: str, step: Step) -> str | None:
    if step.kind != "callback" or not step.callback_salt:
        return None
    return settings().api_url + CALLBACK_PATH + token_for(run_id, step.id, step.callback_salt)


def create_actions(
    run_id: str,
    project_id: str,
    step_id: str,
    name: str,
    timeout_seconds: int | None,
    *,
    order: str,
    at: str,
    expires: int,
) -> tuple[tuple[NewStep, NewItem], str]:
    """The writes of a new callback step (to put under the invocation's lease): the step
    and its index entry; and its URL."""
    salt = ids.secret_token(16)
    token = token_for(run_id, step_id, salt)
    wake = None
    if timeout_seconds is not None:
        wake = clock.iso(clock.now() + _seconds(timeout_seconds))
    step = {
        "name": name,
        "kind": "callback",
        "status": "waiting",
        "attempt": 1,
        "order": order,
        "startedAt": at,
        "wakeAt": wake,
        "cbSalt": salt,
        "ttl": expires,
    }
    index = {
        "pk": ws.callback_pk(ids.sha256_hex(token)),
        "sk": "CALLBACK",
        "type": "callback",
        "runId": run_id,
        "stepId": step_id,
        "projectId": project_id,
        "ttl": expires,
    }
    url = settings().api_url + CALLBACK_PATH + token
    return (ws.step_put(run_id, step_id, step), ws.plain_put(index)), url


def _seconds(value: int) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value)


def find(token: str) -> tuple[str, str]:
    """The `(run ID, step ID)` of the callback `token` names; 404 for a token that names
    none (unknown, forged or expired). The route calls this before it reads the body: a
    caller without a valid URL learns nothing of what a body should be."""
    if not token or len(token) > 128:
        raise NotFound(_NOT_FOUND)
    index = ws.get(ws.callback_pk(ids.sha256_hex(token)), "CALLBACK")
    if index is None or int(index.get("ttl", 0)) < int(clock.now().timestamp()):
        raise NotFound(_NOT_FOUND)
    return str(index["runId"]), str(index["stepId"])


def complete(token: str, body: Any, found: tuple[str, str] | None = None) -> dict[str, Any]:
    """POST <callback url>: 200 `{"status":"completed"}`; 404 for a token that names no
    callback; 409 `invalid_state` when the callback completed or timed out already.
    `found`: what `find(token)` answered already."""
    run_id, step_id = found or find(token)
    run = runs_store.get_run(run_id, with_steps=False)
    if run is None:
        raise NotFound(_NOT_FOUND)
    actions = waits.end_wait_actions(
        run_id, run.attempt, step_id, output=body, kind="callback", project_id=run.project_id
    )
    if ws.transact(actions):
        return {"status": "completed"}
    raw = ws.get(items.run_pk(run_id), items.STEP_PREFIX + step_id)
    status = raw.get("status") if raw else "gone"
    if status == "waiting":  # the step waits but its run ended
        raise Conflict(f"the run has ended ({run.status})", code="invalid_state")
    raise Conflict(f"the callback is no longer waiting ({status})", code="invalid_state")
