"""A run's step events kept in order once final (segment items), so that ListRunEvents
reads about a page per page (`adapters.event_listing`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import ids
from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.expressions import Update
from ezgh_engine.adapters.intents import EventSegments, NewItem
from ezgh_engine.adapters.run_writes._base import _expires, _pack, _table, _unpack
from ezgh_engine.adapters.run_writes._writing import _single, write_each

# A step's `step.completed` is carried by its own item (no event item: one write a step), and
# step items are keyed by step ID, not by when they ended: listing events in order would read
# every step for every page. So the events older than `EVENTS_FINAL_AFTER` (when no write
# minted before can still land: no function runs longer than 15 minutes) are also kept in
# segment items (`EVS#<through>`) in order, and the run item says up to where
# (`EVENTS_THROUGH_ATTR`): a listing reads those in order and the steps only past them.
EVENTS_PREFIX = "EVS#"
EVENTS_THROUGH_ATTR = "evB"
EVENTS_FINAL_AFTER_MS = 16 * 60 * 1000
# A segment is written once this many final events are not kept yet, at most this many each.
SEGMENT_MIN_EVENTS = 100
SEGMENT_MAX_EVENTS = 250  # about 7 KB compressed: what a page of 100 events reads of them


def events_final_through(now_ms: int) -> str:
    """The event ID up to which no event can still be written (see `EVENTS_FINAL_AFTER_MS`)."""
    return ids.time_bound(now_ms - EVENTS_FINAL_AFTER_MS)


def event_segments(
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    kept_through: str,
    now_ms: int,
    *,
    at_least: int = SEGMENT_MIN_EVENTS,
) -> EventSegments | None:
    """Segments of the step `events` (as `core.events` gives them) after `kept_through`
    and final now, when there are `at_least` of them (None: not yet)."""
    through = events_final_through(now_ms)
    fresh = sorted(
        (e for e in events if kept_through < str(e["id"]) <= through), key=lambda e: str(e["id"])
    )
    if len(fresh) < max(1, at_least) or through <= kept_through:
        return None
    segments: list[NewItem] = []
    low = kept_through
    for start in range(0, len(fresh), SEGMENT_MAX_EVENTS):
        part = fresh[start : start + SEGMENT_MAX_EVENTS]
        last = start + SEGMENT_MAX_EVENTS >= len(fresh)
        high = through if last else str(part[-1]["id"])
        segments.append(
            NewItem(
                {
                    "pk": items.run_pk(run_id),
                    "sk": EVENTS_PREFIX + high,
                    "type": "events",
                    "from": low,
                    "events": _pack(part),
                    "ttl": _expires(),
                },
                only_new=False,
            )
        )
        low = high
    return EventSegments(tuple(segments), through)


def keep_events(run_id: str, segments: EventSegments) -> None:
    """Write `segments` and move the run item's mark to their end (only forward): what a
    listing that read past the mark found final (the invoker keeps them as a run goes)."""
    write_each(segments.items)
    update = (
        Update()
        .set(EVENTS_THROUGH_ATTR, segments.through)
        .where("attribute_exists(pk)")
        .where(
            f"attribute_not_exists({EVENTS_THROUGH_ATTR}) OR {EVENTS_THROUGH_ATTR} < :through",
            through=segments.through,
        )
    )
    try:
        _single({"Update": update.request(TableName=_table(), Key=items.run_key(run_id))})
    except ClientError as exc:
        if not ddb.is_condition_failure(exc):
            raise


def segment_events(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events a segment item keeps."""
    return list(_unpack(raw["events"]))
