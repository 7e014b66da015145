"""The invoke request the engine sends an app, and its recorded steps as the invocation
protocol shows them (docs/protocol.md section 1.2).

Two shapes, by the version the app speaks (`protocol.spoken_with`):

- **1.4** (an app that said nothing newer): every recorded value inline, those kept in S3
  read back, however large the request grows. What every app got before 1.5.
- **1.5**: a request of bounded size (`protocol.bounds`). A value kept in S3 travels as a
  reference the SDK reads (`inputRef`, a step's `outputRef`); when the steps do not fit,
  the request lists the steps that have not ended and `stepsCursor` opens the ended ones,
  page by page (`service.invocation_state`). The engine reads nothing from S3 to build it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ezgh_engine.adapters import ddb, payloads
from ezgh_engine.config import settings
from ezgh_engine.core import tokens, trace_ids
from ezgh_engine.core.models import Run, Step
from ezgh_engine.core.protocol_rules import STEP_ENDED_STATUSES
from ezgh_engine.core.sizes import carried_size, json_text
from ezgh_engine.observability import traces
from ezgh_engine.protocol import bounds, spoken_with, takes_references
from ezgh_engine.service import callbacks

# What a history cursor opens (sealed in it): the steps not ended, read at once, then the
# ended ones page by page; or the ended ones from the start (the request lists the others).
PHASE_PENDING = "pending"
PHASE_ENDED = "ended"


def _protocol_fields(run_id: str, step: Step, body: dict[str, Any]) -> dict[str, Any]:
    url = callbacks.url_for(run_id, step)
    if url:
        body["url"] = url
    if step.branch:
        body["branch"] = True
    return body


# Whether the step call being answered came from an SDK that reads references (1.5, its
# body's `protocol`): a `recorded` result then gives an output kept in S3 as its reference,
# so a call's answer has a size of its own too. Set by the step calls' route.
_CALLER_READS_REFERENCES: ContextVar[bool] = ContextVar("caller_reads_references", default=False)


@contextmanager
def answering(caller_protocol: Any) -> Iterator[None]:
    """Answer a step call (its recorded steps) in the version its caller said."""
    reads = isinstance(caller_protocol, str) and takes_references(caller_protocol)
    token = _CALLER_READS_REFERENCES.set(reads)
    try:
        yield
    finally:
        _CALLER_READS_REFERENCES.reset(token)


def step_body(project_id: str, run_id: str, step: Step) -> dict[str, Any]:
    """A recorded step as a step call's `recorded` result shows it: the 1.4 shape (the API
    shape, a large output read back inline, plus the protocol-only fields: a callback's
    `url` and a parallel step's `branch`), or the 1.5 one for a caller that said 1.5."""
    if _CALLER_READS_REFERENCES.get():
        return step_ref_body(run_id, step)
    body = step.to_api()
    if step.output_ref:
        body.pop("outputRef")
        body["output"] = payloads.get(project_id, run_id, step.output_ref)
    return _protocol_fields(run_id, step, body)


def step_ref_body(run_id: str, step: Step) -> dict[str, Any]:
    """The 1.5 shape of a recorded step: an output kept in S3 stays its reference
    (`outputRef`, a payload path the SDK reads with the payload call); nothing is read."""
    return _protocol_fields(run_id, step, step.to_api())


def trace_context(run: Run, invocation_id: str) -> trace_ids.TraceContext:
    """The invocation's trace context as the app gets it: the run's trace, the app's span
    of this invocation as the parent, sampled as the run's trace is recorded."""
    return trace_ids.app_context(run.id, run.created_at, invocation_id, traces.sample_rate())


def history_cursor(run_id: str, phase: str, after: dict[str, Any] | None = None) -> str:
    """A cursor of the run's history (sealed: only this run's history call opens it)."""
    key: dict[str, Any] = {"phase": {"S": phase}}
    if after is not None:
        key["after"] = {"M": after}
    return ddb.encode_cursor(key, scope=history_scope(run_id))


def history_scope(run_id: str) -> str:
    return f"history:{run_id}"


