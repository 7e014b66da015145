"""Pull apps: workers announce themselves, long-poll tasks, post outcomes and heartbeats.

How an invocation of a pull app runs (docs/architecture.md, "Pull apps"):

1. The invoker takes the run's lease as for a push app, then `dispatch` shortens it to the
   pull lease (`EZGH_PULL_LEASE_SECONDS`, default 60), puts the invoke request (protocol §1.2,
   plus `taskId` and `leaseSeconds`) on the app's task queue, sends itself a delayed
   `task-watch` message, and returns without waiting. The lease stays held.
2. A worker's `POST /apps/{app}/tasks/poll` receives the task (deleting it from the queue) and
   runs it with the same replay driver as a push app. Step calls carry the invocation token;
   each reads the run and is refused once another epoch holds it (protocol §2.1).
3. While it runs, the worker extends the lease (`POST /v1/invocations/heartbeat`).
4. It posts the outcome to `POST /v1/invocations/outcome`; the engine applies it with
   `service.outcomes.apply` under the lease, exactly as the invoker does for a push app.
5. `task-watch` comes back when the lease would end. Outcome written: nothing to do. Lease
   extended: watch again later. Lease ended: the worker is gone; the invoker takes a new lease
   (epoch + 1, so the old worker's calls are refused) and a new task goes out.

`taskId` is an HMAC-signed token naming the run, the epoch, the reason (`seq`) the
invocation answers, its ID and start time, so the outcome can be applied without any lookup
beyond the run itself (`service.task_ids`).

A parallel step's task (a branch task) is held by its step's own lease instead of the run's:
`poll`, `heartbeat` and `post_outcome` hand it to `service.pull_branch`, and its `branch`
message, not `task-watch`, watches it.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb, messages, registry_store, runs_store, task_queues
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core import messages as wire
from ezgh_engine.core import task_claims, tokens, validation
from ezgh_engine.core.models import App, Principal, Run, RunError
from ezgh_engine.errors import (
    Conflict,
    Forbidden,
    NotFound,
    StaleInvocation,
    TransientError,
    Unauthorized,
    ValidationError,
)
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service import outcomes, pull_branch
from ezgh_engine.service.task_ids import (  # (named here for callers too)
    ENV_PULL_LEASE as ENV_PULL_LEASE,
)
from ezgh_engine.service.task_ids import (
    TOKEN_LIFETIME_MS,
    TaskClaims,
    pull_lease_seconds,
    verify_task_id,
)
from ezgh_engine.service.task_ids import mint_task_id as mint_task_id
from ezgh_engine.service.wire import invoke_request

log = logging.getLogger(__name__)

MAX_POLL_SECONDS = 20
UPDATE_ACTION = "workflows.apps.update"
WORKFLOW_NAME_MAX = 64
# Direct task-queue access (idle workers long-poll SQS, not a Lambda function): the role a worker's credentials are a session of. Its
# policy allows the consumer actions on this stack's task queues; each session's policy
# narrows them to one app's queue. Unset: the engine vends none (workers use `tasks/poll`).
ENV_TASK_WORKER_ROLE = "EZGH_TASK_WORKER_ROLE_ARN"
# Lambda's own credentials are a role session, so assuming another role is role chaining,
# which AWS caps at one hour.
ACCESS_SECONDS = 3600
# What a worker does with its queue: receive a task and delete it. Nothing else.
WORKER_QUEUE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage")


# --- the lease -------------------------------------------------------------------------------


# The run item's mark of the claim on its current task (`set_lease`'s `claim`): which
# task (`<epoch>/<seq>/`) and who claimed it. Short: the run item is written often.
# A claim names the key that polled its task (`core.task_claims`).
CLAIM_ATTR = "tc"
CLAIM_MAX = task_claims.CLAIM_MAX


def set_lease(
    run_id: str, epoch: int, until_ms: int, seq: int | None = None, claim: str | None = None
) -> None:
    """Set the lease's end for the invocation holding `epoch` (answering reason `seq`, when
    given: not yet answered); StaleInvocation otherwise. With `claim` (a worker's, or a
    poll's, own name for its receipt of the task) the same write claims the task: refused
    when another claim holds that task, so a task SQS delivered twice runs once; the same
    claim again (a retry whose answer was lost) holds."""
    condition = (
        "epoch = :epoch AND #status IN (:running, :cancelling) "
        "AND handledSeq < invokeSeq AND leaseUntil >= :now"
    )
    values = {
        ":now": {"N": str(clock.now_ms())},
        ":until": {"N": str(until_ms)},
        ":epoch": {"N": str(epoch)},
        ":running": {"S": "running"},
        ":cancelling": {"S": "cancelling"},
    }
    update = "SET leaseUntil = :until"
    if seq is not None:
        condition += " AND handledSeq < :seq"
        values[":seq"] = {"N": str(seq)}
    if claim is not None:
        task = f"{epoch}/{seq if seq is not None else ''}/"
        update += f", {CLAIM_ATTR} = :claim"
        condition += (
            f" AND (attribute_not_exists({CLAIM_ATTR}) OR NOT begins_with({CLAIM_ATTR}, :task)"
            f" OR {CLAIM_ATTR} = :claim)"
        )
        values[":task"] = {"S": task}
        values[":claim"] = {"S": task + claim}
    try:
        client("dynamodb").update_item(
            TableName=settings().runs_table,
            Key=items.run_key(run_id),
            UpdateExpression=update,
            # A lease that ran out stays ended: its worker's token works no more.
            ConditionExpression=condition,
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values,
        )
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise StaleInvocation(
                "the invocation's lease was taken over, or the run ended or was answered"
            ) from None
        ddb.raise_transient(exc)
        raise


def _send_watch(run_id: str, seq: int, epoch: int, delay_seconds: float) -> None:
    messages.send(wire.TaskWatch(run_id, seq, epoch), delay_seconds)


# --- the invoker's side ----------------------------------------------------------------------


def dispatch(app: App, run: Run, seq: int, invocation_id: str, started_at: str) -> RunError | None:
    """Queue the invocation of `run` (leased by the invoker) as a task of pull app `app`;
    the watch message takes over. A `RunError` to end the run with when its task cannot be
    sent (a 1.4 task past SQS's message size; a 1.5 task never is)."""
    lease_s = pull_lease_seconds()
    now_ms = clock.now_ms()
    try:
        set_lease(run.id, run.epoch, now_ms + lease_s * 1000)
    except StaleInvocation:
        return None
    request = invoke_request(
        run, invocation_id, TOKEN_LIFETIME_MS, now_ms, pull=True, app_protocol=app.protocol
    )
    claims = TaskClaims(run.id, run.epoch, seq, invocation_id, started_at)
    refused = pull_branch.queue_task(app.id, request, claims, lease_s)
    if refused is not None:
        return refused
    _send_watch(run.id, seq, run.epoch, lease_s + 1)
    log.debug("run %s: task queued for pull app %s (epoch %d)", run.id, app.name, run.epoch)
    return None


def watch(message: wire.TaskWatch) -> bool:
    """A lease's end came: True when the task must be delivered again (its worker is gone;
    the caller invokes the run as an invoke message would)."""
    run_id, seq = message.run_id, message.seq
    run = runs_store.get_run(run_id, with_steps=False)
    if run is None or run.ended or run.handled_seq >= seq:
        return False
    now_ms = clock.now_ms()
    if run.lease_until_ms > now_ms:
        # A live worker extended the lease (or a newer invocation holds it): look again then.
        _send_watch(run_id, seq, run.epoch, (run.lease_until_ms - now_ms) / 1000 + 1)
        return False
    log.info(
        "run %s: the lease of epoch %d ended without an outcome; delivering again",
        run_id,
        run.epoch,
    )
    return True


# --- the API's side --------------------------------------------------------------------------


def _pull_app(principal: Principal, app_ref: str) -> App:
    app = registry_store.get_app(principal.project_id, app_ref)
    if app is None:
        raise NotFound(f"app {app_ref} not found")
    if not principal.allows(UPDATE_ACTION, app.name):
        raise Forbidden(f"this API key lacks {UPDATE_ACTION!r} on {app.name!r}")
    if app.kind != "pull":
        raise Conflict(f"app {app.name} is a push app; only pull apps have workers and tasks")
    return app


def announce(
    principal: Principal,
    app_ref: str,
    *,
    worker_id: str,
    workflows: list[str],
    protocol: str | None = None,
) -> App:
    """A worker says which workflows it runs: they join the app's, which becomes `synced`
    (at most `MAX_APP_WORKFLOWS` in all: 400 naming `workflows` before anything is
    written). `protocol`: the newest version the worker speaks, which the app's tasks are
    then written in (a worker before 1.5 says none: it leaves what the app had)."""
    app = _pull_app(principal, app_ref)
    validation.check_app_workflows(workflows)
    merged = list(dict.fromkeys([*app.workflows, *workflows]))
    validation.check_app_workflows(merged)
    task_queues.ensure_queue(app.id)
    said = protocol if protocol is not None else app.protocol
    # The app's code acts for the key of its last worker to announce (`App.key_id`).
    same_key = app.key_id == principal.key_id
    if (
        app.status == "synced"
        and merged == list(app.workflows)
        and said == app.protocol
        and same_key
    ):
        return app
    log.info("pull app %s: worker %s announced %s", app.name, worker_id, workflows)
    return registry_store.update_app_after_sync(app, merged, protocol, key_id=principal.key_id)


def poll(principal: Principal, app_ref: str, wait_seconds: int = MAX_POLL_SECONDS) -> Any:
    """The next task of the app, waiting up to `wait_seconds` (≤ 20); None when none came."""
    app = _pull_app(principal, app_ref)
    wait_seconds = max(0, min(wait_seconds, MAX_POLL_SECONDS))
    deadline = clock.monotonic() + wait_seconds
    while True:
        remaining = max(0, math.ceil(deadline - clock.monotonic()))
        for body, receipt in task_queues.receive_task(app.id, remaining):
            task_queues.delete_task(app.id, receipt)
            task = _live_task(body, principal.key_id)
            if task is not None:
                return task
        if clock.monotonic() >= deadline:
            return None


def session_policy(queue_arn: str) -> str:
    """The session policy of a worker's credentials: its app's queue, receive and delete."""
    statement = {"Effect": "Allow", "Action": list(WORKER_QUEUE_ACTIONS), "Resource": queue_arn}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]}, separators=(",", ":"))


