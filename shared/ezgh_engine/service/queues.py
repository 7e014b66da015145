"""EZGH queues: create, read, delete, send, redrive.

Rules (the contract leaves them to us):

- A queue's name matches `^[a-z0-9-]{1,64}$` (as an app's) and is unique in the project; a
  queue is named in paths by its ID or its name.
- `maxReceiveCount` 1 to 1000 (default 10): deliveries before a message moves to the queue's
  dead-letter queue. `visibilityTimeoutSeconds` 0 to 43200 (default 30): how long a delivered
  message stays invisible, and the first step of a subscription's retry backoff.
- Permissions: creating, deleting and redriving a queue need `queues.manage` (on the queue's
  ID for delete and redrive; creating needs it without a resource, as a new queue has no ID
  a grant could name); sending needs `queues.messages.send` on the queue's ID. Reading a
  queue needs a `queues.*` grant on it or on every queue (`Principal.sees`): a list answers
  the queues the key may read, a read of another is `403 forbidden`.
- Sending validates every message before sending any (1 to 10 messages; a text body and
  string attributes within 256 KiB; FIFO: a `groupId`, and a `dedupId` or content-based
  deduplication), so a bad request sends nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import event_sources, queues_store, sqs_queues
from ezgh_engine.core import validation
from ezgh_engine.core.models import Principal
from ezgh_engine.core.queues import (
    DEFAULT_MAX_RECEIVE_COUNT,
    DEFAULT_VISIBILITY_TIMEOUT,
    QUEUE_NAME_RE,
    MessageError,
    QueueRecord,
    check_messages,
)
from ezgh_engine.errors import Conflict, Forbidden, NotFound, ValidationError

MANAGE_ACTION = "queues.manage"
SEND_ACTION = "queues.messages.send"


def require(principal: Principal, action: str, resource: str | None) -> None:
    if not principal.allows(action, resource):
        scope = f" on {resource!r}" if resource else ""
        raise Forbidden(f"this API key lacks {action!r}{scope}")


def create_queue(
    principal: Principal,
    *,
    name: str,
    fifo: bool = False,
    max_receive_count: int | None = None,
    visibility_timeout_seconds: int | None = None,
) -> QueueRecord:
    if not QUEUE_NAME_RE.match(name):
        raise ValidationError("name: must match ^[a-z0-9-]{1,64}$")
    receives = DEFAULT_MAX_RECEIVE_COUNT if max_receive_count is None else max_receive_count
    if not 1 <= receives <= 1000:
        raise ValidationError("maxReceiveCount: from 1 to 1000")
    visibility = (
        DEFAULT_VISIBILITY_TIMEOUT
        if visibility_timeout_seconds is None
        else visibility_timeout_seconds
    )
    if not 0 <= visibility <= 43200:
        raise ValidationError("visibilityTimeoutSeconds: from 0 to 43200")
    require(principal, MANAGE_ACTION, None)
    if queues_store.get_queue(principal.project_id, name) is not None:
        raise_taken(name)
    queue_id = ids.new_id()
    url, arn, dlq_url, dlq_arn = sqs_queues.create(
        queue_id, fifo=fifo, max_receive_count=receives, visibility_timeout_seconds=visibility
    )
    queue = QueueRecord(
        id=queue_id,
        org_id=principal.org_id,
        project_id=principal.project_id,
        name=name,
        fifo=fifo,
        max_receive_count=receives,
        visibility_timeout_seconds=visibility,
        url=url,
        arn=arn,
        dlq_url=dlq_url,
        dlq_arn=dlq_arn,
        created_at=clock.iso(clock.now()),
    )
    try:
        return queues_store.create_queue(queue)
    except BaseException:
        with contextlib.suppress(Exception):
            sqs_queues.delete(queue)
        raise


def raise_taken(name: str) -> None:
    raise Conflict(f"a queue named {name!r} already exists in this project", code="invalid_state")


def get_queue(principal: Principal, ref: str) -> QueueRecord:
    """A queue of the caller's project by ID or name; 404 otherwise."""
    return find_queue(principal.project_id, ref)


def find_queue(project_id: str, ref: str) -> QueueRecord:
    """A queue of the project by ID (a UUID) or name: 400 when `ref` can be neither, 404
    when no such queue exists. Every `{queueId}` (paths, `send_to_queue`, message waits)
    goes through here, so each answers the same mistake the same way."""
    if not isinstance(ref, str) or not (validation.is_uuid(ref) or QUEUE_NAME_RE.fullmatch(ref)):
        raise ValidationError(
            "queueId: neither a queue ID (a UUID) nor a queue name (^[a-z0-9-]{1,64}$)"
        )
    queue = queues_store.get_queue(project_id, ref)
    if queue is None:
        raise NotFound(f"queue {ref} not found")
    return queue


def read_queue(principal: Principal, ref: str) -> QueueRecord:
    """`GET /queues/{queueId}`: the queue, if the key may read it (403 otherwise)."""
    queue = get_queue(principal, ref)
    if not principal.sees("queue", queue.id):
        raise Forbidden(f"this API key holds no grant on queue {queue.id}")
    return queue


def list_queues(principal: Principal) -> list[QueueRecord]:
    """The queues of the caller's project it may read."""
    return [
        q for q in queues_store.list_queues(principal.project_id) if principal.sees("queue", q.id)
    ]


def delete_queue(principal: Principal, ref: str) -> None:
    """Delete the queue, its subscription and its SQS queues. Notifications still aimed at
    it are dropped from now on."""
    queue = get_queue(principal, ref)
    require(principal, MANAGE_ACTION, queue.id)
    sub = queues_store.subscription_for_queue(queue.id)
    if sub is not None:
        event_sources.event_sources().delete(sub.mapping_id)
        with contextlib.suppress(NotFound):
            queues_store.delete_subscription(sub)
    queues_store.delete_queue(queue)
    sqs_queues.delete(queue)


def send(queue: QueueRecord, messages: Any) -> list[dict[str, str]]:
    """Validate every message, then send them (no permission check: callers do it)."""
    try:
        checked = check_messages(messages, fifo=queue.fifo)
    except MessageError as err:
        raise ValidationError(str(err)) from None
    return sqs_queues.send(queue, checked)


def send_messages(principal: Principal, queue: QueueRecord, messages: Any) -> dict[str, Any]:
    require(principal, SEND_ACTION, queue.id)
    return {"messages": send(queue, messages)}


def redrive(principal: Principal, ref: str) -> dict[str, Any]:
    queue = get_queue(principal, ref)
    require(principal, MANAGE_ACTION, queue.id)
    moved = sqs_queues.redrive(queue)
    return {"moved": moved, "remaining": sqs_queues.dlq_depth(queue)}
