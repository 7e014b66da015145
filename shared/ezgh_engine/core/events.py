"""One event model: which items of the `runs` table carry which run events.

A run's events are not all event items: to save writes, four item shapes carry them. This
module is the one table from shape to events; ListRunEvents (`runs_store.list_events`) and
the tests read events through it, and a new event type or a new folding changes it here.

| shape        | item                                      | its events                          |
|--------------|-------------------------------------------|-------------------------------------|
| `event`      | `EVT#<id>`                                | itself                              |
| `invocation` | `EVT#<startedId>` with `startedId` or     | `invocation.started` (`startedId`,  |
|              | `runEnd` (an invocation's outcome, its ID | `startedAt`), the outcome, the run's|
|              | in `eventId`; before: `EVT#<outcome id>`) | end (`runEnd`: `run.<status>`)      |
| `run`        | `RUN` with `startEvtId` and/or `lastOut`  | `run.started`; `lastOut`: the last  |
|              | (the commit of its last outcome)          | outcome, as an `invocation` item    |
| `step`       | `STEP#<id>` with `evtId` and/or `bOut`    | `step.completed`; `bOut`: its branch|
|              | (a parallel step's branch invocations     | invocations' events (each as an     |
|              | whose answers carried its ends)           | `invocation` item, with `stepId`)   |

Items are plain values (as `adapters.ddb` decodes them); events are the API's shape, each with
its `id`, by which a run's events sort; every event an item carries sorts at or after the
item's key (an invocation's item is keyed by its start), so items read in key order give the
events in order up to the last key read (`adapters.event_listing`). The run item's `lastOut` may also have been written
out as its event item already (the next outcome does so before replacing it, and a crash may
stop it there): one ID is one event (`events_after`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RUN_SK = "RUN"
STEP_PREFIX = "STEP#"
EVENT_PREFIX = "EVT#"

# The run item's copy of its last committed outcome event (`outcome_values`).
OUTCOME_ATTR = "lastOut"
# A parallel step's list of the outcome marks (as `lastOut`'s) of the branch invocations
# whose answers carried its end: the write of the end carries its invocation's events.
BRANCH_OUTCOMES_ATTR = "bOut"
# Attributes of an invocation's event item that are other events folded into it.
FOLDED = ("startedId", "startedAt", "runEnd")
# Set on a run item (`run_items.run_values`) whose invocation items are all keyed by their
# start (below): its events can be listed a page at a time (`adapters.event_listing`).
KEYED_BY_START = "ek"
# An invocation's item is keyed by its start (`EVT#<startedId>`), its earliest event, so every
# event an item carries sorts at or after its key (ListRunEvents reads items in key order);
# its outcome's own ID is then this attribute. (Items written before were keyed by the
# outcome's ID: `eventId` absent.)
EVENT_ID = "eventId"
# The attributes the events of run and step items are made of (a listing's projection).
MARK_ATTRIBUTES = (
    "sk",
    "stepId",
    "evtId",
    "evtAttempt",
    "endedAt",
    "deploymentId",
    "startEvtId",
    "createdAt",
    "workflow",
    "parentRunId",
    OUTCOME_ATTR,
    BRANCH_OUTCOMES_ATTR,
)

Item = dict[str, Any]
Event = dict[str, Any]


def _plain(values: Item) -> list[Event]:
    """An event item: every attribute but the keys, its ID from its sort key (or, on an
    invocation's item keyed by its start, `eventId`)."""
    event = {k: v for k, v in values.items() if k not in {"pk", "sk", "ttl", EVENT_ID, *FOLDED}}
    event["id"] = values.get(EVENT_ID) or values["sk"].removeprefix(EVENT_PREFIX)
    return [event]


def _invocation(values: Item) -> list[Event]:
    """An invocation's outcome item: its start before it, the run's end (if it ended the
    run) after it; one write instead of three."""
    events = _plain(values)
    event = events[0]
    if "startedId" in values:
        started = {**event, "id": values["startedId"], "type": "invocation.started"}
        started["at"] = values.get("startedAt")
        events.insert(0, started)
    end = values.get("runEnd")
    if isinstance(end, dict):
        ended = {"id": end["id"], "type": end["type"], "at": event.get("at")}
        ended["attempt"] = event.get("attempt")
        if "error" in end:
            ended["error"] = end["error"]
        events.append(ended)
    return events


def outcome_values(mark: dict[str, Any]) -> Item:
    """The event item (without `pk` and `ttl`) a run item's `lastOut` stands for: the values
    an outcome's event item has when written out, so it lists as an `invocation` item
    (`invocation.started`, the outcome, the run's end). `lastOut` uses short names: the run
    item is written several times a run and every write pays for its whole size."""
    values: Item = {
        "sk": EVENT_PREFIX + str(mark.get("v") or mark["i"]),
        EVENT_ID: str(mark["i"]),
        "type": f"invocation.{mark['k']}",
        "at": mark.get("a"),
        "attempt": int(mark.get("n", 1)),
        "invocationId": mark.get("v"),
        "startedId": mark.get("v"),  # minted when the invocation began: it sorts first
        "startedAt": mark.get("s"),
    }
    if mark.get("d") is not None:
        values["deploymentId"] = mark["d"]
    if isinstance(mark.get("e"), dict):
        values["runEnd"] = mark["e"]
    return values


def _run(values: Item) -> list[Event]:
    """The run item: its `run.started`, and its last outcome's events (`lastOut`)."""
    events = _run_started(values) if values.get("startEvtId") else []
    mark = values.get(OUTCOME_ATTR)
    if isinstance(mark, dict):
        events += _invocation(outcome_values(mark))
    return events


def _run_started(values: Item) -> list[Event]:
    started = {
        "id": values["startEvtId"],
        "type": "run.started",
        "at": values.get("createdAt"),
        "attempt": 1,
        "workflow": values.get("workflow"),
    }
    if values.get("parentRunId"):
        started["parentRunId"] = values["parentRunId"]
    return [started]


def _step(values: Item) -> list[Event]:
    """A step item: its `step.completed`, and the events of the branch invocations whose
    answers ended it (`BRANCH_OUTCOMES_ATTR`)."""
    events: list[Event] = []
    for mark in values.get(BRANCH_OUTCOMES_ATTR) or ():
        if isinstance(mark, dict):
            events += [{**e, "stepId": values["stepId"]} for e in _invocation(outcome_values(mark))]
    if not values.get("evtId"):
        return events
    event: Event = {
        "id": values["evtId"],
        "type": "step.completed",
        "at": values.get("endedAt"),
        "attempt": int(values.get("evtAttempt", 1)),
        "stepId": values["stepId"],
    }
    if values.get("deploymentId") is not None:
        event["deploymentId"] = values["deploymentId"]
    return sorted([*events, event], key=lambda e: str(e["id"]))


SHAPES: dict[str, Callable[[Item], list[Event]]] = {
    "event": _plain,
    "invocation": _invocation,
    "run": _run,
    "step": _step,
}


def shape_of(values: Item) -> str | None:
    """Which of the shapes the item is (None: it carries no event)."""
    sk = str(values.get("sk", ""))
    if sk.startswith(EVENT_PREFIX):
        return "invocation" if "startedId" in values or "runEnd" in values else "event"
    if sk == RUN_SK:
        return "run" if values.get("startEvtId") or values.get(OUTCOME_ATTR) else None
    if sk.startswith(STEP_PREFIX):
        return "step" if values.get("evtId") or values.get(BRANCH_OUTCOMES_ATTR) else None
    return None


def events_of(values: Item) -> list[Event]:
    """The events one item of a run carries, in the order they happened."""
    shape = shape_of(values)
    return SHAPES[shape](values) if shape is not None else []


def event_item(event: Event) -> Item:
    """The event item (without `pk` and `ttl`) that carries `event` alone (`_plain`'s
    inverse): how the events of an item about to be deleted are kept (a retried run's
    failed steps)."""
    values = {k: v for k, v in event.items() if k != "id"}
    return {**values, "sk": EVENT_PREFIX + str(event["id"])}


def branch_outcomes(step_events: list[Event] | tuple[Event, ...]) -> int:
    """How many branch invocations' marks (`BRANCH_OUTCOMES_ATTR`) a step item's events
    (`events_of`) came from: each gave one outcome event beside its `invocation.started`."""
    return sum(
        1
        for e in step_events
        if str(e.get("type", "")).startswith("invocation.") and e["type"] != "invocation.started"
    )


def events_after(found: list[Item], after: str) -> list[Event]:
    """The events `found` items carry with IDs after `after`, in ID order, one per ID (a
    run item's `lastOut` may also be written out as its event item)."""
    events = (e for values in found for e in events_of(values))
    unique = {str(e["id"]): e for e in events if str(e["id"]) > after}
    return sorted(unique.values(), key=lambda e: str(e["id"]))