def queue_access(principal: Principal, app_ref: str) -> dict[str, Any]:
    """Short-lived credentials that can only receive and delete the app's tasks, and where.

    The SDK's workers long-poll their task queue with them directly (one billed SQS request
    per 20 s while idle) instead of waiting inside the api function on `tasks/poll` (≈ 20 s
    of a Lambda per poll). A task received this way is claimed with a heartbeat before it
    runs, so a superseded or answered task is dropped as `poll` drops it.
    """
    app = _pull_app(principal, app_ref)
    role_arn = os.environ.get(ENV_TASK_WORKER_ROLE, "")
    if not role_arn:
        raise Conflict(
            "this engine vends no task-queue credentials; poll POST .../tasks/poll instead"
        )
    url = task_queues.ensure_queue(app.id)
    sqs = client("sqs")
    partition = role_arn.split(":")[1] if role_arn.count(":") >= 5 else "aws"
    try:
        answer = client("sts").assume_role(
            RoleArn=role_arn,
            RoleSessionName=f"ezgh-tasks-{app.id}"[:64],
            DurationSeconds=ACCESS_SECONDS,
            Policy=session_policy(task_queues.queue_arn(url, sqs.meta.region_name, partition)),
        )
    except ClientError as exc:
        # Throttled or briefly unavailable: the worker asks again (or polls the API).
        raise TransientError(f"STS refused the worker's credentials for now: {exc}") from None
    creds = answer["Credentials"]
    return {
        "queueUrl": url,
        "endpointUrl": sqs.meta.endpoint_url,
        "region": sqs.meta.region_name,
        "waitSeconds": MAX_POLL_SECONDS,
        # The SDK counts this down on its own clock (no skew with STS's `expiresAt`).
        "expiresInSeconds": ACCESS_SECONDS,
        "credentials": {
            "accessKeyId": creds["AccessKeyId"],
            "secretAccessKey": creds["SecretAccessKey"],
            "sessionToken": creds["SessionToken"],
            "expiresAt": clock.iso(creds["Expiration"]),
        },
    }


