"""Pull apps' task queues: one SQS queue per pull app, `<stack>-tasks-<appId>`.

The queue is a mailbox, not the source of truth: the run's lease is (see `service.pull`). A
received task is deleted at once; a task whose worker dies is delivered again because the
engine sends a new one when the lease ends.

`<stack>` is `config.stack_prefix()`: the stack's name when deployed (the stack scopes the
functions' IAM to `<stack>-tasks-*`), "ezgh" locally.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import config
from ezgh_engine.adapters.aws import client

QUEUE_INFIX = "-tasks-"
# Only a worker that crashed between receive and delete leaves a message in flight; the
# lease, not this, decides redelivery.
VISIBILITY_SECONDS = 30
RETENTION_SECONDS = 4 * 24 * 3600

_urls: dict[str, str] = {}
_lock = threading.Lock()


def name_prefix(stack_prefix: str | None = None) -> str:
    """What every task queue's SQS name starts with, for this stack (or `stack_prefix`)."""
    return f"{stack_prefix or config.stack_prefix()}{QUEUE_INFIX}"


def queue_name(app_id: str) -> str:
    return f"{name_prefix()}{app_id}"


def queue_arn(url: str, region: str, partition: str = "aws") -> str:
    """A queue's ARN from its URL (`<endpoint>/<account>/<name>`): no request needed."""
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:{partition}:sqs:{region}:{account}:{name}"


def _missing(exc: ClientError) -> bool:
    code = exc.response.get("Error", {}).get("Code", "")
    return "NonExistentQueue" in code or "QueueDoesNotExist" in code


def ensure_queue(app_id: str) -> str:
    """The app's queue URL, creating the queue if needed (create is idempotent)."""
    name = queue_name(app_id)
    with _lock:
        url = _urls.get(name)
    if url:
        return url
    url = client("sqs").create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(VISIBILITY_SECONDS),
            "MessageRetentionPeriod": str(RETENTION_SECONDS),
        },
    )["QueueUrl"]
    with _lock:
        _urls[name] = url
    return str(url)


def _forget(app_id: str) -> None:
    with _lock:
        _urls.pop(queue_name(app_id), None)


def send_task(app_id: str, task: dict[str, Any]) -> None:
    body = json.dumps(task, separators=(",", ":"), ensure_ascii=False)
    for attempt in (1, 2):
        try:
            client("sqs").send_message(QueueUrl=ensure_queue(app_id), MessageBody=body)
            return
        except ClientError as exc:
            if attempt == 2 or not _missing(exc):
                raise
            _forget(app_id)


def receive_task(app_id: str, wait_seconds: int) -> list[tuple[str, str]]:
    """Up to one task (`(body, receipt handle)`), waiting up to `wait_seconds` (≤ 20)."""
    for attempt in (1, 2):
        try:
            answer = client("sqs").receive_message(
                QueueUrl=ensure_queue(app_id),
                MaxNumberOfMessages=1,
                WaitTimeSeconds=max(0, min(wait_seconds, 20)),
            )
            return [(m["Body"], m["ReceiptHandle"]) for m in answer.get("Messages", [])]
        except ClientError as exc:
            if attempt == 2 or not _missing(exc):
                raise
            _forget(app_id)
    return []


def delete_task(app_id: str, receipt_handle: str) -> None:
    try:
        client("sqs").delete_message(QueueUrl=ensure_queue(app_id), ReceiptHandle=receipt_handle)
    except ClientError as exc:
        if not _missing(exc):
            raise


def delete_queue(app_id: str) -> None:
    """Delete the app's queue (its app was deleted); absent is fine."""
    try:
        url = client("sqs").get_queue_url(QueueName=queue_name(app_id))["QueueUrl"]
        client("sqs").delete_queue(QueueUrl=url)
    except ClientError as exc:
        if not _missing(exc):
            raise
    finally:
        _forget(app_id)
