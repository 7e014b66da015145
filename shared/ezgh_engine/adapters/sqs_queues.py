"""SQS for EZGH queues: each one is an SQS queue `<stack>-q-<queueId>[.fifo]` with its own
dead-letter queue `<stack>-q-<queueId>-dlq[.fifo]`, `<stack>` being `config.stack_prefix()`
("ezgh" locally). The stack scopes the functions' IAM grants to `<stack>-q-*`.

Both keep messages 14 days, SQS's longest (its default is 4: a backlog older than that
would be deleted unread). A FIFO queue runs in high-throughput mode: deduplication and
throughput per message group (`DeduplicationScope=messageGroup`,
`FifoThroughputLimit=perMessageGroupId`), so its limit is per group, not 300 calls a second
for the whole queue. A deduplication ID then counts within its group: a resend goes to the
same group, so it is still recognised. Queues made before these settings get them from
`ezgh ops repair` (`outdated`, `apply_attributes`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import aws
from ezgh_engine.core.queues import (
    MAX_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    MESSAGE_ID_ATTRIBUTE,
    OutgoingMessage,
    QueueRecord,
)
from ezgh_engine.errors import TransientError
from ezgh_engine.topology import SQS_MAX_RETENTION_SECONDS

QUEUE_INFIX = "-q-"
# SendMessageBatch carries at most 256 KiB in all; larger requests go in several calls.
BATCH_BYTES = 256 * 1024
REDRIVE_MAX_MESSAGES = 1000
REDRIVE_MAX_SECONDS = 20.0


def _sqs() -> Any:
    return aws.client("sqs")


def name_prefix(stack_prefix: str | None = None) -> str:
    """What every EZGH queue's SQS name starts with, for this stack (or `stack_prefix`)."""
    return f"{stack_prefix or config.stack_prefix()}{QUEUE_INFIX}"


def queue_names(queue_id: str, fifo: bool) -> tuple[str, str]:
    suffix, prefix = ".fifo" if fifo else "", name_prefix()
    return f"{prefix}{queue_id}{suffix}", f"{prefix}{queue_id}-dlq{suffix}"


def queue_id_from_arn(arn: str) -> str | None:
    """The EZGH queue ID of an SQS queue ARN (an event's `eventSourceARN`), or None."""
    name, prefix = arn.rsplit(":", 1)[-1], name_prefix()
    if not name.startswith(prefix):
        return None
    name = name.removeprefix(prefix).removesuffix(".fifo")
    return None if name.endswith("-dlq") else name


def _arn(url: str) -> str:
    return str(
        _sqs().get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
    )


# SQS's longest retention, 14 days, for every EZGH queue and its dead-letter queue.
RETENTION_SECONDS = SQS_MAX_RETENTION_SECONDS


def settled_attributes(fifo: bool) -> dict[str, str]:
    """The attributes every EZGH queue (and its DLQ) holds and `apply_attributes` restores:
    14 days' retention; a FIFO queue's high-throughput mode."""
    attributes = {"MessageRetentionPeriod": str(RETENTION_SECONDS)}
    if fifo:
        attributes |= {
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        }
    return attributes