def delete_task_queue(app_id: str) -> None:
    """Best effort: a queue left behind only costs its name."""
    try:
        task_queues.delete_queue(app_id)
    except Exception as exc:
        log.warning("could not delete the task queue of app %s: %s", app_id, exc)


def _live_task(body: str, key_id: str) -> dict[str, Any] | None:
    """The task, claimed for `key_id` (the key that polled it: its code acts for that key),
    unless its invocation was superseded or answered meanwhile."""
    try:
        task = json.loads(body)
        claims = verify_task_id(task.get("taskId"))
    except Exception:
        log.warning("dropping a malformed task: %r", body[:200])
        return None
    if not isinstance(task, dict):
        return None
    if claims.step_id is not None:  # a branch task: claimed on its step
        return task if pull_branch.claim(claims, key_id) else None
    run = runs_store.get_run(claims.run_id, with_steps=False)
    if (
        run is None
        or run.ended
        or run.epoch != claims.epoch
        or run.handled_seq >= claims.seq
        or run.lease_until_ms <= clock.now_ms()
    ):
        return None
    try:
        # The lease runs from the worker's receipt, not from the dispatch: a task that
        # waited in the queue still gives its worker a whole lease before its first
        # heartbeat (an ended lease is not revived: its token works no more).
        # Claimed too: a copy of this task SQS delivered again is not handed out twice.
        until_ms = clock.now_ms() + pull_lease_seconds() * 1000
        claim = task_claims.poll_claim(key_id, ids.time_ordered_id())
        set_lease(claims.run_id, claims.epoch, until_ms, seq=claims.seq, claim=claim)
    except StaleInvocation:
        return None
    return task


