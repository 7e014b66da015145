"""The invoker's consumer: one message, parsed once, to the handler of its class.

Messages come two ways: in SQS records from the invocations queue (delayed
messages, held ones, what Lambda's event queue gave up on), or as the event of an
asynchronous invocation (the stream's starts, Scheduler's timers: `adapters.messages.start`).

Which module answers which message (`core.messages` defines them):

- `Invoke` → `invoker.invoke`: lease the run, call its app, write the outcome.
- `Timer` → `invoker.on_timer`: `timers.fire_timer`, then invoke a run the timer woke.
- `Branch` → `branches.invoke_branch`: one parallel step in an invocation of its own.
- `Cron` → `schedules.fire`: start a schedule's run.
- `TaskWatch` → `pull.watch`: a pull app's task lease ended; invoke again if its worker died.
- `YearLimitSweep` → `year_limits.sweep`: end the runs past their one-year limit (hourly).

A handler answers a `Retry` to leave its message in the queue for later: its visibility is set
to then and it is reported as a batch item failure. A handler that raises leaves its message in
the queue until the visibility timeout (and the dead-letter queue after `max_receive_count`). A
body that is none of ours is dropped with an error log (see `core.messages`).

An asynchronous event may hold a group of messages (`wire.Group`: the starts one batch of
stream records asked for). Its messages are answered at once, each on a thread of its own
(`service.at_once`), and each on its own: one that answers a `Retry`, or raises, goes to the
queue by itself (a raise after `FAILED_RETRY_SECONDS`, as Lambda's first retry would wait),
never failing or repeating its neighbours. Only a message that could not even be put on the
queue fails the event, which Lambda then delivers again whole; the neighbours already
answered find their reason handled or their run leased, as any duplicate does, and an
invoker that dies mid-group is retried the same way. A group that reaches the queue
(Lambda's on-failure record of one) is split there into single messages, so no environment
makes more than `wire.GROUP_MAX_MESSAGES` pushes at once; an SQS batch (as many) is handled
at once too, with a partial batch answer.

An asynchronous event has no message to hold: its `Retry` is the same message sent to the
queue with the delay (as a timer's invocation that must come back is, `invoker`), and a
handler that raises fails the invocation, which Lambda retries (twice, a minute then two
apart) and then puts in the invocations queue as an invocation record, whose
`requestPayload` is read here as the message. A duplicate event is answered as a duplicate
message is: the lease or the handled reason refuses it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from ezgh_engine.adapters import messages as queue
from ezgh_engine.core import messages as wire
from ezgh_engine.core.messages import Retry
from ezgh_engine.observability import logs
from ezgh_engine.service import at_once, branches, invoker, pull, schedules, year_limits
from ezgh_engine.service.sqs_batch import Redeliver, process_at_once

log = logging.getLogger(__name__)


def _on_cron(message: wire.Cron) -> None:
    schedules.fire(message)


def _on_task_watch(message: wire.TaskWatch) -> Retry | None:
    return invoker.invoke(message.run_id, message.seq) if pull.watch(message) else None


def _on_branch(message: wire.Branch) -> Retry | None:
    if message.creates:
        return branches.invoke_branch(
            message.run_id, message.step_id, attempt=message.attempt, values=dict(message.values)
        )
    return branches.invoke_branch(message.run_id, message.step_id)


def _on_invoke(message: wire.Invoke) -> Retry | None:
    return invoker.invoke(message.run_id, message.seq)


def _on_year_limit_sweep(message: wire.YearLimitSweep) -> None:
    year_limits.sweep()


HANDLERS: dict[type[Any], Callable[[Any], Retry | None]] = {
    wire.Invoke: _on_invoke,
    wire.Timer: invoker.on_timer,
    wire.Branch: _on_branch,
    wire.Cron: _on_cron,
    wire.TaskWatch: _on_task_watch,
    wire.YearLimitSweep: _on_year_limit_sweep,
}


def _handle(message: wire.Message) -> Retry | None:
    """Answer one message by its class's handler, its log lines carrying its run's ID."""
    with logs.bound(run_id=getattr(message, "run_id", None)):
        return HANDLERS[type(message)](message)


# A message of a group that raised comes back through the queue after this (Lambda's own
# wait before its first retry of a failed event).
FAILED_RETRY_SECONDS = 60


def _load(decoded: Any) -> wire.Message | wire.Group:
    """The message (or group) of a decoded body or event: ours, or the `requestPayload` of
    the invocation record Lambda's event queue sends to the on-failure queue."""
    if isinstance(decoded, dict) and "requestPayload" in decoded and "requestContext" in decoded:
        decoded = decoded["requestPayload"]
    loaded = wire.load_event(decoded)
    if isinstance(loaded, wire.Group):
        for why in loaded.malformed:
            log.error("dropping a group's message that is none of ours (%s)", why)
    return loaded


