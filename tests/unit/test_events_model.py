"""One event model (core/events): the table from the `runs` table's item shapes to
the run events they carry, as ListRunEvents reads them."""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine.adapters import run_items
from ezgh_engine.core import events

PLAIN = {"pk": "RUN#r", "sk": "EVT#05", "ttl": 9, "type": "run.cancelRequested", "at": "t5"}
INVOCATION = {
    "pk": "RUN#r",
    "sk": "EVT#07",
    "ttl": 9,
    "type": "invocation.completed",
    "at": "t7",
    "attempt": 1,
    "invocationId": "i1",
    "startedId": "03",
    "startedAt": "t3",
    "runEnd": {"id": "08", "type": "run.failed", "error": {"code": "x"}},
}
RUN = {"sk": "RUN", "startEvtId": "01", "createdAt": "t1", "workflow": "w", "parentRunId": "p"}
STEP = {"sk": "STEP#a#1", "stepId": "a#1", "evtId": "04", "evtAttempt": 2, "endedAt": "t4"}

EXPECTED: list[tuple[dict[str, Any], str | None, list[dict[str, Any]]]] = [
    (PLAIN, "event", [{"id": "05", "type": "run.cancelRequested", "at": "t5"}]),
    (
        INVOCATION,
        "invocation",
        [
            {"id": "03", "type": "invocation.started", "at": "t3", "attempt": 1},
            {"id": "07", "type": "invocation.completed", "at": "t7", "attempt": 1},
            {"id": "08", "type": "run.failed", "at": "t7", "attempt": 1, "error": {"code": "x"}},
        ],
    ),
    (
        RUN,
        "run",
        [
            {
                "id": "01",
                "type": "run.started",
                "at": "t1",
                "attempt": 1,
                "workflow": "w",
                "parentRunId": "p",
            }
        ],
    ),
    (
        STEP,
        "step",
        [{"id": "04", "type": "step.completed", "at": "t4", "attempt": 2, "stepId": "a#1"}],
    ),
    ({"sk": "RUN"}, None, []),  # a run item written before `startEvtId`
    ({"sk": "STEP#b#1", "stepId": "b#1"}, None, []),  # a step not yet ended
    ({"sk": "RUNKEY#k"}, None, []),
]


@pytest.mark.parametrize(("item", "shape", "expected"), EXPECTED)
def test_each_item_shape_maps_to_its_events(
    item: dict[str, Any], shape: str | None, expected: list[dict[str, Any]]
) -> None:
    assert events.shape_of(item) == shape
    got = events.events_of(item)
    for event, want in zip(got, expected, strict=True):
        if "invocationId" in event:  # the outcome's own fields ride along on its events
            assert event.pop("invocationId") == "i1"
        assert event == want


def test_every_shape_of_the_table_is_covered() -> None:
    assert {shape for _, shape, _ in EXPECTED} - {None} == set(events.SHAPES)


def test_a_step_mark_without_an_attempt_is_attempt_one_and_a_deployment_rides_along() -> None:
    step = {"sk": "STEP#a#1", "stepId": "a#1", "evtId": "04", "deploymentId": "d"}
    assert events.events_of(step)[0]["attempt"] == 1
    assert events.events_of(step)[0]["deploymentId"] == "d"


def test_events_after_sorts_by_id_and_skips_what_a_page_held() -> None:
    found: list[dict[str, Any]] = [PLAIN, INVOCATION, RUN, STEP]
    ids = [e["id"] for e in events.events_after(found, "")]
    assert ids == ["01", "03", "04", "05", "07", "08"]
    assert [e["id"] for e in events.events_after(found, "04")] == ["05", "07", "08"]


def test_the_store_expands_event_items_with_the_model() -> None:
    assert run_items.expand_event(INVOCATION) == events.events_of(INVOCATION)