def _claims(token: str, body: Any) -> tuple[tokens.InvocationClaims, TaskClaims]:
    claims = tokens.verify(settings().token_secret, token, clock.now_ms())
    if not isinstance(body, dict):
        raise ValidationError("body must be a JSON object")
    task = verify_task_id(body.get("taskId"))
    # A branch task's token and ID name the same step (and its branch epoch); a main
    # task's name none.
    if (task.run_id, task.epoch, task.step_id) != (claims.run_id, claims.epoch, claims.step_id):
        raise Unauthorized("the taskId does not belong to this invocation token")
    return claims, task


def heartbeat(token: str, body: Any) -> dict[str, Any]:
    """Extend the invocation's lease by the pull lease; 409 when it was lost.

    A worker that received its task from the queue directly claims it with a first heartbeat
    (what `poll` does for the tasks it hands out): 200 while the task's invocation still holds
    a live lease on an unanswered reason, 409 for a superseded, answered or expired task."""
    claims, task = _claims(token, body)
    claim = body.get("claim")
    if claim is not None:
        refused = (
            task_claims.check_worker_claim(claim)
            if isinstance(claim, str)
            else f"claim: a string of 1 to {CLAIM_MAX} ASCII characters"
        )
        if refused is not None:
            raise ValidationError(refused)
    lease_s = pull_lease_seconds()
    if task.step_id is not None:  # a branch task's lease is its step's
        until = pull_branch.heartbeat(task, claim)
    else:
        until = clock.now_ms() + lease_s * 1000
        set_lease(claims.run_id, claims.epoch, until, seq=task.seq, claim=claim)
    from datetime import UTC, datetime

    return {
        "leaseSeconds": lease_s,
        "leaseExpiresAt": clock.iso(datetime.fromtimestamp(until / 1000, tz=UTC)),
    }


def post_outcome(token: str, body: Any) -> dict[str, Any]:
    """Apply a worker's outcome under the invocation's lease (as the invoker does for push)."""
    claims, task = _claims(token, body)
    if task.step_id is not None:  # a branch task: its step's answer, never the run's
        pull_branch.post_outcome(task, claims.attempt, body)
        return {"result": "ok"}
    run = runs_store.get_run(claims.run_id)
    if run is None:
        raise NotFound(f"run {claims.run_id} not found")
    if run.ended or run.epoch != claims.epoch or run.handled_seq >= task.seq:
        raise StaleInvocation("the invocation's lease was taken over or the run ended")
    if run.lease_until_ms < clock.now_ms():
        # Its worker stopped heartbeating: the task goes to another worker (`watch`).
        raise StaleInvocation("the invocation's lease ended")
    try:
        outcome = outcome_rules.parse(body, clock.now())
    except outcome_rules.MalformedOutcome as exc:
        raise ValidationError(f"outcome: {exc}") from None
    run = replace(run, epoch=claims.epoch)
    try:
        outcomes.apply_answer(
            run,
            task.seq,
            outcome,
            body.get("ops"),
            claims=claims,
            invocation_id=task.invocation_id,
            started_at=task.started_at,
        )
    except outcomes.OpsConflict as exc:
        # Not applied: the task is delivered again when its lease ends (`watch`).
        raise StaleInvocation(f"the outcome was not applied: {exc}") from None
    return {"result": "ok"}
