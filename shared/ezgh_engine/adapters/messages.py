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

Starts can go in groups (`gathering`): the stream gathers the starts one batch of records
asks for and hands them over as one asynchronous event (`wire.Group`, at most
`wire.GROUP_MAX_MESSAGES`), which one invoker environment answers at once. A batch that asks
for one start sends exactly what a lone start sends.

A throttle never holds the caller (the stream's shard) longer than the client's retries:
an asynchronous invoke still throttled goes to the queue instead (the same message, the same
consumer); a schedule that cannot be made goes to the queue delayed as long as SQS allows and
comes back early, to be scheduled again then (`resend_timer`); a schedule that cannot be
deleted is left to fire, find nothing to do, and delete itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core import messages as wire
from ezgh_engine.errors import TransientError

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


def send_each(messages: Sequence[wire.Message], delay_seconds: float = 0) -> None:
    """Put each of `messages` on the invocations queue, as many to a request as SQS takes
    (`SendMessageBatch`); a `TransientError` if SQS refused any (those sent stay sent:
    every message is idempotent)."""
    delay = max(0, min(math.ceil(delay_seconds), 900))
    for first in range(0, len(messages), wire.GROUP_MAX_MESSAGES):
        chunk = messages[first : first + wire.GROUP_MAX_MESSAGES]
        answer = client("sqs").send_message_batch(
            QueueUrl=settings().invocations_queue_url,
            Entries=[
                {"Id": str(i), "MessageBody": wire.dumps(m), "DelaySeconds": delay}
                for i, m in enumerate(chunk)
            ],
        )
        if answer.get("Failed"):
            codes = sorted({str(f.get("Code")) for f in answer["Failed"]})
            raise TransientError(f"SQS refused {len(answer['Failed'])} message(s): {codes}")


def start(message: wire.Message) -> None:
    """Hand `message` to the invoker now: an asynchronous invoke of the invoker function (one
    request, where SQS bills three: send, receive, delete), or the queue where this function
    has no grant for it. Lambda answers 202 once the event is in its queue: durable from
    here, retried on error, and in the invocations queue if it never succeeds.

    While a caller is `gathering`, the message joins its outbox instead (sent with the
    others, at the latest when the gathering ends)."""
    outbox = _outbox.get()
    if outbox is not None:
        outbox.add(message)
        return
    start_all([message])


def start_all(messages: Sequence[wire.Message]) -> None:
    """`start` every one of `messages` (at most `wire.GROUP_MAX_MESSAGES`) in one request: a
    lone message as itself, several as a `wire.Group` event (or `send_each` where this
    function may not invoke the invoker, or the invoke stays throttled)."""
    if not messages:
        return
    arn = settings().invoker_function_arn
    if not arn:
        _send_now(messages)
        return
    body = wire.dumps(messages[0]) if len(messages) == 1 else wire.dumps_group(messages)
    try:
        client("lambda").invoke(FunctionName=arn, InvocationType="Event", Payload=body.encode())
    except ClientError as exc:
        if not aws.is_throttle(exc):
            raise
        kinds = ",".join(sorted({m.TYPE for m in messages}))
        log.warning("invoke throttled (%s): %s goes through the queue", _code(exc), kinds)
        _send_now(messages)


def _send_now(messages: Sequence[wire.Message]) -> None:
    if len(messages) == 1:
        send(messages[0])  # one message: as a lone start always went
    else:
        send_each(messages)


class Outbox:
    """The starts gathered while a caller handles a batch (`gathering`), sent in groups of
    `wire.GROUP_MAX_MESSAGES` (and `wire.GROUP_MAX_BYTES`) as they fill, the rest by
    `flush`. Each start is tagged with the `mark` current when it was added (the stream:
    its record's sequence number), so a group that could not be sent names the earliest
    record to handle again (`unsent`); nothing is sent after that."""

    def __init__(self) -> None:
        self._pending: list[tuple[wire.Message, object]] = []
        self._bytes = 0
        self._seen: set[wire.Message] = set()
        self._mark: object = None
        self.unsent: object = None  # the mark of the first start not sent, once one fails
        self.groups = 0  # requests made (tests)

    def mark(self, tag: object) -> None:
        """Tag the starts added from now on with `tag`."""
        self._mark = tag

    def add(self, message: wire.Message) -> None:
        """Gather `message` (once: a duplicate record asks for it again)."""
        if message in self._seen or self.unsent is not None:
            return
        size = len(wire.dumps(message)) + 1
        if self._pending and self._bytes + size > wire.GROUP_MAX_BYTES - 64:
            self._send()
        self._seen.add(message)
        self._pending.append((message, self._mark))
        self._bytes += size
        if len(self._pending) >= wire.GROUP_MAX_MESSAGES:
            self._send()

    def flush(self) -> object:
        """Send what is gathered; answer the mark of the first start that could not be sent
        (None: every one was)."""
        if self._pending:
            self._send()
        return self.unsent

    def _send(self) -> None:
        pending, self._pending, self._bytes = self._pending, [], 0
        if self.unsent is not None:
            return
        try:
            start_all([message for message, _ in pending])
            self.groups += 1
        except Exception:
            log.exception("could not start %d message(s); their records come again", len(pending))
            self.unsent = pending[0][1]


_outbox: ContextVar[Outbox | None] = ContextVar("ezgh_outbox", default=None)


@contextlib.contextmanager
def gathering() -> Iterator[Outbox]:
    """Gather every `start` made in this context into an `Outbox`; the caller flushes it
    (what it has not flushed when the context ends is sent then)."""
    outbox = Outbox()
    token = _outbox.set(outbox)
    try:
        yield outbox
    finally:
        _outbox.reset(token)
        outbox.flush()


def send_invocation(run_id: str, seq: int, delay_seconds: int = 0) -> None:
    """Ask the invoker to answer reason `seq` of the run (after `delay_seconds`, <= 900)."""
    message = wire.Invoke(run_id, seq)
    if delay_seconds <= 0:
        start(message)
    else:
        send(message, delay_seconds)


def send_branch(
    run_id: str,
    step_id: str,
    *,
    attempt: int | None = None,
    values: Mapping[str, Any] | None = None,
) -> None:
    """Ask the invoker to run one parallel step of the run in an invocation of its own;
    with the run `attempt` that launched it and its launch `values`, the message creates
    the step's item when it claims it (`wire.Branch`)."""
    pairs = tuple(sorted((values or {}).items()))
    start(wire.Branch(run_id, step_id, attempt, pairs))


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
