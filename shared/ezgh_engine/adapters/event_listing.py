"""ListRunEvents: a page of a run's events in ID order, reading about a page of items.

A run's events are carried by four item shapes (`core.events`): event items (`EVT#<id>`; an
invocation's item is keyed by its start, its earliest event, so every event an item carries
sorts at or after its key), the run item, and step items (`step.completed`, keyed by step,
not by when they ended). A page merges three sources, each read lazily in ID order until
every event up to the page's end is known:

- event items in key order, from the cursor's `from` (the first item whose events the last
  page did not all give out);
- step events: the segments that keep them in order up to the run item's mark
  (`run_writes.event_segments`, written as the run goes and by listings), then, past the
  mark, the steps themselves, read whole once (a listing that finds enough final events
  there keeps them as segments for the next);
- the run item (read every page: its `run.started` and its last outcome).

A page before the mark reads O(page) items; only a page past it reads the run's steps. A
run from before invocation items were keyed by their start (no `core.events.KEYED_BY_START`
on its item) is listed as it was: every page reads the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, run_writes
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core import events as core_events
from ezgh_engine.core.models import ENDED_STATUSES

Event = dict[str, Any]
_END = "\uffff"  # after every ID: a source read to its end
_LAST = "~"  # sorts after every hex digit: the upper end of a range of IDs


@dataclass(frozen=True)
class Page:
    """A page of events; `after` and `start` place the next one (None: the last page)."""

    events: list[Event]
    after: str | None = None
    start: str | None = None


def _query(**kwargs: Any) -> dict[str, Any]:
    answer: dict[str, Any] = client("dynamodb").query(
        TableName=settings().runs_table, ConsistentRead=True, **kwargs
    )
    return answer


def _read_all(**kwargs: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while True:
        answer = _query(**kwargs)
        found.extend(ddb.from_item(i) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return found
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


class _EventItems:
    """The run's event items in key order, from `start` (inclusive) on."""

    def __init__(self, run_id: str, start: str, page: int) -> None:
        self.pk = items.run_pk(run_id)
        self.start = start
        self.page = page
        self.last = ""  # the key of the last item read
        self.done = False
        self.exclusive: dict[str, Any] | None = None
        self.keys: dict[str, str] = {}  # event ID -> the key of the item carrying it

    @property
    def frontier(self) -> str:
        """Every event these items carry up to here is known (later items' events sort
        at or after their keys)."""
        return _END if self.done else self.last

    def read(self) -> list[Event]:
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": {"S": self.pk},
                ":lo": {"S": items.EVENT_PREFIX + self.start},
                ":hi": {"S": items.EVENT_PREFIX + _LAST},
            },
            "Limit": self.page,
        }
        if self.exclusive:
            kwargs["ExclusiveStartKey"] = self.exclusive
        answer = _query(**kwargs)
        found: list[Event] = []
        for values in (ddb.from_item(i) for i in answer.get("Items", [])):
            self.last = str(values["sk"]).removeprefix(items.EVENT_PREFIX)
            for event in core_events.events_of(values):
                self.keys.setdefault(str(event["id"]), self.last)
                found.append(event)
        self.exclusive = answer.get("LastEvaluatedKey")
        self.done = self.exclusive is None
        return found


