"""Branch tasks: a pull app's parallel steps, each run by a worker as a task of its own.

A push app's parallel step runs in a branch invocation the invoker makes and waits for
(`service.branches`). A pull app has no URL: its branch invocation is a task on its queue,
held by the step's own lease (`branchEpoch`, `branchLeaseUntil`) as a main task is held by
the run's (`service.pull`):

1. The `branch` message takes the step's branch lease (epoch + 1; the launch's message
   creates the step's item in that write, `service.branches`), shortens it to the pull
   lease (and gives back the attempt the take started: the worker's `start` counts it, as
   before), queues the task (the branch invoke request, built as for a push, plus `taskId`,
   whose signed claims name the step and its branch epoch, and `leaseSeconds`) and comes
   back when the lease would end: the message is the task's watch.
2. `tasks/poll` (or a worker's first heartbeat, for a task it received from the queue
   directly) claims the task on its step: a task SQS delivered twice runs once, and one
   whose lease ended, or that was answered, is dropped.
3. The worker's heartbeats extend the step's branch lease (never the run's); its step calls
   carry the branch token, allowed only this step's ops while its epoch holds the step.
4. Its posted outcome is applied as a push app's branch answer is (`service.branch_answers`),
   once: the write that marks the task answered is refused for a stale or repeated one.
5. The message comes back when the lease would end. The step ended: dropped. A heartbeat
   extended the lease: it comes back then. The lease ended unanswered: it takes the lease
   again (epoch + 1: the old worker's calls are refused) and a new task goes out. A task a
   worker claimed and never answered counts as a failed delivery; after the invoker's
   attempts the step fails `workflows.app_unreachable`. A task no worker took yet counts
   nothing (a pull app's tasks wait for its workers, as its main tasks do).

Authority: a branch invocation runs its one `run` step and nothing else (its token allows
only that step's start, complete and fail), so it starts no other app's workflow and acts
for no key. Its claim still names the key that polled it (`core.task_claims`), on the step,
never on the run: the run's main task keeps acting for the key that polled it.
"""

from __future__ import annotations

import logging
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import steps_store, task_queues
from ezgh_engine.config import settings
from ezgh_engine.core import task_claims
from ezgh_engine.core.messages import Retry
from ezgh_engine.core.models import LIVE_STATUSES, App, Run, RunError
from ezgh_engine.core.protocol_rules import THROTTLED_OUTCOME
from ezgh_engine.core.run_errors import request_too_large
from ezgh_engine.core.sizes import SQS_MESSAGE_BYTES, json_text
from ezgh_engine.errors import StaleInvocation, ValidationError
from ezgh_engine.protocol import outcomes as outcome_rules
from ezgh_engine.service import branch_answers as answers
from ezgh_engine.service.task_ids import (
    TOKEN_LIFETIME_MS,
    TaskClaims,
    mint_task_id,
    pull_lease_seconds,
)
from ezgh_engine.service.wire import invoke_request

log = logging.getLogger(__name__)

STALE = "the branch task's lease was taken over or ended, its step ended, or it was answered"


def queue_task(
    app_id: str, request: dict[str, Any], claims: TaskClaims, lease_seconds: int
) -> RunError | None:
    """Put the invoke `request` on app `app_id`'s task queue as the task of `claims`; the
    error to end its run (or step) with when it cannot go (a 1.4 task past SQS's message
    size; a 1.5 task never is)."""
    task = {**request, "taskId": mint_task_id(claims), "leaseSeconds": lease_seconds}
    size = len(json_text(task).encode())
    if size > SQS_MESSAGE_BYTES:  # only a task in the 1.4 shape can be (1.5: `bounds`)
        return request_too_large(size, "a pull task (one SQS message: 256 KiB)")
    task_queues.send_task(app_id, task)
    return None


def _claimed_unanswered(step: dict[str, Any], epoch: int) -> bool:
    """Whether the task of branch epoch `epoch` was claimed by a worker and never answered
    (the worker died, or lost its task: its lease ran out)."""
    claim = step.get(steps_store.BRANCH_CLAIM_ATTR)
    answered = step.get(steps_store.BRANCH_ANSWERED_ATTR)
    return (
        isinstance(claim, str)
        and claim.startswith(f"{epoch}/")
        and (answered is None or int(answered) != epoch)
    )


def _gave_up(run_id: str, step_id: str, epoch: int, failures: int) -> None:
    error = RunError(
        "workflows.app_unreachable",
        "AppUnreachable",
        f"the app's workers took the task of step {step_id} {failures} times and stopped "
        "heartbeating each time without answering",
    )
    answers.end_step(run_id, step_id, epoch, "failed", error)


