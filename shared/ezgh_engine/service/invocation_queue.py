"""The invocations queue's consumer: one message, parsed once, to the handler of its class.

Which module answers which message (`core.messages` defines them):

- `Invoke` → `invoker.invoke`: lease the run, call its app, write the outcome.
- `Timer` → `invoker.on_timer`: `timers.fire_timer`, then invoke a run the timer woke.
- `Branch` → `branches.invoke_branch`: one parallel step in an invocation of its own.
- `Cron` → `schedules.fire`: start a schedule's run.
- `TaskWatch` → `pull.watch`: a pull app's task lease ended; invoke again if its worker died.

A handler answers a `Retry` to leave its message in the queue for later: its visibility is set
to then and it is reported as a batch item failure. A handler that raises leaves its message in
the queue until the visibility timeout (and the dead-letter queue after `max_receive_count`). A
body that is none of ours is dropped with an error log (see `core.messages`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ezgh_engine.adapters import messages as queue
from ezgh_engine.core import messages as wire
from ezgh_engine.core.messages import Retry
from ezgh_engine.service import branches, invoker, pull, schedules
from ezgh_engine.service.sqs_batch import Redeliver, failed_ids, process

log = logging.getLogger(__name__)


def _on_cron(message: wire.Cron) -> None:
    schedules.fire(message)


def _on_task_watch(message: wire.TaskWatch) -> Retry | None:
    return invoker.invoke(message.run_id, message.seq) if pull.watch(message) else None


def _on_branch(message: wire.Branch) -> Retry | None:
    return branches.invoke_branch(message.run_id, message.step_id)


def _on_invoke(message: wire.Invoke) -> Retry | None:
    return invoker.invoke(message.run_id, message.seq)


HANDLERS: dict[type[Any], Callable[[Any], Retry | None]] = {
    wire.Invoke: _on_invoke,
    wire.Timer: invoker.on_timer,
    wire.Branch: _on_branch,
    wire.Cron: _on_cron,
    wire.TaskWatch: _on_task_watch,
}


def handle_message(body: str) -> Retry | None:
    """Handle one queue message; a `Retry` means: leave it in the queue for later."""
    try:
        message = wire.parse(body)
    except wire.MalformedMessage as exc:
        log.error("dropping a message that is none of ours (%s): %r", exc, body[:200])
        return None
    return HANDLERS[type(message)](message)


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
    return failed_ids(records, handle_record)


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The invoker function's answer to Lambda: the partial batch response."""
    return process(event, handle_record, context)
