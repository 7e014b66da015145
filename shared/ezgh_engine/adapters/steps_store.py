"""Reads of step calls (docs/protocol.md section 2): a step as recorded, the run's state and a
branch step's lease, read before or after a write. The writes themselves are intents
(`adapters.intents`: `StepStart`, `StepEnd`, `ValueRecord`, ...) that the op modules of
`service.step_ops` plan and `adapters.run_writes` writes: on the steps' own conditions (the
fast path) or under the invocation's lease. A refused step condition means the step holds
something else already: the caller gets the recorded step back instead of a second effect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update
from ezgh_engine.adapters.intents import Lease
from ezgh_engine.adapters.run_writes import BRANCH_VALUES, RUN_ATTEMPT_ATTR, AlreadyRecorded
from ezgh_engine.config import settings
from ezgh_engine.core.models import Step

__all__ = [
    "AlreadyRecorded",
    "Lease",
    "answer_branch_task",
    "branch_lease",
    "drop_stale",
    "event_marks",
    "get_step",
    "give_back_start",
    "hold_branch_task",
    "run_state",
    "take_branch_lease",
]


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def get_step(run_id: str, step_id: str) -> Step | None:
    answer = _ddb().get_item(
        TableName=_table(), Key=items.step_key(run_id, step_id), ConsistentRead=True
    )
    return items.step_from(ddb.from_item(answer["Item"])) if "Item" in answer else None


def event_marks(event_id: str, run_attempt: int, deployment_id: str | None) -> dict[str, Any]:
    """Attributes that make a step item its own `step.completed` event (`runs_store`
    lists them among the run's events), instead of a separate event item per step."""
    marks: dict[str, Any] = {"evtId": event_id, "evtAttempt": run_attempt}
    if deployment_id is not None:
        marks["deploymentId"] = deployment_id
    return marks


def run_state(run_id: str) -> tuple[str, int, int] | None:
    """The run's status, lease epoch and lease end (ms), read eventually consistent (half a
    read unit): enough to stop an invocation whose run ended, was taken over or that has
    answered, which its steps' own conditions would otherwise only catch when it touched a
    step another one owns."""
    answer = _ddb().get_item(
        TableName=_table(),
        Key=items.run_key(run_id),
        ProjectionExpression="#status, epoch, leaseUntil",
        ExpressionAttributeNames={"#status": "status"},
    )
    if "Item" not in answer:
        return None
    values = ddb.from_item(answer["Item"])
    return (
        str(values.get("status")),
        int(values.get("epoch", 0)),
        int(values.get("leaseUntil", 0)),
    )


def branch_lease(run_id: str, step_id: str) -> tuple[int, int]:
    """A branch step's lease: its `branchEpoch` and `branchLeaseUntil` (ms), read
    consistently; (-1, 0) when the step does not exist."""
    answer = _ddb().get_item(
        TableName=_table(),
        Key=items.step_key(run_id, step_id),
        ProjectionExpression="branchEpoch, branchLeaseUntil",
        ConsistentRead=True,
    )
    values = ddb.from_item(answer["Item"]) if "Item" in answer else {}
    return int(values.get("branchEpoch", -1)), int(values.get("branchLeaseUntil", 0))


def take_branch_lease(
    run_id: str,
    step_id: str,
    *,
    now_ms: int,
    lease_ms: int,
    started_at: str | None = None,
    creates: tuple[int, Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """Take a parallel step's own lease for one branch invocation (`branchEpoch` + 1, live
    until `now_ms + lease_ms`) while it is `waiting` or `running` and no other delivery
    holds it: one conditional write, answering the step as written (None when refused).
    With `started_at` the same write starts the step's next attempt for that invocation
    (`running`, `attempt` + 1, `startEpoch` the new branch epoch), so the SDK sends no
    `start` (docs/protocol.md section 7). The run need not be checked here: its invocation
    reads it next, and a run that ended has its pending steps ended with it.

    `creates`: (the run attempt that launched the step, its launch values), from a branch
    message that carries them. The step may then have no item yet (its launch made none):
    this write creates it, claimed and started (attempt 1, branch epoch 1), and writes
    its values only where the item lacks them. An item another run attempt's message
    created is not taken (it is removed by that message's own claim, or `drop_stale`)."""
    update = Update().set("branchLeaseUntil", now_ms + lease_ms)
    live = "branch = :true AND #status IN (:waiting, :running) AND branchLeaseUntil < :now"
    update.bind(true=True, waiting="waiting", running="running", now=now_ms)
    if creates is None:
        update.set_raw("branchEpoch = branchEpoch + :one", one=1).where(live)
    else:
        attempt, values = creates
        _create_values(update, run_id, step_id, attempt, values)
        update.where(
            f"attribute_not_exists(pk) OR ({live} AND (attribute_not_exists(#runAttempt) "
            "OR #runAttempt = :runAttempt))"
        )
    if started_at is not None:
        # (Every operand reads the item as it was: `startEpoch` is the new branch epoch.)
        update.set("status", "running").set("startedAt", started_at)
        update.set_raw("startEpoch = if_not_exists(branchEpoch, :zero) + :one", zero=0, one=1)
        update.set_raw("attempt = if_not_exists(attempt, :zero) + :one")
        update.remove("error")
    try:
        answer = _ddb().update_item(
            **update.request(
                TableName=_table(), Key=items.step_key(run_id, step_id), ReturnValues="ALL_NEW"
            )
        )
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            return None
        ddb.raise_transient(exc)
        raise
    return ddb.from_item(answer["Attributes"])


def _create_values(
    update: Update, run_id: str, step_id: str, attempt: int, values: Mapping[str, Any]
) -> None:
    """What a claim that may create its step's item writes besides the claim: the item's
    identity and launch values where it lacks them (an existing item keeps its own)."""
    update.set_raw("branchEpoch = if_not_exists(branchEpoch, :zero) + :one", zero=0, one=1)
    fixed = {"type": "step", "runId": run_id, "stepId": step_id, "branch": True}
    fixed[RUN_ATTEMPT_ATTR] = attempt
    carried = {k: v for k, v in values.items() if k in BRANCH_VALUES}
    for name, value in {**carried, **fixed}.items():
        update.set_raw(f"#{name} = if_not_exists(#{name}, :{name})", **{name: value})


def drop_stale(run_id: str, step_id: str, *, epoch: int, run_attempt: int) -> bool:
    """Delete a pending parallel step that a branch message of run attempt `run_attempt`
    created, while branch epoch `epoch` still holds it: the run moved to another attempt
    (a RetryRun reset its pending steps), so it is no step of the run's. False, deleting
    nothing, when the item is not that any more."""
    condition = Update().where(
        f"branchEpoch = :e AND #{RUN_ATTEMPT_ATTR} = :a AND #status IN (:waiting, :running)",
        e=epoch,
        a=run_attempt,
        waiting="waiting",
        running="running",
    )
    request = condition.request(TableName=_table(), Key=items.step_key(run_id, step_id))
    return ddb.deleted_if(_ddb(), **request)


def give_back_start(run_id: str, step_id: str, *, epoch: int, until_ms: int, failures: int) -> bool:
    """Give back the attempt the lease take of `epoch` started, in the write that sets the
    step's lease to `until_ms` and its delivery `failures` (what `branch_answers.release`
    writes): the attempt goes back and `startEpoch` names no epoch, so the next start (the
    next lease take, or a pull worker's `start`) counts it again. For a pull app's branch
    task (its worker starts the step itself: a task no worker took must not use up the
    step's retries) and a push delivery that failed (an app that could not be reached uses
    up none). False, writing nothing, when that epoch's start no longer holds the step."""
    update = (
        Update()
        .set("branchLeaseUntil", until_ms)
        .set("branchFailures", failures)
        .set("startEpoch", -1)
        .set_raw("attempt = attempt - :one", one=1)
        .where("branchEpoch = :e AND startEpoch = :e AND #status = :running", e=epoch)
        .bind(running="running")
    )
    return _written(update, run_id, step_id)


# A branch step's throttled deliveries (its app answered `throttled`), apart from its
# `branchFailures`: what bounds them (`protocol_rules.MAX_THROTTLED_DELIVERIES`).
BRANCH_THROTTLES_ATTR = "branchThrottles"

# A branch task's marks on its step (a pull app's parallel step, `service.pull_branch`): the
# claim on the task of one branch epoch (`<branchEpoch>/<claim>`: a task SQS delivered twice
# runs once; the claim names the key that polled it, `core.task_claims`), and the branch
# epoch whose task was answered (its outcome applies once).
BRANCH_CLAIM_ATTR = "tc"
BRANCH_ANSWERED_ATTR = "branchAnswered"


def _not_answered(update: Update) -> Update:
    return update.where(
        f"attribute_not_exists({BRANCH_ANSWERED_ATTR}) OR {BRANCH_ANSWERED_ATTR} <> :e"
    )


def _written(update: Update, run_id: str, step_id: str) -> bool:
    """Write `update` to the step; False when its condition refused it."""
    request = update.request(TableName=_table(), Key=items.step_key(run_id, step_id))
    return ddb.updated_if(_ddb(), **request)


def hold_branch_task(
    run_id: str,
    step_id: str,
    *,
    epoch: int,
    until_ms: int,
    now_ms: int,
    claim: str | None = None,
) -> bool:
    """Extend the branch task of `epoch` to `until_ms` (a heartbeat; with `claim`, the
    same write claims the task): one conditional write, refused (False) unless that epoch
    still holds the step's live lease, the step is pending and the task was not answered;
    a claim also unless another claim holds the task (the same claim again, a retry whose
    answer was lost, holds)."""
    update = (
        Update()
        .set("branchLeaseUntil", until_ms)
        .where("branchEpoch = :e AND #status IN (:waiting, :running)", e=epoch)
        .bind(waiting="waiting", running="running")
        .where("branchLeaseUntil >= :now", now=now_ms)
    )
    _not_answered(update)
    if claim is not None:
        task = f"{epoch}/"
        update.set(BRANCH_CLAIM_ATTR, task + claim).where(
            f"attribute_not_exists({BRANCH_CLAIM_ATTR}) OR NOT begins_with({BRANCH_CLAIM_ATTR},"
            f" :task) OR {BRANCH_CLAIM_ATTR} = :claim",
            task=task,
            claim=task + claim,
        )
    return _written(update, run_id, step_id)


def answer_branch_task(run_id: str, step_id: str, *, epoch: int, now_ms: int) -> bool:
    """Mark the branch task of `epoch` answered, once: refused (False) when another epoch
    holds the step, the task was answered already, or the step is still pending and the
    task's lease ran out (the task is another worker's now). A step the task's step call
    ended (which released the lease) takes its answer."""
    update = (
        Update()
        .set(BRANCH_ANSWERED_ATTR, epoch)
        .where("branchEpoch = :e", e=epoch)
        .where(
            "#status IN (:completed, :failed, :cancelled) OR branchLeaseUntil >= :now",
            completed="completed",
            failed="failed",
            cancelled="cancelled",
            now=now_ms,
        )
    )
    return _written(_not_answered(update), run_id, step_id)