def dispatch(app: App, run: Run, step: dict[str, Any], invocation_id: str) -> Retry | None:
    """Queue the branch task of `step` (its item as the `branch` message's lease took it);
    the `Retry` brings the message back when the task's lease would end."""
    run_id, step_id = run.id, str(step["stepId"])
    epoch, failures = int(step.get("branchEpoch", 0)), int(step.get("branchFailures", 0))
    if _claimed_unanswered(step, epoch - 1):
        failures += 1
        log.info("run %s: branch task of %s ended unanswered (%d)", run_id, step_id, failures)
        if failures >= settings().invoke_max_attempts:
            _gave_up(run_id, step_id, epoch, failures)
            return None
    lease_s = pull_lease_seconds()
    now_ms = clock.now_ms()
    # The pull lease from now (a worker's receipt renews it), and the failures so far. A
    # worker starts the step itself (its `start`): the attempt the lease take started goes
    # back, so a task no worker takes uses up none of the step's retries.
    until_ms = now_ms + lease_s * 1000
    if not steps_store.give_back_start(
        run_id, step_id, epoch=epoch, until_ms=until_ms, failures=failures
    ):
        return None  # ended meanwhile (its run's end cancelled it): no task
    request = invoke_request(
        run,
        invocation_id,
        TOKEN_LIFETIME_MS,
        now_ms,
        app_protocol=app.protocol,
        branch_step=step_id,
        branch_epoch=epoch,
        pull=True,
    )
    started_at = clock.iso(clock.now())
    attempt = int(step.get("attempt", 1)) - 1  # before the lease take's start
    claims = TaskClaims(run_id, epoch, 0, invocation_id, started_at, step_id, attempt)
    refused = queue_task(app.id, request, claims, lease_s)
    if refused is not None:
        answers.end_step(run_id, step_id, epoch, "failed", refused)
        return None
    log.debug("run %s: branch task of %s queued (epoch %d)", run_id, step_id, epoch)
    return Retry(after_seconds=lease_s + 1)


def claim(task: TaskClaims, key_id: str) -> bool:
    """`tasks/poll`'s check of a branch task it received: claimed for `key_id` (for a
    whole lease from now) unless its run ended or the task is stale."""
    state = steps_store.run_state(task.run_id)
    if state is None or state[0] not in LIVE_STATUSES:
        return False
    now_ms = clock.now_ms()
    return steps_store.hold_branch_task(
        task.run_id,
        task.step_id or "",
        epoch=task.epoch,
        until_ms=now_ms + pull_lease_seconds() * 1000,
        now_ms=now_ms,
        claim=task_claims.poll_claim(key_id, ids.time_ordered_id()),
    )


def heartbeat(task: TaskClaims, claim_name: str | None) -> int:
    """Extend the branch task's lease by the pull lease (with `claim_name`, claim it: a
    worker that received it from the queue directly); its new end (ms), or
    `StaleInvocation`."""
    now_ms = clock.now_ms()
    until_ms = now_ms + pull_lease_seconds() * 1000
    held = steps_store.hold_branch_task(
        task.run_id,
        task.step_id or "",
        epoch=task.epoch,
        until_ms=until_ms,
        now_ms=now_ms,
        claim=claim_name,
    )
    if not held:
        raise StaleInvocation(STALE)
    return until_ms


def post_outcome(task: TaskClaims, run_attempt: int, body: dict[str, Any]) -> None:
    """Apply a worker's outcome of a branch task, once, as a push app's branch answer is;
    `StaleInvocation` for a stale or repeated one."""
    try:
        outcome = outcome_rules.parse(body, clock.now())
    except outcome_rules.MalformedOutcome as exc:
        raise ValidationError(f"outcome: {exc}") from None
    run_id, step_id, epoch = task.run_id, task.step_id or "", task.epoch
    # Marked answered first: a second post is refused; an API that dies after this leaves
    # the lease to end, and the `branch` message delivers the task again (an answered task
    # counts no failure).
    if not steps_store.answer_branch_task(run_id, step_id, epoch=epoch, now_ms=clock.now_ms()):
        raise StaleInvocation(STALE)
    answers.record_invocation(
        run_id, run_attempt, step_id, task.invocation_id, task.started_at, outcome
    )
    if outcome.kind in ("aborted", THROTTLED_OUTCOME):
        # Its step call was refused as stale, or stayed throttled: released, the `branch`
        # message runs it again.
        answers.aborted(run_id, step_id, epoch, 0)
        return
    answers.settle(run_id, step_id, epoch, task.attempt)
