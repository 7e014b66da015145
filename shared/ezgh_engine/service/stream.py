"""The outbox: reactions to committed changes of the `runs` table, read from its stream.

A run write that leaves a reason to invoke unanswered and no lease sends an invocation; a step
that starts sleeping gets its timer. Reactions are idempotent, so duplicate or repeated records
(at-least-once delivery; moto may even show an upsert as two INSERTs) do no harm.
"""

from __future__ import annotations

import logging
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, messages

log = logging.getLogger(__name__)


def _image(record: dict[str, Any], which: str) -> dict[str, Any] | None:
    raw = record.get("dynamodb", {}).get(which)
    return ddb.from_item(raw) if raw else None


def wants_invocation(run: dict[str, Any] | None) -> bool:
    """A live run with an unanswered reason to invoke and no lease (not even a backoff)."""
    return bool(
        run
        and run.get("status") in ("running", "cancelling")
        and int(run.get("invokeSeq", 0)) > int(run.get("handledSeq", 0))
        and int(run.get("leaseUntil", 0)) == 0
    )


def _on_run(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    if not wants_invocation(new):
        return
    assert new is not None
    if wants_invocation(old) and old and old.get("invokeSeq") == new.get("invokeSeq"):
        return  # the earlier write already sent this one
    messages.send_invocation(str(new["id"]), int(new["invokeSeq"]))


def _on_step(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    if not new or new.get("status") != "sleeping" or not new.get("wakeAt"):
        return
    if old and old.get("status") == "sleeping":
        return
    messages.schedule_timer(str(new["runId"]), str(new["stepId"]), clock.parse_iso(new["wakeAt"]))


def handle_record(record: dict[str, Any]) -> None:
    """React to one stream record of the `runs` table."""
    if record.get("eventName") == "REMOVE":
        return
    new, old = _image(record, "NewImage"), _image(record, "OldImage")
    item = new or old or {}
    item_type = item.get("type")
    if item_type == "run":
        _on_run(old, new)
    elif item_type == "step":
        _on_step(old, new)


def handle_batch(records: list[dict[str, Any]]) -> list[str]:
    """Handle records in order; on the first failure answer its sequence number (and stop),
    so the event source retries from there."""
    for record in records:
        try:
            handle_record(record)
        except Exception:
            log.exception("stream record failed; retrying from it")
            return [str(record.get("dynamodb", {}).get("SequenceNumber", ""))]
    return []
