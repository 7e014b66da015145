"""DynamoDB access for EZGH queues and subscriptions (in the `registry` table).

| item | pk | sk | notes |
| --- | --- | --- | --- |
| queue | `QUEUE#<queueId>` | `QUEUE` | `data` (JSON); gsi1: `QUEUES#<projectId>` / `<name>` |
| queue name | `QUEUENAME#<projectId>#<name>` | `QUEUENAME` | `queueId`; uniqueness |
| subscription | `SUB#<subId>` | `SUB` | `data` (JSON), `version`, `lastFailure*`, `lastDeliveredAt`; gsi1: `SUBS#<projectId>` / `<createdAt>#<id>` |
| queue's subscription | `QUEUESUB#<queueId>` | `QUEUESUB` | `subscriptionId`; one per queue |

A subscription's last failure (and the success after it that clears its status) is kept in
attributes of its own, written by the `deliver` function without a version check, so a
concurrent PATCH never loses it (and vice versa).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import aws
from ezgh_engine.adapters.ddb import cancellation_codes, is_condition_failure
from ezgh_engine.adapters.read_cache import ReadCache
from ezgh_engine.adapters.registry_store import _query_gsi1, ddb, get_item, item_key, table
from ezgh_engine.core.queues import QueueRecord, Subscription
from ezgh_engine.errors import Conflict, NotFound


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _put(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": table(),
            "Item": item,
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


# --- queues --------------------------------------------------------------------------------


def _queue_from(item: dict[str, Any]) -> QueueRecord:
    return QueueRecord(**json.loads(item["data"]["S"]))


def create_queue(queue: QueueRecord) -> QueueRecord:
    """Store the queue and claim its name; a taken name is Conflict (`invalid_state`)."""
    record = {
        **item_key(f"QUEUE#{queue.id}", "QUEUE"),
        "data": _s(json.dumps(asdict(queue))),
        "projectId": _s(queue.project_id),
        "gsi1pk": _s(f"QUEUES#{queue.project_id}"),
        "gsi1sk": _s(queue.name),
    }
    name = {
        **item_key(f"QUEUENAME#{queue.project_id}#{queue.name}", "QUEUENAME"),
        "queueId": _s(queue.id),
    }
    try:
        ddb().transact_write_items(TransactItems=[_put(record), _put(name)])
    except ClientError as err:
        reasons = cancellation_codes(err)
        if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
            raise Conflict(
                f"a queue named {queue.name!r} already exists in this project", code="invalid_state"
            ) from err
        raise
    return queue


# Deliveries read their queue and its subscription through `cached=True`, as they read the
# target app (`registry_store.get_app_cached`): for up to CACHE_SECONDS after a change made
# in another environment, a message may still go to the subscription's previous target, or
# to a subscription or queue deleted meanwhile (whose mapping is going away with it).
CACHE_SECONDS = 5.0
_queues: ReadCache[QueueRecord] = ReadCache(
    CACHE_SECONDS, version=lambda q: 0, owner=lambda q: q.id
)
_subscriptions: ReadCache[Subscription] = ReadCache(
    CACHE_SECONDS, version=lambda s: s.version, owner=lambda s: s.queue_id
)


def forget_cached() -> None:
    """Forget the queues and subscriptions read a moment ago (tests)."""
    _queues.clear()
    _subscriptions.clear()


def get_queue_by_id(queue_id: str, *, cached: bool = False) -> QueueRecord | None:
    """The queue, read now, or with `cached` as read up to `CACHE_SECONDS` ago."""

    def read() -> QueueRecord | None:
        item = get_item(f"QUEUE#{queue_id}", "QUEUE")
        return _queue_from(item) if item else None

    return _queues.get(queue_id, read) if cached else read()


def get_queue(project_id: str, ref: str) -> QueueRecord | None:
    """A queue of the project by its ID or its name, or None."""
    queue = get_queue_by_id(ref)
    if queue is None:
        name = get_item(f"QUEUENAME#{project_id}#{ref}", "QUEUENAME")
        if name:
            queue = get_queue_by_id(name["queueId"]["S"])
    return queue if queue and queue.project_id == project_id else None


def list_queues(project_id: str) -> list[QueueRecord]:
    return [_queue_from(i) for i in _query_gsi1(f"QUEUES#{project_id}")]


def all_queues() -> list[QueueRecord]:
    """Every project's queues: a Scan of the registry (operators' commands only)."""
    kwargs: dict[str, Any] = {
        "TableName": table(),
        "FilterExpression": "sk = :queue",
        "ExpressionAttributeValues": {":queue": _s("QUEUE")},
    }
    out: list[QueueRecord] = []
    while True:
        page = ddb().scan(**kwargs)
        out.extend(_queue_from(i) for i in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def delete_queue(queue: QueueRecord) -> None:
    try:
        ddb().transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": table(), "Key": item_key(f"QUEUE#{queue.id}", "QUEUE")}},
                {
                    "Delete": {
                        "TableName": table(),
                        "Key": item_key(f"QUEUENAME#{queue.project_id}#{queue.name}", "QUEUENAME"),
                    }
                },
            ]
        )
    finally:
        _queues.forget(queue.id)
        _subscriptions.forget(queue.id)


# --- subscriptions -------------------------------------------------------------------------

_STATE_FIELDS = (
    "version",
    "last_failure",
    "last_failure_at",
    "last_failure_message_id",
    "last_delivered_at",
)


def _sub_from(item: dict[str, Any]) -> Subscription:
    data = json.loads(item["data"]["S"])
    for name in _STATE_FIELDS:
        data.pop(name, None)
    return Subscription(
        **data,
        version=int(item["version"]["N"]),
        last_failure=item["lastFailure"]["S"] if "lastFailure" in item else None,
        last_failure_at=item["lastFailureAt"]["S"] if "lastFailureAt" in item else None,
        last_failure_message_id=(
            item["lastFailureMessageId"]["S"] if "lastFailureMessageId" in item else None
        ),
        last_delivered_at=item["lastDeliveredAt"]["S"] if "lastDeliveredAt" in item else None,
    )


def _sub_data(sub: Subscription) -> str:
    data = asdict(sub)
    for name in _STATE_FIELDS:
        data.pop(name, None)
    return json.dumps(data)


def create_subscription(sub: Subscription) -> Subscription:
    """Store it and claim its queue (one subscription per queue: Conflict otherwise)."""
    record = {
        **item_key(f"SUB#{sub.id}", "SUB"),
        "data": _s(_sub_data(sub)),
        "version": {"N": str(sub.version)},
        "gsi1pk": _s(f"SUBS#{sub.project_id}"),
        "gsi1sk": _s(f"{sub.created_at}#{sub.id}"),
    }
    claim = {**item_key(f"QUEUESUB#{sub.queue_id}", "QUEUESUB"), "subscriptionId": _s(sub.id)}
    try:
        ddb().transact_write_items(TransactItems=[_put(record), _put(claim)])
    except ClientError as err:
        reasons = cancellation_codes(err)
        if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
            raise Conflict(
                f"queue {sub.queue_id} already has a subscription; change or delete it",
                code="invalid_state",
            ) from err
        raise
    return sub


def get_subscription(project_id: str, sub_id: str) -> Subscription | None:
    item = get_item(f"SUB#{sub_id}", "SUB")
    sub = _sub_from(item) if item else None
    return sub if sub and sub.project_id == project_id else None


def subscription_for_queue(queue_id: str, *, cached: bool = False) -> Subscription | None:
    """The queue's subscription, read now, or with `cached` as read up to `CACHE_SECONDS`
    ago."""

    def read() -> Subscription | None:
        claim = get_item(f"QUEUESUB#{queue_id}", "QUEUESUB")
        if not claim:
            return None
        item = get_item(f"SUB#{claim['subscriptionId']['S']}", "SUB")
        return _sub_from(item) if item else None

    return _subscriptions.get(queue_id, read) if cached else read()


def list_subscriptions(project_id: str) -> list[Subscription]:
    return [_sub_from(i) for i in _query_gsi1(f"SUBS#{project_id}")]


def save_subscription(sub: Subscription) -> Subscription:
    """Write over the stored one if unchanged since read (its version); Conflict otherwise."""
    try:
        saved = replace(sub, version=sub.version + 1)
        try:
            ddb().update_item(
                TableName=table(),
                Key=item_key(f"SUB#{sub.id}", "SUB"),
                UpdateExpression="SET #d = :d, version = :nv",
                ConditionExpression="version = :v",
                ExpressionAttributeNames={"#d": "data"},
                ExpressionAttributeValues={
                    ":d": _s(_sub_data(saved)),
                    ":nv": {"N": str(saved.version)},
                    ":v": {"N": str(sub.version)},
                },
            )
        except ClientError as err:
            if is_condition_failure(err):
                raise Conflict(
                    f"subscription {sub.id} changed or was deleted meanwhile; retry"
                ) from err
            raise
        return saved
    finally:
        _subscriptions.forget(sub.queue_id)


def record_failure(sub: Subscription, message: str, message_id: str, at: str) -> None:
    """Remember a delivery's failure as the subscription's status (no version check). This
    environment forgets its copy, so its next delivery sees the failure (and a success can
    clear it: `record_delivered`)."""
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(f"SUB#{sub.id}", "SUB"),
            UpdateExpression="SET lastFailure = :f, lastFailureAt = :a, lastFailureMessageId = :m",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={
                ":f": _s(message[:1000]),
                ":a": _s(at),
                ":m": _s(message_id),
            },
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise
    finally:
        _subscriptions.forget(sub.queue_id)


def record_delivered(sub: Subscription, at: str) -> None:
    """A delivery at `at` succeeded after the failure `sub` shows: its status reads `ok`
    again (`Subscription.failing`). Written only then, not per message: a busy queue's
    deliveries would all write this one item. Never moves the time back (a slower delivery
    answering late)."""
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(f"SUB#{sub.id}", "SUB"),
            UpdateExpression="SET lastDeliveredAt = :a",
            ConditionExpression="attribute_exists(pk) AND "
            "(attribute_not_exists(lastDeliveredAt) OR lastDeliveredAt < :a)",
            ExpressionAttributeValues={":a": _s(at)},
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise
    finally:
        _subscriptions.forget(sub.queue_id)


def delete_subscription(sub: Subscription) -> None:
    try:
        try:
            ddb().transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": table(),
                            "Key": item_key(f"SUB#{sub.id}", "SUB"),
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                    {
                        "Delete": {
                            "TableName": table(),
                            "Key": item_key(f"QUEUESUB#{sub.queue_id}", "QUEUESUB"),
                        }
                    },
                ]
            )
        except ClientError as err:
            if cancellation_codes(err) and not aws.is_throttle(err):  # else 429, not a refusal
                raise NotFound(f"subscription {sub.id} not found") from err
            raise
    finally:
        _subscriptions.forget(sub.queue_id)
