"""Small helpers over the low-level DynamoDB client: (de)serializing items and reading the
reasons a conditional write or transaction was refused."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from ezgh_engine.errors import TransientError, ValidationError

_ser = TypeSerializer()
_de = TypeDeserializer()


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB item from plain values; None values are left out."""
    return {k: _ser.serialize(v) for k, v in values.items() if v is not None}


def to_attr(value: Any) -> Any:
    return _ser.serialize(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | set):
        return [_plain(v) for v in value]
    return value


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    """Plain values from a DynamoDB item (numbers as int or float)."""
    return {k: _plain(_de.deserialize(v)) for k, v in item.items()}


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_condition_failure(exc: ClientError) -> bool:
    return error_code(exc) == "ConditionalCheckFailedException"


def cancellation_codes(exc: ClientError) -> list[str]:
    """Per-item reason codes of a cancelled transaction ('None' where the item was fine)."""
    if error_code(exc) != "TransactionCanceledException":
        return []
    reasons = exc.response.get("CancellationReasons") or []
    codes = [str(r.get("Code", "None")) for r in reasons]
    if not codes:  # some emulators only put the reasons in the message
        message = str(exc.response.get("Error", {}).get("Message", ""))
        inner = message.partition("[")[2].rpartition("]")[0]
        codes = [c.strip() for c in inner.split(",")] if inner else []
    return codes


def raise_transient(exc: ClientError) -> None:
    """Turn throttling and transaction conflicts into a retryable engine error."""
    code = error_code(exc)
    if code in {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "TransactionConflictException",
    } or "TransactionConflict" in cancellation_codes(exc):
        raise TransientError(f"DynamoDB is busy ({code}); try again") from exc


def encode_cursor(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


def decode_cursor(cursor: str) -> dict[str, Any]:
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError):
        raise ValidationError("cursor is not valid") from None
    if not isinstance(key, dict) or not all(isinstance(v, dict) for v in key.values()):
        raise ValidationError("cursor is not valid")
    return key
