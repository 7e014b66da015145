"""Small helpers over the low-level DynamoDB client: (de)serializing items and reading the
reasons a conditional write or transaction was refused."""

from __future__ import annotations

import base64
import json
import zlib
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from ezgh_engine import ids
from ezgh_engine.adapters import aws
from ezgh_engine.config import settings
from ezgh_engine.core import sealing
from ezgh_engine.errors import TransientError, ValidationError

CURSOR_PREFIX = "c1."  # the sealed form; a cursor of the first (clear) form is refused

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


def _value_bytes(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode("utf-8", "surrogatepass"))
    if kind == "N":
        digits = len(str(inner).lstrip("-").replace(".", "").lstrip("0")) or 1
        return (digits + 1) // 2 + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(_value_bytes({kind[0]: v}) for v in inner)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_bytes(v) for k, v in inner.items())
    return len(str(inner))


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it against its 400 KB limit (attribute names and
    values, in the low-level format)."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


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
    """Turn throttling (a transaction cancelled for capacity included: `aws.is_throttle`)
    and transaction conflicts into a retryable engine error."""
    code = error_code(exc)
    if (
        aws.is_throttle(exc)
        or code in {"InternalServerError", "TransactionConflictException"}
        or "TransactionConflict" in cancellation_codes(exc)
    ):
        raise TransientError(f"DynamoDB is busy ({code}); try again") from exc


def updated_if(client: Any, **request: Any) -> bool:
    """One conditional UpdateItem (`request` as boto3 takes it): False, nothing written, when
    its condition refused it; throttles and conflicts as `raise_transient` says."""
    return _written_if(client.update_item, request)


def deleted_if(client: Any, **request: Any) -> bool:
    """One conditional DeleteItem, as `updated_if` makes an UpdateItem."""
    return _written_if(client.delete_item, request)


def _written_if(call: Any, request: dict[str, Any]) -> bool:
    try:
        call(**request)
    except ClientError as exc:
        if is_condition_failure(exc):
            return False
        raise_transient(exc)
        raise
    return True


def _cursor_key() -> bytes:
    return sealing.derive_key(settings().token_secret, "cursor")


def _cursor_aad(scope: str) -> bytes:
    return b"cursor\x1f" + scope.encode("utf-8", "surrogatepass")


def encode_cursor(key: dict[str, Any], *, scope: str) -> str:
    """An opaque cursor for a page's last key: sealed (AES-GCM) under the engine's secret and
    bound to `scope` (the project and query it pages), so a client can neither read the
    table's keys from it nor forge, alter or reuse it for another query."""
    plain = zlib.compress(json.dumps(key, separators=(",", ":")).encode())
    nonce = sealing.nonce_from(ids.secret_token(16))
    sealed = sealing.seal(_cursor_key(), plain, _cursor_aad(scope), nonce)
    return CURSOR_PREFIX + base64.urlsafe_b64encode(sealed).rstrip(b"=").decode()


def decode_cursor(cursor: str, *, scope: str) -> dict[str, Any]:
    """The key `encode_cursor` sealed for this `scope`; `ValidationError` (400) for anything
    else: altered, another project's or another query's, made before a secret rotation."""
    invalid = ValidationError("cursor is not valid: pass the nextCursor of this same query")
    if not isinstance(cursor, str) or not cursor.isascii() or not cursor.startswith(CURSOR_PREFIX):
        raise invalid
    text = cursor.removeprefix(CURSOR_PREFIX)
    try:
        sealed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise invalid from None
    plain = sealing.unseal(_cursor_key(), sealed, _cursor_aad(scope))
    if plain is None:
        raise invalid
    try:
        key = json.loads(zlib.decompress(plain))
    except (ValueError, zlib.error):
        raise invalid from None
    if not isinstance(key, dict) or not all(isinstance(v, dict) for v in key.values()):
        raise invalid
    return key