class _StepEvents:
    """Step events: from their segments up to the run item's mark, then from the steps."""

    def __init__(self, run_id: str, after: str, kept_through: str, ended: bool) -> None:
        self.run_id = run_id
        self.kept_through = kept_through
        self.ended = ended  # no step event will come: even a few final ones are kept
        self.next_segment = after
        self.tail_read = False

    @property
    def frontier(self) -> str:
        if self.tail_read:
            return _END
        return min(self.next_segment, self.kept_through)

    def read(self) -> list[Event]:
        if self.next_segment < self.kept_through:
            return self._segments()
        self.tail_read = True
        return self._tail()

    def _segments(self) -> list[Event]:
        answer = _query(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": {"S": items.run_pk(self.run_id)},
                ":lo": {"S": run_writes.EVENTS_PREFIX + self.next_segment + "\x00"},
                ":hi": {"S": run_writes.EVENTS_PREFIX + self.kept_through},
            },
            Limit=1,
        )
        found = [ddb.from_item(i) for i in answer.get("Items", [])]
        if not found:  # no segment left below the mark: the steps next
            self.next_segment = self.kept_through
            return []
        self.next_segment = str(found[-1]["sk"]).removeprefix(run_writes.EVENTS_PREFIX)
        return [e for raw in found for e in run_writes.segment_events(raw)]

    def _tail(self) -> list[Event]:
        """The step events past the mark: every step read once. Final ones, when enough,
        are kept as segments, so that the next listing reads them in order."""
        found = _read_all(
            KeyConditionExpression="pk = :pk AND sk > :run",
            ExpressionAttributeValues={
                ":pk": {"S": items.run_pk(self.run_id)},
                ":run": {"S": items.RUN_SK},
            },
            ProjectionExpression=", ".join(core_events.MARK_ATTRIBUTES),
        )
        events = [e for values in found for e in core_events.events_of(values)]
        tail = [e for e in events if str(e["id"]) > self.kept_through]
        at_least = 1 if self.ended else run_writes.SEGMENT_MIN_EVENTS
        kept = run_writes.event_segments(
            self.run_id, tail, self.kept_through, clock.now_ms(), at_least=at_least
        )
        if kept is not None:
            run_writes.keep_events(self.run_id, kept)
        return tail


def page(run_id: str, *, after: str, start: str | None, limit: int) -> Page:
    """The first `limit` events after `after` in ID order, one per ID, their event items
    read from `start` (the cursor's; `after` when None)."""
    raw = client("dynamodb").get_item(
        TableName=settings().runs_table, Key=items.run_key(run_id), ConsistentRead=True
    )
    run_values = ddb.from_item(raw["Item"]) if "Item" in raw else {}
    if not run_values.get(core_events.KEYED_BY_START):
        return _whole_run(run_id, after, limit)
    known: dict[str, Event] = {str(e["id"]): e for e in core_events.events_of(run_values)}
    kept = str(run_values.get(run_writes.EVENTS_THROUGH_ATTR) or "")
    event_items = _EventItems(run_id, after if start is None else start, limit + 1)
    ended = run_values.get("status") in ENDED_STATUSES
    steps = _StepEvents(run_id, after, kept, ended)
    sources: list[_EventItems | _StepEvents] = [event_items, steps]
    while True:
        frontier = min(s.frontier for s in sources)
        ready = sorted(i for i in known if after < i <= frontier)
        if len(ready) > limit or frontier == _END:
            break
        for event in min(sources, key=lambda s: s.frontier).read():
            known.setdefault(str(event["id"]), event)
    if len(ready) <= limit:
        return Page([known[i] for i in ready])
    last = ready[limit - 1]
    # The next page reads event items again from the first one not given out whole.
    pending = [key for event_id, key in event_items.keys.items() if event_id > last]
    return Page([known[i] for i in ready[:limit]], last, min([last, *pending]))


def _whole_run(run_id: str, after: str, limit: int) -> Page:
    """Every page reads the run's events whole (runs from before `KEYED_BY_START`)."""
    found = _read_all(
        KeyConditionExpression="pk = :pk AND begins_with(sk, :evt)",
        ExpressionAttributeValues={
            ":pk": {"S": items.run_pk(run_id)},
            ":evt": {"S": items.EVENT_PREFIX},
        },
    )
    found += _read_all(
        KeyConditionExpression="pk = :pk AND sk >= :run",
        ProjectionExpression=", ".join(core_events.MARK_ATTRIBUTES),
        ExpressionAttributeValues={
            ":pk": {"S": items.run_pk(run_id)},
            ":run": {"S": items.RUN_SK},
        },
    )
    events = core_events.events_after(found, after)
    if len(events) <= limit:
        return Page(events)
    return Page(events[:limit], str(events[limit - 1]["id"]), None)
