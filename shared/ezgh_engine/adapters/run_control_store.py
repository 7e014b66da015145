"""DynamoDB writes of run controls: cancel and retry. Both ask for an invocation by bumping
`invokeSeq`, so the stream (the outbox) sends it."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, run_writes, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.adapters.expressions import Update, UpdateAction
from ezgh_engine.adapters.intents import NewItem
from ezgh_engine.adapters.runs_store import CHILD_ITEM_TTL_SECONDS, event_put
from ezgh_engine.config import settings
from ezgh_engine.core import events
from ezgh_engine.core.events import BRANCH_OUTCOMES_ATTR
from ezgh_engine.core.models import Run, RunError, Step
from ezgh_engine.errors import Conflict
from ezgh_engine.topology import RUNS_BY_STATUS

RESET_STATUSES = ("failed", "cancelled", "sleeping", "waiting", "retrying")
RETRYABLE_STATUSES = ("failed", "timedOut")
# RetryRun right after a run's end can meet that end's cleanup, which cancels the run's
# pending steps one write each after the end's own write (`waits.cancel_leftovers`): a step
# read `sleeping` is `cancelled` when RetryRun's write lands. It reads again and tries again.
RETRY_TRIES = 3


class RunChanged(Conflict):
    """The run (or one of the steps a retry resets) changed between its read and the write."""


def _expires() -> int:
    return int(clock.now().timestamp()) + CHILD_ITEM_TTL_SECONDS


def request_cancel(run: Run, *, at: str) -> None:
    """`running` → `cancelling`; the next invocation ends the run `cancelled`."""
    actions: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": settings().runs_table,
                "Key": items.run_key(run.id),
                "UpdateExpression": (
                    "SET #status = :cancelling, #ist = :ist, invokeSeq = invokeSeq + :one, "
                    "version = version + :one"
                ),
                "ConditionExpression": "#status = :running",
                "ExpressionAttributeNames": {
                    "#status": "status",
                    "#ist": RUNS_BY_STATUS.partition_key,
                },
                "ExpressionAttributeValues": {
                    ":cancelling": {"S": "cancelling"},
                    ":ist": {"S": items.status_index_pk(run, "cancelling")},
                    ":running": {"S": "running"},
                    ":one": {"N": "1"},
                },
            }
        },
        event_put(run.id, run.attempt, "run.cancelling", at, _expires()),
    ]
    try:
        client("dynamodb").transact_write_items(TransactItems=actions)
    except ClientError as exc:
        if "ConditionalCheckFailed" in ddb.cancellation_codes(exc):
            current = (
                client("dynamodb")
                .get_item(
                    TableName=settings().runs_table, Key=items.run_key(run.id), ConsistentRead=True
                )
                .get("Item")
            )
            status = ddb.from_item(current)["status"] if current else "deleted"
            if status == "cancelling":
                return  # asked twice: the first request stands
            raise Conflict(f"run {run.id} has ended ({status})", code="invalid_state") from None
        ddb.raise_transient(exc)
        raise


def retry(run: Run, *, at: str) -> None:
    """A failed or timed-out run runs again with attempt + 1, keeping its completed steps;
    its failed steps are forgotten so they run again. A run that changed under the write
    (the end's cleanup still cancelling its steps) is read and tried again while it stays
    failed or timed out; `RunChanged` once it did not (another retry won) or kept changing."""
    for tries_left in range(RETRY_TRIES - 1, -1, -1):
        try:
            _retry_once(run, at=at)
            return
        except RunChanged:
            fresh = runs_store.get_run(run.id)
            if not tries_left or fresh is None or fresh.status not in RETRYABLE_STATUSES:
                raise
            run = fresh


def _retry_once(run: Run, *, at: str) -> None:
    """RetryRun's one conditional write, on the run and steps as `run` holds them."""
    again = (
        Update()
        .set("status", "running")
        .set(RUNS_BY_STATUS.partition_key, items.status_index_pk(run, "running"))
        .set_raw(
            "attempt = attempt + :one, invokeSeq = invokeSeq + :one, version = version + :one, "
            # A new epoch: the old attempt's tokens and late writes are refused.
            "epoch = epoch + :one",
            one=1,
        )
        .set("invokeFailures", 0)
        .set("leaseUntil", 0)
        .remove("endedAt", "error", "ttl", "notifyEnd", items.INVOKE_THROTTLES_ATTR)
        .where("version = :v AND #status IN (:failed, :timedOut)", v=run.version)
        .bind(failed=RETRYABLE_STATUSES[0], timedOut=RETRYABLE_STATUSES[1])
    )
    if run.deadline_at:  # a new attempt gets the run's time limit afresh
        limit = clock.parse_iso(run.deadline_at) - clock.parse_iso(run.created_at)
        again.set("deadlineAt", clock.iso(clock.now() + limit))
    actions: list[dict[str, Any]] = [
        UpdateAction(again, TableName=settings().runs_table, Key=items.run_key(run.id)),
        event_put(run.id, run.attempt + 1, "run.retried", at, _expires()),
    ]
    # Failed steps run again; so do steps a timeout or cancellation ended, and steps left
    # pending (a sleep, wait or retry whose timer or wake-up was dropped while the run was
    # ended): the new attempt records them afresh, with timers of their own.
    # (A step running by a mark only, or launched and never claimed, has no item: the new
    # attempt's replay does not see it, its launch being of the run's old attempt.)
    reset = [
        s for s in run.steps if s.status in RESET_STATUSES and not s.inline and s.launched is None
    ]
    _keep_events(run.id, reset)
    actions.extend(_step_delete(run.id, step) for step in reset)
    try:
        client("dynamodb").transact_write_items(TransactItems=actions)
    except ClientError as exc:
        if "ConditionalCheckFailed" in ddb.cancellation_codes(exc):
            raise RunChanged(f"run {run.id} changed meanwhile; read it and try again") from None
        ddb.raise_transient(exc)
        raise


def _keep_events(run_id: str, steps: list[Step]) -> None:
    """The events the steps' items carry (a parallel step's branch invocations, `bOut`),
    written out as event items before the steps are deleted: a run's history loses no
    entry. Each is the same item each time (keyed by its event's ID), so a retry that then
    loses, or that runs again, leaves one event per ID (the listing shows one per ID)."""
    expires = _expires()
    kept = [
        NewItem({"pk": items.run_pk(run_id), **events.event_item(e), "ttl": expires}, False)
        for step in steps
        for e in step.events
    ]
    run_writes.write_each(kept)


def _step_delete(run_id: str, step: Step) -> dict[str, Any]:
    """The delete of a step a retry resets, while it is as read: its status, and no branch
    invocation's events added since its events were kept (`_keep_events`)."""
    condition = Update().where(
        f"#status = :was AND (attribute_not_exists(#{BRANCH_OUTCOMES_ATTR}) "
        f"OR size(#{BRANCH_OUTCOMES_ATTR}) = :marks)",
        was=step.status,
        marks=events.branch_outcomes(step.events),
    )
    key = items.step_key(run_id, step.id)
    return {"Delete": condition.request(TableName=settings().runs_table, Key=key)}


def end_now(run: Run, status: str, error: RunError, *, at: str) -> bool:
    """End the live run `run` (as read: its `version`) with `status` and `error` now,
    whatever invocation holds it: the epoch moves on, so that invocation's writes fail; the
    reason it answered is marked handled. With its event, in one transaction. False when
    the run ended or changed since it was read."""
    now_s = int(clock.now().timestamp())
    end = (
        Update()
        .set("status", status)
        .set(RUNS_BY_STATUS.partition_key, items.status_index_pk(run, status))
        .set("endedAt", at)
        .set("error", error.to_api())
        .set_raw("handledSeq = invokeSeq, epoch = epoch + :one, version = version + :one", one=1)
        .set("leaseUntil", 0)
        .set("ttl", now_s + runs_store.RETENTION_SECONDS)
        .where(f"{items.LIVE_CONDITION} AND version = :v", v=run.version)
        .bind(typed=True, **{k.removeprefix(":"): v for k, v in items.LIVE_VALUES.items()})
    )
    actions = [
        UpdateAction(end, TableName=settings().runs_table, Key=items.run_key(run.id)),
        event_put(
            run.id,
            run.attempt,
            f"run.{status}",
            at,
            now_s + CHILD_ITEM_TTL_SECONDS,
            error=error.to_api(),
        ),
    ]
    try:
        client("dynamodb").transact_write_items(TransactItems=actions)
    except ClientError as exc:
        if "ConditionalCheckFailed" in ddb.cancellation_codes(exc):
            return False
        ddb.raise_transient(exc)
        raise
    return True
