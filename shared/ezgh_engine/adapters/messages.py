"""Messages to the invoker: at once, later through the invocations queue, or by a timer.

A message for now (a run's start, a branch, a timer already due) is an asynchronous invoke of
the invoker function (`start`: `InvocationType=Event`, the message as the event) where this
function may make one (`settings().invoker_function_arn`), else an SQS message. Lambda's
event queue retries a failed invocation twice and puts what it gives up on in the invocations
queue (topology `AsyncInvoke`), so nothing is lost that the queue would have kept.

What needs a delay stays on the queue: waits up to `sqs_max_delay_seconds` (15 minutes on
AWS) are an SQS `DelaySeconds`; longer ones are a one-time EventBridge Scheduler `at(...)`
schedule whose target is the invoker function (or, where its ARN is not known, the queue). A
timer that arrives early is sent again with the time left (see `service.timers`). Bodies are
`core.messages`' typed messages, dumped there.

A throttle never holds the caller (the stream's shard) longer than the client's retries:
an asynchronous invoke still throttled goes to the queue instead (the same message, the same
consumer); a schedule that cannot be made goes to the queue delayed as long as SQS allows and
comes back early, to be scheduled again then (`resend_timer`); a schedule that cannot be
deleted is left to fire, find nothing to do, and delete itself.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import UTC, datetime, timedelta

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core import messages as wire

log = logging.getLogger(__name__)

# Scheduler fires within a minute of the time; ask it a little early and let an SQS delay
# carry the rest, so a long sleep ends on time to about a second.
SCHEDULER_LEAD = timedelta(minutes=2)


def send(message: wire.Message, delay_seconds: float = 0) -> None:
    """Put `message` on the invocations queue (after `delay_seconds`, rounded up, <= 900)."""
    client("sqs").send_message(
        QueueUrl=settings().invocations_queue_url,
        MessageBody=wire.dumps(message),
        DelaySeconds=max(0, min(math.ceil(delay_seconds), 900)),
    )


def start(message: wire.Message) -> None:
    """Hand `message` to the invoker now: an asynchronous invoke of the invoker function (one
    request, where SQS bills three: send, receive, delete), or the queue where this function
    has no grant for it. Lambda answers 202 once the event is in its queue: durable from
    here, retried on error, and in the invocations queue if it never succeeds."""
    arn = settings().invoker_function_arn
    if not arn:
        send(message)
        return
    try:
        client("lambda").invoke(
            FunctionName=arn, InvocationType="Event", Payload=wire.dumps(message).encode()
        )
    except ClientError as exc:
        if not aws.is_throttle(exc):
            raise
        log.warning("invoke throttled (%s): %s goes through the queue", _code(exc), message.TYPE)
        send(message)


def send_invocation(run_id: str, seq: int, delay_seconds: int = 0) -> None:
    """Ask the invoker to answer reason `seq` of the run (after `delay_seconds`, <= 900)."""
    message = wire.Invoke(run_id, seq)
    if delay_seconds <= 0:
        start(message)
    else:
        send(message, delay_seconds)


def send_branch(run_id: str, step_id: str) -> None:
    """Ask the invoker to run one parallel step of the run in an invocation of its own."""
    start(wire.Branch(run_id, step_id))


def schedule_timer(run_id: str, step_id: str, wake_at: datetime) -> None:
    """Deliver a timer message for the step at `wake_at` (idempotent per run and step)."""
    timer = wire.Timer(run_id, step_id, clock.iso(wake_at))
    delay = (wake_at - clock.now()).total_seconds()
    if delay <= 0:
        start(timer)
        return
    if delay <= settings().sqs_max_delay_seconds:
        send(timer, delay)
        return
    # Named by the wake time too: a step may wait more than once (one timer per retry).
    _create_schedule(timer, wake_at - SCHEDULER_LEAD, run_id, f"{step_id}@{timer.wake_at}")


def timer_schedule_names(run_id: str, step_id: str, wake_at: str) -> list[str]:
    """The Scheduler schedule names a long timer for this step and wake time may have: the
    first one, and the one an early arrival made (`resend_timer`)."""
    first = f"{step_id}@{wake_at}"
    return [_schedule_name(run_id, first), _schedule_name(run_id, f"{first}+")]


def drop_timer(run_id: str, step_id: str, wake_at: str) -> None:
    """Delete the schedule `schedule_timer` made for (run, step, wake time), if any: a timer
    nothing needs any more (its run ended) neither fires nor counts against the Scheduler's
    schedule quota. One sent by SQS (short) cannot be taken back; it finds nothing to do."""
    try:
        client("scheduler").delete_schedule(
            Name=_schedule_name(run_id, f"{step_id}@{wake_at}"),
            GroupName=settings().scheduler_group,
        )
    except ClientError as exc:
        if aws.is_throttle(exc):  # it fires, finds its run ended, and deletes itself
            log.warning("schedule of %s %s kept: delete throttled", run_id, step_id)
            return
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise


def _schedule_name(run_id: str, step_id: str) -> str:
    return "t-" + hashlib.sha256(f"{run_id}:{step_id}".encode()).hexdigest()[:60]


def _create_schedule(timer: wire.Timer, fire_at: datetime, run_id: str, step_id: str) -> None:
    cfg = settings()
    at = fire_at.astimezone(UTC).replace(microsecond=0, tzinfo=None).isoformat()
    try:
        client("scheduler").create_schedule(
            Name=_schedule_name(run_id, step_id),
            GroupName=cfg.scheduler_group,
            ScheduleExpression=f"at({at})",
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            ActionAfterCompletion="DELETE",
            Target=scheduler_target(timer),
        )
    except ClientError as exc:
        if aws.is_throttle(exc):
            # Round the throttle through the queue: the timer arrives early and is scheduled
            # again from there (`resend_timer`), or fires on time if it is near by then.
            hop = settings().sqs_max_delay_seconds
            log.warning("schedule of %s throttled: the timer waits %s s in the queue", run_id, hop)
            send(timer, hop)
            return
        # The same run and step always make the same name: a second request is a duplicate.
        if exc.response.get("Error", {}).get("Code") != "ConflictException":
            raise


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# Scheduler's most patient retry policy (its default; a Lambda target is an asynchronous
# invoke, refused only when throttled): once accepted, the invoker's own retries apply.
SCHEDULER_RETRY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}


def scheduler_target(message: wire.Message) -> dict[str, object]:
    """A schedule's target for `message`: the invoker function (Scheduler invokes it
    asynchronously with the message as its event: no SQS request), or the invocations queue
    where this function does not know the invoker's ARN."""
    cfg = settings()
    return {
        "Arn": cfg.invoker_function_arn or cfg.invocations_queue_arn,
        "RoleArn": cfg.scheduler_role_arn,
        "Input": wire.dumps(message),
        "RetryPolicy": dict(SCHEDULER_RETRY),
    }


def resend_timer(timer: wire.Timer, wake_at: datetime) -> None:
    """A timer that arrived early goes round again with the time left."""
    delay = (wake_at - clock.now()).total_seconds()
    if delay > settings().sqs_max_delay_seconds:
        # Early once already: this time at the wake time itself, so it can't come early again
        # (the same lead would fire it at once and its name would then be taken).
        name = f"{timer.step_id}@{timer.wake_at}+"
        _create_schedule(timer, wake_at, timer.run_id, name)
    else:
        send(timer, max(delay, 0))


def hold_message(receipt_handle: str, seconds: float) -> None:
    """Make a received invocation message visible again only after `seconds`."""
    client("sqs").change_message_visibility(
        QueueUrl=settings().invocations_queue_url,
        ReceiptHandle=receipt_handle,
        VisibilityTimeout=max(1, min(math.ceil(seconds), 43_200)),
    )