def create(
    queue_id: str, *, fifo: bool, max_receive_count: int, visibility_timeout_seconds: int
) -> tuple[str, str, str, str]:
    """Create the DLQ and the queue; answers (url, arn, dlq url, dlq arn)."""
    name, dlq_name = queue_names(queue_id, fifo)
    fifo_attrs = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if fifo else {}
    dlq_url = _sqs().create_queue(
        QueueName=dlq_name,
        Attributes={**({"FifoQueue": "true"} if fifo else {}), **settled_attributes(fifo)},
    )["QueueUrl"]
    dlq_arn = _arn(dlq_url)
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
    url = _sqs().create_queue(
        QueueName=name,
        Attributes={
            **fifo_attrs,
            **settled_attributes(fifo),
            "VisibilityTimeout": str(visibility_timeout_seconds),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    return url, _arn(url), dlq_url, dlq_arn


def outdated(queue: QueueRecord) -> dict[str, dict[str, str]]:
    """Per SQS queue URL of `queue` (the queue, its DLQ), the settled attributes it lacks
    (a queue made before them), as `{name: (wanted value)}`; empty when it has them all. A
    queue gone from SQS is left out."""
    wanted = settled_attributes(queue.fifo)
    out: dict[str, dict[str, str]] = {}
    for url in (queue.url, queue.dlq_url):
        try:
            held = _sqs().get_queue_attributes(QueueUrl=url, AttributeNames=list(wanted))
        except ClientError as err:
            if "NonExistentQueue" in str(err) or "QueueDoesNotExist" in str(err):
                continue
            raise
        attributes = held.get("Attributes", {})
        missing = {k: v for k, v in wanted.items() if attributes.get(k) != v}
        if missing:
            out[url] = missing
    return out


def apply_attributes(changes: dict[str, dict[str, str]]) -> None:
    """Set what `outdated` found missing (idempotent; SQS applies a retention change to the
    messages a queue holds already, within about 15 minutes)."""
    for url, attributes in changes.items():
        _sqs().set_queue_attributes(QueueUrl=url, Attributes=attributes)


def delete(queue: QueueRecord) -> None:
    for url in (queue.url, queue.dlq_url):
        try:
            _sqs().delete_queue(QueueUrl=url)
        except ClientError as err:
            if "NonExistentQueue" not in str(err) and "QueueDoesNotExist" not in str(err):
                raise


def _entry(index: int, message: OutgoingMessage) -> dict[str, Any]:
    entry: dict[str, Any] = {"Id": str(index), "MessageBody": message.body}
    if message.attributes:
        entry["MessageAttributes"] = {
            k: {"DataType": "String", "StringValue": v} for k, v in message.attributes.items()
        }
    if message.group_id is not None:
        entry["MessageGroupId"] = message.group_id
    if message.group_id is not None:
        # Content-based deduplication made explicit (SHA-256 of the body, as SQS does it), so
        # every FIFO send names its deduplication ID (and moto answers a SequenceNumber).
        entry["MessageDeduplicationId"] = (
            message.dedup_id or hashlib.sha256(message.body.encode()).hexdigest()
        )
    return entry


def _with_own_ids(queue: QueueRecord, messages: list[OutgoingMessage]) -> list[str | None]:
    """Under an Idempotency-Key, each message's own ID (`ids.effect_id`), added as the
    `ezgh.messageId` attribute: a resend after a crash stores copies with the same ID, which
    every consumer dedupes on. None where the message has no room left for the attribute
    (10 attributes already, or 256 KiB): its ID is SQS's."""
    own: list[str | None] = []
    for i, message in enumerate(messages):
        mid = ids.effect_id("message", queue.id, str(i))
        with_id = OutgoingMessage(
            message.body,
            {**message.attributes, MESSAGE_ID_ATTRIBUTE: mid or ""},
            message.group_id,
            message.dedup_id,
        )
        room = len(message.attributes) < MAX_ATTRIBUTES and with_id.size() <= MAX_MESSAGE_BYTES
        if mid is not None and room:
            messages[i] = with_id
            own.append(mid)
        else:
            own.append(None)
    return own


def _chunks(messages: list[OutgoingMessage]) -> list[list[int]]:
    chunks: list[list[int]] = [[]]
    size = 0
    for i, message in enumerate(messages):
        if chunks[-1] and size + message.size() > BATCH_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += message.size()
    return chunks


def send(queue: QueueRecord, messages: list[OutgoingMessage]) -> list[dict[str, str]]:
    """Send validated messages in order with SendMessageBatch; `[{messageId, seq?}]` (under
    an Idempotency-Key, the engine's own message IDs: `_with_own_ids`).

    Entries SQS reports as failed are sent again (a few times) before giving up with a
    transient error.
    """
    messages = list(messages)
    own_ids = _with_own_ids(queue, messages)
    answers: dict[int, dict[str, str]] = {}
    for chunk in _chunks(messages):
        pending = chunk
        for _ in range(4):
            result = _sqs().send_message_batch(
                QueueUrl=queue.url, Entries=[_entry(i, messages[i]) for i in pending]
            )
            for ok in result.get("Successful", []):
                answer = {"messageId": own_ids[int(ok["Id"])] or ok["MessageId"]}
                if ok.get("SequenceNumber"):
                    answer["seq"] = str(ok["SequenceNumber"])
                answers[int(ok["Id"])] = answer
            failed = result.get("Failed", [])
            if not failed:
                break
            if any(f.get("SenderFault") for f in failed):
                raise TransientError(f"SQS refused a message: {failed[0].get('Message')}")
            pending = [int(f["Id"]) for f in failed]
        else:
            raise TransientError("SQS did not take every message; retry")
    return [answers[i] for i in range(len(messages))]


def change_visibility(queue_arn: str, receipt_handle: str, seconds: int) -> None:
    """Make a message come back after `seconds` (the subscription's backoff); best effort."""
    queue_id = queue_id_from_arn(queue_arn)
    name = queue_arn.rsplit(":", 1)[-1]
    if queue_id is None:
        return
    try:
        url = _sqs().get_queue_url(QueueName=name)["QueueUrl"]
        _sqs().change_message_visibility(
            QueueUrl=url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
        )
    except ClientError:
        pass


def redrive(queue: QueueRecord) -> int:
    """Move the dead-letter queue's messages back to the queue (receive, send, delete),
    at most `REDRIVE_MAX_MESSAGES` or `REDRIVE_MAX_SECONDS` per call; answers how many moved.

    SQS's StartMessageMoveTask would do this too, but moto lacks it, and this keeps the
    attributes and FIFO groups as they were.
    """
    moved = 0
    deadline = clock.monotonic() + REDRIVE_MAX_SECONDS
    while moved < REDRIVE_MAX_MESSAGES and clock.monotonic() < deadline:
        got = (
            _sqs()
            .receive_message(
                QueueUrl=queue.dlq_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                VisibilityTimeout=60,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            .get("Messages", [])
        )
        if not got:
            break
        for message in got:
            entry: dict[str, Any] = {"MessageBody": message["Body"]}
            if message.get("MessageAttributes"):
                entry["MessageAttributes"] = {
                    k: {
                        key: v[key]
                        for key in ("DataType", "StringValue", "BinaryValue")
                        if key in v
                    }
                    for k, v in message["MessageAttributes"].items()
                }
            if queue.fifo:
                entry["MessageGroupId"] = message.get("Attributes", {}).get(
                    "MessageGroupId", "redrive"
                )
                # A new deduplication ID: the original one may still be inside SQS's window.
                entry["MessageDeduplicationId"] = f"redrive:{message['MessageId']}"
            _sqs().send_message(QueueUrl=queue.url, **entry)
            _sqs().delete_message(QueueUrl=queue.dlq_url, ReceiptHandle=message["ReceiptHandle"])
            moved += 1
    return moved


def dlq_depth(queue: QueueRecord) -> int:
    attrs = _sqs().get_queue_attributes(
        QueueUrl=queue.dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs.get("ApproximateNumberOfMessages", 0)) + int(
        attrs.get("ApproximateNumberOfMessagesNotVisible", 0)
    )
