"""Shared builders for the step-call tests: a run item written as StartRun would leave it,
the invoker's lease and token, and the steps function called as Lambda would call it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import aws, run_writes, runs_store
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Run
from ezgh_engine.service import callbacks

from tests.api.conftest import make_event

WRITES = {"PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem", "BatchWriteItem"}


def write_raw(actions: list[Any]) -> None:
    """Write a state the engine's own writes would not leave (a test's set-up): requests as
    DynamoDB takes them, or write intents (`adapters.intents`), in one transaction."""
    requests = [a if isinstance(a, dict) else run_writes.request(a) for a in actions]
    aws.client("dynamodb").transact_write_items(TransactItems=requests)


def new_run(**changes: Any) -> Run:
    """A running run's model (not stored), fields overridden by `changes`."""
    now = clock.iso(clock.now())
    run = Run(
        id=ids.new_id(),
        org_id="o",
        project_id=ids.new_id(),
        app_id="a",
        workflow="w",
        status="running",
        input=None,
        attempt=1,
        created_at=now,
        started_at=now,
        version=1,
        invoke_seq=1,
        handled_seq=0,
    )
    return replace(run, **changes)


def stored_run(**changes: Any) -> Run:
    """`new_run(**changes)`, written as the run's item."""
    run = new_run(**changes)
    ws.transact([ws.plain_put(items.run_values(run))])
    return run


def lease_token(run: Run, seq: int = 1) -> str:
    """Take the run's lease as the invoker does; the invocation's token."""
    leased = inv.take_lease(run.id, seq, now_ms=clock.now_ms(), lease_ms=600_000)
    assert leased is not None
    claims = tokens.InvocationClaims(
        run.id, run.project_id, leased.epoch, 1, clock.now_ms() + 600_000
    )
    return tokens.mint(config.settings().token_secret, claims)


def free_lease(run: Run) -> None:
    """The lease ends (as if it expired) and a new reason to invoke arrives."""
    write_raw(
        [
            {
                "Update": {
                    "TableName": config.settings().runs_table,
                    "Key": items.run_key(run.id),
                    "UpdateExpression": "SET leaseUntil = :zero, invokeSeq = invokeSeq + :one",
                    "ExpressionAttributeValues": {":zero": {"N": "0"}, ":one": {"N": "1"}},
                }
            }
        ]
    )


def steps_call(token: str, ops: list[dict[str, Any]]) -> tuple[int, Any, list[str]]:
    """POST ops to the steps function; (status, body, the DynamoDB writes it made)."""
    from functions.steps.handler import handler

    seen: list[str] = []
    stop = aws.observe(
        lambda r: seen.append(r["operation"]) if r["service"] == "dynamodb" else None
    )
    try:
        answer = handler(
            make_event(
                "POST",
                "/v1/invocations/steps",
                body={"deploymentId": "dep-1", "ops": ops},
                headers={"authorization": f"Bearer {token}"},
            ),
            LambdaContext(),
        )
    finally:
        stop()
    return answer["statusCode"], json.loads(answer["body"]), [o for o in seen if o in WRITES]


def start(step: str, attempt: int = 1) -> dict[str, Any]:
    """A `start` op of `step` (its name is the ID's part before `#`)."""
    return {"op": "start", "stepId": step, "name": step.split("#")[0], "attempt": attempt}


def complete(step: str, output: Any, inline: Any = None) -> dict[str, Any]:
    """A `complete` op of `step`, `inline` when the step ran without its own start call."""
    op = {"op": "complete", "stepId": step, "output": output}
    return {**op, "inline": inline} if inline else op


def steps_of(run: Run) -> dict[str, tuple[str, int]]:
    """The run's stored steps: ID -> (status, attempt)."""
    found = runs_store.get_run(run.id)
    assert found is not None
    return {s.id: (s.status, s.attempt) for s in found.steps}


def waiting_callback() -> tuple[Run, str, str]:
    """A live run with one `waiting` callback step, written as the invoker writes it."""
    run = new_run(workflow="approval", handled_seq=1)
    ws.transact([ws.plain_put(items.run_values(run))])
    step_id = "approve"
    actions, url = callbacks.create_actions(
        run.id,
        run.project_id,
        step_id,
        "approve",
        None,
        order=ids.time_ordered_id(),
        at=run.created_at,
        expires=int(clock.now().timestamp()) + 3600,
    )
    assert ws.transact(actions)
    return run, step_id, url.rsplit("/", 1)[1]
