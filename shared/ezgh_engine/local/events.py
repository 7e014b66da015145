"""Lambda event shapes for SQS and DynamoDB stream records, as AWS delivers them."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from typing import Any

from ezgh_engine.local.emulator import REGION


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _message_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """boto3's `{StringValue, BinaryValue, DataType}` in Lambda's lowercase shape."""
    shaped: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues", [])),
        "binaryListValues": [_b64(v) for v in value.get("BinaryListValues", [])],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        shaped["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        shaped["binaryValue"] = _b64(value["BinaryValue"])
    return shaped


def sqs_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """One `Records` entry of a Lambda SQS event from a `ReceiveMessage` message."""
    body = message.get("Body", "")
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": body,
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: _message_attribute(value)
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message.get("MD5OfBody") or hashlib.md5(body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _attribute_value(value: Any) -> Any:
    """A DynamoDB AttributeValue with binary parts base64-encoded, as in a Lambda event."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    kind, inner = next(iter(value.items()))
    if kind == "B" and isinstance(inner, bytes | bytearray):
        return {"B": _b64(bytes(inner))}
    if kind == "BS":
        return {"BS": [_b64(bytes(v)) if isinstance(v, bytes | bytearray) else v for v in inner]}
    if kind == "M":
        return {"M": _image(inner)}
    if kind == "L":
        return {"L": [_attribute_value(v) for v in inner]}
    return value


def _image(image: dict[str, Any]) -> dict[str, Any]:
    return {name: _attribute_value(value) for name, value in image.items()}


def stream_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """One `Records` entry of a Lambda DynamoDB stream event from a `GetRecords` record."""
    source = record.get("dynamodb", {})
    shaped: dict[str, Any] = {
        "SequenceNumber": source["SequenceNumber"],
        "SizeBytes": source.get("SizeBytes", 0),
        "StreamViewType": source.get("StreamViewType", "NEW_AND_OLD_IMAGES"),
        "Keys": _image(source.get("Keys", {})),
    }
    created = source.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        shaped["ApproximateCreationDateTime"] = int(created.timestamp())
    elif created is not None:
        shaped["ApproximateCreationDateTime"] = created
    for image in ("NewImage", "OldImage"):
        if image in source:
            shaped[image] = _image(source[image])
    return {
        "eventID": record.get("eventID", ""),
        "eventName": record["eventName"],
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": record.get("awsRegion", REGION),
        "dynamodb": shaped,
        "eventSourceARN": stream_arn,
    }


def failed_ids(result: Any) -> list[str] | None:
    """The `itemIdentifier`s of a handler's `batchItemFailures` answer (None: all succeeded).

    Like Lambda, an answer that is not a dict or has no `batchItemFailures` means success.
    """
    if not isinstance(result, dict):
        return None
    failures = result.get("batchItemFailures")
    if not failures:
        return None
    return [str(item.get("itemIdentifier", "")) for item in failures if isinstance(item, dict)]


def failed_in_batch(result: Any, batch_ids: list[str]) -> set[str]:
    """Which of a batch's message (or sequence) IDs a handler's answer leaves to retry.

    As Lambda: an empty, missing or unknown `itemIdentifier` (or a failure that is not an
    object) makes the answer a complete failure: the whole batch is retried."""
    if not isinstance(result, dict) or not result.get("batchItemFailures"):
        return set()
    failures = result["batchItemFailures"]
    known = set(batch_ids)
    named = [f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures]
    if not isinstance(failures, list) or any(n not in known or not n for n in named):
        return known
    return {str(n) for n in named}