def _parse(body: str) -> wire.Message | wire.Group:
    try:
        decoded = json.loads(body)
    except ValueError:
        raise wire.MalformedMessage("the body is not JSON") from None
    return _load(decoded)


def handle_message(body: str) -> Retry | None:
    """Handle one queue message; a `Retry` means: leave it in the queue for later."""
    try:
        message = _parse(body)
    except wire.MalformedMessage as exc:
        log.error("dropping a message that is none of ours (%s): %r", exc, body[:200])
        return None
    if isinstance(message, wire.Group):  # Lambda gave up on a group: each goes on its own
        queue.send_each(message.messages)
        return None
    return _handle(message)


def handle_event(event: Any) -> None:
    """Handle one asynchronous invocation's event (a message). Raises to fail the
    invocation (Lambda retries it); a `Retry` goes to the queue, delayed."""
    try:
        message = _load(event)
    except wire.MalformedMessage as exc:
        log.error("dropping an event that is none of ours (%s): %r", exc, str(event)[:200])
        return
    if isinstance(message, wire.Group):
        handle_group(message)
        return
    try:
        retry = _handle(message)
    except Exception:
        log.exception("invocation event failed; Lambda will invoke it again")
        raise
    if retry is not None:
        log.info("%s held back %.0f s: to the queue", message.TYPE, retry.after_seconds)
        queue.send(message, retry.after_seconds)


class GroupIncomplete(Exception):
    """Messages of a group could neither be answered nor put on the queue: the event fails,
    and Lambda delivers it again whole."""


def handle_group(group: wire.Group) -> None:
    """Answer a group's messages at once, each on its own (see the module's docstring)."""
    answers = at_once.run_all([_in_group(message) for message in group.messages])
    lost = [m for m, a in zip(group.messages, answers, strict=True) if isinstance(a, Exception)]
    if lost:
        raise GroupIncomplete(f"{len(lost)} of {len(group.messages)} message(s) not queued")


def _in_group(message: wire.Message) -> Callable[[], None]:
    def answer() -> None:
        try:
            retry = _handle(message)
        except Exception:
            log.exception("%s of a group failed; it comes back through the queue", message.TYPE)
            retry = Retry(after_seconds=FAILED_RETRY_SECONDS)
        if retry is not None:
            queue.send(message, retry.after_seconds)

    return answer


def handle_record(record: dict[str, Any]) -> None:
    """Handle one SQS record; raises to leave its message in the queue."""
    try:
        retry = handle_message(record["body"])
    except Exception:
        log.exception("invocation message failed; it will be delivered again")
        raise
    if retry is not None:
        if record.get("receiptHandle"):
            queue.hold_message(record["receiptHandle"], retry.after_seconds)
        raise Redeliver(f"held back for {retry.after_seconds:g} s")


def handle_batch(records: list[dict[str, Any]]) -> list[str]:
    """Handle SQS records; answer the message IDs to leave in the queue."""
    answer = process_at_once({"Records": records}, handle_record)
    return [str(item["itemIdentifier"]) for item in answer["batchItemFailures"]]


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The invoker function's answer to Lambda: the partial batch response for SQS records
    (handled at once); for an asynchronous invocation, nothing (Lambda ignores it)."""
    if isinstance(event, dict) and "Records" in event:
        return process_at_once(event, handle_record)
    handle_event(event)
    return {}
