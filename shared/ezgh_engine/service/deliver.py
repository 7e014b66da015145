"""The `deliver` function: one EZGH queue message to its queue's subscription.

A message is acknowledged (deleted by the event source) when its delivery succeeded; a failed
one is reported as a batch item failure, its status recorded on the subscription, and its
visibility stretched (exponential backoff from the queue's visibility timeout, at most 15
minutes), so it comes back later and, after the queue's `maxReceiveCount` receives, moves to
the dead-letter queue. Targets:

- `https`: POST the message (the seed's shape) as JSON, signed as Standard Webhooks
  (`webhook-id` = the message ID, `webhook-timestamp`, `webhook-signature`) with the
  subscription's secret, to the address the guard checked (`push.pinned_post`); a 2xx
  acknowledges. A failure's status names the target by scheme and host only.
- `workflow` / `start`: start a run with the message as input and the ID
  `derived_id("queue-start", project, queue, message)`: a redelivered message finds its run
  (accepted). An app not synced (or not hosting the workflow) is refused and retried.
- `workflow` / `resume`: read the correlation attribute, check the key, and resume every run
  of the target's app and workflow waiting on (queue, key) through
  `service.waits.resume_message_waiters` (another app's waits on the same queue and key are
  not this subscription's); none resumed, or a missing or invalid attribute, is
  `No run to resume (message)` and retried.

Every delivery acts for the key the subscription records (`subscriptions.acting_key`),
read again, with its creators, as this environment read it at most
`api_keys_store.KEY_CACHE_SECONDS` ago: it must still hold `queues.subscriptions.create` on
the queue, and for a workflow target `workflows.runs.start` (`resume`) on its workflow.
Refused, nothing is delivered: the status says so (`Run not started: 403 forbidden: …`) and
the message is retried like any failed delivery, then dead-lettered.

The subscription's status is its last delivery's: a failure's words until a later delivery
succeeds, then `ok` again (`lastFailure` keeps the failure). A success is written only after
a failure this environment has seen (its copy of the subscription is up to
`queues_store.CACHE_SECONDS` old), so a busy queue does not write its subscription per message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx

from ezgh_engine import clock
from ezgh_engine.adapters import push, queues_store, registry_store, sqs_queues
from ezgh_engine.core.queues import (
    MESSAGE_KEY_RE,
    NO_RUN_TO_RESUME,
    DeliveryFailed,
    QueueRecord,
    Subscription,
    delivered_message,
    redacted_url,
    start_run_id,
)
from ezgh_engine.errors import EngineError, ValidationError
from ezgh_engine.service import flow_targets, sqs_batch
from ezgh_engine.service.derived_runs import NotStartable, start_derived_run, startable_app
from ezgh_engine.service.subscriptions import (
    CREATE_ACTION,
    MODE_ACTION,
    SECRET_PREFIX,
    acting_key,
    signing_secret,
)
from ezgh_engine.service.waits import resume_message_waiters

log = logging.getLogger(__name__)

HTTPS_TIMEOUT_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 900


def webhook_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, the key
    being the base64-decoded part of `whsec_<base64>`."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def _authorize(sub: Subscription, refused: str, *needs: tuple[str, str]) -> None:
    """Deliver only while the subscription's key may: `queues.subscriptions.create` on its
    queue and `needs`; else the delivery fails with the 403 (`refused` first)."""
    try:
        acting_key(sub).require((CREATE_ACTION, sub.queue_id), *needs)
    except EngineError as err:
        raise DeliveryFailed(f"{refused}: {err.status} {err.code}: {err.message}") from None


def _deliver_https(sub: Subscription, message: dict[str, Any]) -> None:
    _authorize(sub, "Not delivered")
    url = str(sub.target["url"])
    shown = redacted_url(url)  # a failure is shown to every reader: no path, no query
    try:
        target = push.check_target(url)
    except ValidationError as err:
        raise DeliveryFailed(f"{shown}: {err.message}") from None
    raw = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    msg_id = str(message["messageId"])  # the same on every retry: receivers dedupe on it
    headers = {
        "Content-Type": "application/json",
        "X-EZGH-Subscription-Id": sub.id,
        "X-EZGH-Queue-Id": sub.queue_id,
        "X-EZGH-Message-Id": msg_id,
    }
    secret = signing_secret(sub)
    if secret is not None:
        timestamp = clock.wall_seconds()
        headers |= {
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": webhook_signature(secret, msg_id, timestamp, raw),
        }
    try:
        answer = push.pinned_post(
            target, content=raw, headers=headers, timeout=HTTPS_TIMEOUT_SECONDS
        )
    except httpx.HTTPError as err:
        raise DeliveryFailed(f"POST {shown} failed: {type(err).__name__}") from None
    if not 200 <= answer.status_code < 300:
        raise DeliveryFailed(f"POST {shown} answered {answer.status_code}")


def _deliver_start(sub: Subscription, message: dict[str, Any]) -> None:
    workflow = str(sub.target["workflow"])
    try:
        app = startable_app(sub.project_id, str(sub.target["appId"]), workflow)
    except NotStartable as err:
        raise DeliveryFailed(f"Run not started: {err}") from None
    _authorize(sub, "Run not started", (MODE_ACTION["start"], f"{app.name}/{workflow}"))
    start_derived_run(
        run_id=start_run_id(sub.project_id, sub.queue_id, str(message["messageId"])),
        org_id=sub.org_id,
        project_id=sub.project_id,
        app=app,
        workflow=workflow,
        input=message,
    )


def _deliver_resume(sub: Subscription, message: dict[str, Any]) -> None:
    key = message["attributes"].get(str(sub.target["correlationAttribute"]))
    if not isinstance(key, str) or not MESSAGE_KEY_RE.match(key):
        raise DeliveryFailed(NO_RUN_TO_RESUME)
    target = (str(sub.target["appId"]), str(sub.target["workflow"]))
    if acting_key(sub).key_id is not None:  # (none: a subscription from before keys)
        app = registry_store.get_app_cached(sub.project_id, target[0])
        if app is None:
            raise DeliveryFailed(f"Run not resumed: app {target[0]} not found")
        _authorize(sub, "Run not resumed", (MODE_ACTION["resume"], f"{app.name}/{target[1]}"))
    resumed = resume_message_waiters(
        sub.project_id, sub.queue_id, key, message, app_id=target[0], workflow=target[1]
    )
    if resumed <= 0:
        raise DeliveryFailed(NO_RUN_TO_RESUME)


_TARGETS: dict[tuple[str, str | None], Callable[[Subscription, dict[str, Any]], None]] = {
    ("https", None): _deliver_https,
    ("workflow", "start"): _deliver_start,
    ("workflow", "resume"): _deliver_resume,
    ("flow", "start"): flow_targets.deliver_start,
    ("flow", "resume"): flow_targets.deliver_resume,
}


def _backoff(record: dict[str, Any], queue: QueueRecord) -> None:
    receives = int((record.get("attributes") or {}).get("ApproximateReceiveCount", 1) or 1)
    base = max(1, queue.visibility_timeout_seconds)
    seconds = min(MAX_BACKOFF_SECONDS, base * 2 ** min(receives - 1, 20))
    receipt = record.get("receiptHandle")
    if receipt:
        sqs_queues.change_visibility(str(record.get("eventSourceARN", "")), receipt, seconds)


def deliver_record(record: dict[str, Any]) -> bool:
    """Deliver one SQS record; True when it may be acknowledged."""
    queue_id = sqs_queues.queue_id_from_arn(str(record.get("eventSourceARN", "")))
    # Read as a moment ago (queues_store.CACHE_SECONDS): a burst reads them once, not per
    # message. What is not there is read again before anything is dropped or held.
    queue = queues_store.get_queue_by_id(queue_id, cached=True) if queue_id else None
    if queue is None and queue_id:
        queue = queues_store.get_queue_by_id(queue_id)
    if queue is None:
        log.warning("message %s from an unknown queue; dropped", record.get("messageId"))
        return True
    sub = queues_store.subscription_for_queue(queue.id, cached=True)
    if sub is None:
        # Deleted a moment ago; its mapping is going away. Let the message wait for the next.
        _backoff(record, queue)
        return False
    message = delivered_message(record, queue)
    target = (str(sub.target.get("kind")), sub.target.get("mode"))
    deliver = _TARGETS.get(target)
    try:
        if deliver is None:
            raise DeliveryFailed(f"unknown target {target}")
        deliver(sub, message)
    except DeliveryFailed as failed:
        status = failed.status
    except EngineError as err:
        status = f"Delivery failed: {err.message}"
        log.warning("delivery of %s failed: %s", message["messageId"], err.message)
    else:
        if sub.failing:  # as read a moment ago: a failure recorded meanwhile shows next time
            queues_store.record_delivered(sub, clock.iso(clock.now()))
        return True
    queues_store.record_failure(sub, status, str(message["messageId"]), clock.iso(clock.now()))
    _backoff(record, queue)
    return False


_on_record = sqs_batch.from_answer(deliver_record, "delivery of")


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The function's answer to Lambda: the partial batch response (`service.sqs_batch`)."""
    return sqs_batch.process(event, _on_record, context)
