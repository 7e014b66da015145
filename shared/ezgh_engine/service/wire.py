"""The invoke request the engine sends an app, and its recorded steps as the invocation
protocol shows them (docs/protocol.md section 1.2)."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters import payloads
from ezgh_engine.config import settings
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Run, Step
from ezgh_engine.protocol import PROTOCOL_VERSION
from ezgh_engine.service import callbacks


def step_body(project_id: str, run_id: str, step: Step) -> dict[str, Any]:
    """The API shape, a large output read back inline, plus the protocol-only fields: a
    callback's `url` and a parallel step's `branch`."""
    body = step.to_api()
    if step.output_ref:
        body.pop("outputRef")
        body["output"] = payloads.get(project_id, run_id, step.output_ref)
    url = callbacks.url_for(run_id, step)
    if url:
        body["url"] = url
    if step.branch:
        body["branch"] = True
    return body


def invoke_request(
    run: Run,
    invocation_id: str,
    lease_ms: int,
    now_ms: int,
    *,
    branch_step: str | None = None,
    branch_epoch: int = 0,
    pull: bool = False,
) -> dict[str, Any]:
    """The invoke request of protocol 1.3 (docs/protocol.md section 1.2). Its `api.url` is
    the steps URL, except for a `pull` app's task: its worker also posts heartbeats and the
    outcome there, which the API serves (the steps function answers only step calls)."""
    cfg = settings()
    claims = tokens.InvocationClaims(
        run.id,
        run.project_id,
        branch_epoch if branch_step else run.epoch,
        run.attempt,
        now_ms + lease_ms,
        branch_step,
    )
    steps = [step_body(run.project_id, run.id, step) for step in run.steps]
    return {
        "protocol": PROTOCOL_VERSION,
        "type": "invoke",
        "invocationId": invocation_id,
        "run": {
            "id": run.id,
            "appId": run.app_id,
            "workflow": run.workflow,
            "input": run.input
            if not run.input_ref
            else payloads.get(run.project_id, run.id, run.input_ref),
            "attempt": run.attempt,
            "status": run.status,
        },
        "steps": steps,
        "api": {
            "url": cfg.api_url if pull else cfg.steps_url,
            "token": tokens.mint(cfg.token_secret, claims),
        },
        **({"branch": {"stepId": branch_step}} if branch_step else {}),
        # How long the invoker waits for the answer (docs/protocol.md section 11); a pull
        # worker's task has no such limit (heartbeats extend its lease).
        **({} if pull else {"answerWithinSeconds": cfg.invoke_timeout_seconds}),
    }