def invoke_request(
    run: Run,
    invocation_id: str,
    lease_ms: int,
    now_ms: int,
    *,
    app_protocol: str | None,
    branch_step: str | None = None,
    branch_epoch: int = 0,
    branch_attempt: int | None = None,
    pull: bool = False,
) -> dict[str, Any]:
    """The invoke request (docs/protocol.md section 1.2) in the version `app_protocol` (the
    app's, as it said: see the module's doc). Its `api.url` is the steps URL, except for a
    `pull` app's task: its worker also posts heartbeats and the outcome there, which the API
    serves (the steps function answers only the invocation calls). `branch_attempt`: the
    attempt of `branch_step` its lease take started (docs/protocol.md section 7)."""
    cfg = settings()
    version = spoken_with(app_protocol)
    claims = tokens.InvocationClaims(
        run.id,
        run.project_id,
        branch_epoch if branch_step else run.epoch,
        run.attempt,
        now_ms + lease_ms,
        branch_step,
    )
    request: dict[str, Any] = {
        "protocol": version,
        "type": "invoke",
        "invocationId": invocation_id,
        "run": {
            "id": run.id,
            "appId": run.app_id,
            "workflow": run.workflow,
            "attempt": run.attempt,
            "status": run.status,
        },
        "steps": [],
        "api": {
            "url": cfg.api_url if pull else cfg.steps_url,
            "token": tokens.mint(cfg.token_secret, claims),
        },
        **({"branch": _branch(branch_step, branch_attempt)} if branch_step else {}),
        # How long the invoker waits for the answer (docs/protocol.md section 11); a pull
        # worker's task has no such limit (heartbeats extend its lease).
        **({} if pull else {"answerWithinSeconds": cfg.invoke_timeout_seconds}),
        # Where the app's own spans join the run's trace (docs/protocol.md section 1.2).
        "trace": trace_context(run, invocation_id).to_wire(),
    }
    if not takes_references(version):
        return _whole(request, run)
    budget = bounds.PULL_TASK_BYTES if pull else bounds.PUSH_REQUEST_BYTES
    return bounded(request, run, budget)


def _branch(step_id: str, attempt: int | None) -> dict[str, Any]:
    """A branch invocation's `branch`: its step, and the attempt the engine started (the SDK
    then sends no `start` and ends the step in its answer's `ops`)."""
    return {"stepId": step_id} if attempt is None else {"stepId": step_id, "attempt": attempt}


def _whole(request: dict[str, Any], run: Run) -> dict[str, Any]:
    """The 1.4 request: every value inline, whatever its size."""
    value = run.input if not run.input_ref else payloads.get(run.project_id, run.id, run.input_ref)
    request["run"]["input"] = value
    request["steps"] = [step_body(run.project_id, run.id, step) for step in run.steps]
    return request


def bounded(request: dict[str, Any], run: Run, budget: int) -> dict[str, Any]:
    """The 1.5 request within `budget`: every step if they fit; else the steps that have
    not ended and a cursor to the ended ones; else (a pull task with more steps waiting
    than it holds) none, and a cursor whose first page is the steps not ended."""
    if run.input_ref:
        request["run"]["inputRef"] = run.input_ref
    else:
        request["run"]["input"] = run.input
    bodies = [step_ref_body(run.id, step) for step in run.steps]
    request["steps"] = bodies
    if _fits(request, budget):
        return request
    request["steps"] = _pending(run.steps, bodies)
    request["stepsCursor"] = history_cursor(run.id, PHASE_ENDED)
    if _fits(request, budget):
        return request
    request["steps"] = []
    request["stepsCursor"] = history_cursor(run.id, PHASE_PENDING)
    return request


def _pending(steps: Sequence[Step], bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [body for step, body in zip(steps, bodies, strict=True) if not ended(step)]


def ended(step: Step) -> bool:
    return step.status in STEP_ENDED_STATUSES


def _fits(request: dict[str, Any], budget: int) -> bool:
    return carried_size(json_text(request)) <= budget
