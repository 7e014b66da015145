"""What every part of the write path shares: DynamoDB's limits, the items' lifetimes, the
errors of a refused write, where a value goes, the client."""

from __future__ import annotations

import json
import zlib
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.errors import ValidationError

# DynamoDB's own limits (the Developer Guide's "Service, account, and table quotas").
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
MAX_ITEM_BYTES = 400 * 1024
# Steps and events outlive the longest run (a year) plus retention (runs_store's).
RETENTION_SECONDS = 30 * 24 * 3600
CHILD_ITEM_TTL_SECONDS = 366 * 24 * 3600 + RETENTION_SECONDS

STALE = "the invocation's lease was taken over or the run ended"


class AlreadyRecorded(Exception):
    """A step's condition failed: it holds an outcome already (or another attempt's).

    `index` is the position of the refused intent among those written (0-based, a lease
    check not counted)."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(f"step write {index} refused")
        self.index = index


class WriteTooLarge(ValidationError):
    """A write past DynamoDB's limits, refused before anything was written."""


def _ddb() -> Any:
    return client("dynamodb")


def _table() -> str:
    return settings().runs_table


def _expires() -> int:
    return int(clock.now().timestamp()) + CHILD_ITEM_TTL_SECONDS


def _live_values() -> dict[str, Any]:
    return {k.removeprefix(":"): v for k, v in items.LIVE_VALUES.items()}


def inline(text: str) -> bool:
    """Whether a JSON value's text is kept in its item (else in the run's payloads)."""
    return len(text.encode()) <= settings().payload_inline_bytes


def _pack(value: Any) -> bytes:
    """Values as compressed JSON (a binary attribute): a launch's items repeat their names
    and most values, so a wide one writes a fraction of the units."""
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)


def _unpack(raw: Any) -> Any:
    return json.loads(zlib.decompress(bytes(getattr(raw, "value", raw))))
