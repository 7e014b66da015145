"""Run-result notifications: when a run ends, a `workflows.run.ended` message to the queue its
app's `notifications` name.

Two halves, so a failure to send retries with backoff without holding up the outbox:

1. `on_run_change(old, new)` (the stream handler, for each run item change): a run that has
   just ended (its status became an ended one, or a retried run ended again with a new attempt)
   puts the run's fields on the `notifications` SQS queue. Every ended run goes there; whether
   its app wants a message is decided by the second half (the stream function reads no tables).
2. `handle_record(record)` (the `notify` function, per SQS record): match the app's `notifications` (`on`,
   `workflows`), build the seed's body (output inline while the message stays within 256 KiB,
   else `outputRef`) and send it with the Idempotency-Key `<runId>:<attempt>:<status>` (also the
   FIFO dedupId; groupId the run's ID or the workflow's name per `groupBy`), so a resend never
   stores it twice. A failure comes back with exponential backoff (SQS visibility) until 24
   hours after the run ended, then is dropped; a queue that no longer exists drops it at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import aws, queues_store, registry_store
from ezgh_engine.adapters.run_items import run_from
from ezgh_engine.api.idempotency import answer_once
from ezgh_engine.core.models import ENDED_STATUSES, Principal
from ezgh_engine.core.queues import notification_body
from ezgh_engine.errors import Conflict, EngineError
from ezgh_engine.service import queues, sqs_batch
from ezgh_engine.topology import NOTIFICATIONS_QUEUE

log = logging.getLogger(__name__)

GIVE_UP_AFTER = timedelta(hours=24)
FIRST_BACKOFF_SECONDS = 10
MAX_BACKOFF_SECONDS = 900


# --- 1. the stream: a run ended ------------------------------------------------------------


def just_ended(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether this run item change is an ending (once per (attempt, status))."""
    if not new or new.get("status") not in ENDED_STATUSES:
        return False
    if not old or old.get("status") not in ENDED_STATUSES:
        return True
    return int(old.get("attempt", 1)) != int(new.get("attempt", 1))


def on_run_change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """Queue a notification for a run that has just ended (called by the stream handler)."""
    if not just_ended(old, new):
        return
    assert new is not None
    if new.get("notifyEnd") == "no":
        return  # the invoker that ended it saw that its app has no notifications
    url = os.environ.get(NOTIFICATIONS_QUEUE.env_var)
    if not url:
        return  # a deployment without notifications (older stack): nothing to do
    run = run_from({k: v for k, v in new.items() if k != "input"}).to_api(with_steps=False)
    run.pop("input", None)
    message = {"projectId": new["projectId"], "run": run}
    aws.client("sqs").send_message(QueueUrl=url, MessageBody=json.dumps(message))


# --- 2. the notify function: send it --------------------------------------------------------


def _wanted(project_id: str, run: dict[str, Any]) -> tuple[Any, Any] | None:
    """(app notifications, queue) when this ending should be sent, else None."""
    # As read a moment ago (`registry_store.get_app_cached`): a change to the app's
    # notifications applies to the runs that end from a few seconds after it.
    app = registry_store.get_app_cached(project_id, str(run["appId"]))
    settings = app.notifications if app else None
    if settings is None or run["status"] not in settings.on:
        return None
    if settings.workflows is not None and run["workflow"] not in settings.workflows:
        return None
    queue = queues_store.get_queue(project_id, settings.queue_id)
    if queue is None:
        log.info("notification for run %s dropped: queue %s is gone", run["id"], settings.queue_id)
        return None
    return settings, queue


def send_notification(project_id: str, run: dict[str, Any]) -> bool:
    """Send one ending's message if the app wants it; True when done (sent or not wanted)."""
    wanted = _wanted(project_id, run)
    if wanted is None:
        return True
    settings, queue = wanted
    body = notification_body({**run, "runId": run["id"]})
    key = f"{run['id']}:{body['attempt']}:{body['status']}"
    message: dict[str, Any] = {"body": json.dumps(body, separators=(",", ":"))}
    if queue.fifo:
        message["groupId"] = run["id"] if settings.group_by == "run" else run["workflow"]
        message["dedupId"] = key
    system = Principal(queue.org_id, project_id, "notifications", (("*", None),))
    try:
        answer_once(
            system,
            f"POST /queues/{queue.id}/messages",
            key,
            {"messages": [message]},
            lambda: (200, {"messages": queues.send(queue, [message])}),
        )
    except ClientError as err:
        if "NonExistentQueue" in str(err) or "QueueDoesNotExist" in str(err):
            return True  # deleted meanwhile: dropped at once
        raise
    except Conflict as err:
        if "different request body" in err.message:
            log.warning("notification %s already sent with another body; dropped", key)
            return True
        raise
    return True


def _change_visibility(record: dict[str, Any], seconds: int) -> None:
    url = os.environ.get(NOTIFICATIONS_QUEUE.env_var)
    if url and record.get("receiptHandle"):
        with contextlib.suppress(ClientError):
            aws.client("sqs").change_message_visibility(
                QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=seconds
            )


def handle_record(record: dict[str, Any]) -> bool:
    """One notifications-queue record; True when it may be deleted."""
    data = json.loads(record.get("body") or "{}")
    run, project_id = data.get("run") or {}, data.get("projectId")
    if not run or not project_id:
        return True
    ended = run.get("endedAt")
    if ended and clock.now() - clock.parse_iso(ended) > GIVE_UP_AFTER:
        log.warning("notification for run %s dropped: 24 hours after the run ended", run["id"])
        return True
    try:
        return send_notification(str(project_id), run)
    except (EngineError, ClientError) as err:
        log.warning("notification for run %s failed, retrying: %s", run.get("id"), err)
    receives = int((record.get("attributes") or {}).get("ApproximateReceiveCount", 1) or 1)
    _change_visibility(
        record, min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** min(receives - 1, 20))
    )
    return False


_on_record = sqs_batch.from_answer(handle_record, "notification")


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The function's answer to Lambda: the partial batch response (`service.sqs_batch`)."""
    return sqs_batch.process(event, _on_record, context)
