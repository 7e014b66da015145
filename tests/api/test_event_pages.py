"""ListRunEvents reads about a page per page, and lists exactly what reading the whole run
lists, in the same order.

Before, every page read every event item and every step of the run (a step carries its own
`step.completed`, and steps are keyed by step, not by when they ended): listing a run of N
steps a page at a time read O(N²). Now invocation items are keyed by their start, the run's
step events are kept in order as segments once they are final, and a page reads event
items, segments and the run item; only a page past the segments reads the steps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import aws, run_writes, runs_store
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import events as core_events
from ezgh_engine.core import tokens
from ezgh_engine.core.models import Run
from ezgh_engine.protocol import outcomes as rules
from ezgh_engine.service import outcomes

from tests.api.steps_helpers import complete, lease_token, start, steps_call, stored_run

INVOCATIONS = 4
STEPS_EACH = 40  # 160 steps: segments of them are kept once final


def _answer(run: Run, token: str, answer: dict[str, Any]) -> None:
    claims = tokens.verify(config.settings().token_secret, token, clock.now_ms())
    leased = runs_store.get_run(run.id)
    assert leased is not None
    outcomes.apply_answer(
        leased,
        leased.invoke_seq,
        rules.parse(answer, clock.now()),
        answer.get("ops"),
        claims=claims,
        invocation_id=ids.time_ordered_id(),
        started_at=clock.iso(clock.now()),
    )


def _invocation(run: Run, seq: int, first: int, last: bool) -> None:
    """One invocation: STEPS_EACH steps through the steps function, each end riding the
    next start, then a one-hour sleep (or, the last time, the run's end)."""
    token = lease_token(run, seq)
    inline = steps_call(token, [start(f"s{first}#1")])[1]["results"][0].get("inline")
    for i in range(first, first + STEPS_EACH - 1):
        status, body, _ = steps_call(token, [complete(f"s{i}#1", i, inline), start(f"s{i + 1}#1")])
        assert status == 200, body
        inline = body["results"][1].get("inline")  # started riding that end
    held = [complete(f"s{first + STEPS_EACH - 1}#1", first + STEPS_EACH - 1, inline)]
    if last:
        _answer(run, token, {"outcome": "completed", "output": "done", "ops": held})
        return
    nap = {"stepId": f"nap{seq}#1", "name": f"nap{seq}", "kind": "sleep", "seconds": 3600}
    _answer(run, token, {"outcome": "suspended", "waits": [nap], "ops": held})


def _wake(run: Run, seq: int, skip: clock.SkipClock) -> None:
    skip.advance(timedelta(hours=1))
    marks = {"evtId": ids.time_ordered_id(), "evtAttempt": 1}
    step = f"nap{seq}#1"
    found = runs_store.get_run(run.id)
    assert found is not None
    wake_at = next(s.wake_at for s in found.steps if s.id == step) or ""
    at = clock.iso(clock.now())
    assert inv.wake_sleep(run.id, step, wake_at=wake_at, ended_at=at, marks=marks) == "woke"


@pytest.fixture()
def long_run(aws_env: None, skip_clock: clock.SkipClock) -> Run:
    """A run of 160 steps over four invocations an hour apart (its steps' events final
    by the time each later invocation commits), ended."""
    # IDs are minted in increasing order per process: past any an earlier test minted at a
    # time it skipped to, so that this run's IDs follow this clock.
    minted_ms = ids._last_order[0]
    if minted_ms >= clock.now_ms():
        skip_clock.advance(timedelta(milliseconds=minted_ms - clock.now_ms() + 1))
    run = stored_run()
    for n in range(INVOCATIONS):
        _invocation(run, n + 1, n * STEPS_EACH, last=n == INVOCATIONS - 1)
        if n < INVOCATIONS - 1:
            _wake(run, n + 1, skip_clock)
    return run


def _whole(run: Run) -> list[dict[str, Any]]:
    """The run's events as reading all of it gives them (the reference)."""
    everything = ws.query_pk(items.run_pk(run.id))
    return core_events.events_after(everything, "")


def _pages(run: Run, limit: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Every page in turn; the events, and the bytes each page read."""
    listed: list[dict[str, Any]] = []
    read: list[int] = []
    cursor = None
    while True:
        seen: list[int] = []

        def count(record: dict[str, Any], seen: list[int] = seen) -> None:
            if record["service"] == "dynamodb":
                seen.append(int(record["response_bytes"]))

        stop = aws.observe(count)
        try:
            events, cursor = runs_store.list_events(run.id, limit=limit, cursor=cursor)
        finally:
            stop()
        listed.extend(events)
        read.append(sum(seen))
        if cursor is None:
            return listed, read


def test_pages_list_the_whole_run_in_order_reading_about_a_page_each(long_run: Run) -> None:
    """Pages of any size list exactly what reading the whole run lists, in order. The
    invoker kept the final step events as segments as the run went (each once, in order),
    and a page up to their end reads its event items, a segment and the run item; only the
    pages past it (a run's last 16 minutes of step events) read the steps."""
    expected = _whole(long_run)
    assert len(expected) > INVOCATIONS * STEPS_EACH
    for limit in (7, 1000):
        listed, _ = _pages(long_run, limit)
        assert listed == expected
    run = runs_store.get_run(long_run.id, with_steps=False)
    assert run is not None and run.events_through is not None
    kept = [v for v in ws.query_pk(items.run_pk(long_run.id)) if str(v["sk"]).startswith("EVS#")]
    in_segments = [e["id"] for v in kept for e in run_writes.segment_events(v)]
    step_events = [e for e in expected if e["type"] == "step.completed"]
    final = [e["id"] for e in step_events if e["id"] <= run.events_through]
    assert sorted(in_segments) == final and len(final) >= run_writes.SEGMENT_MIN_EVENTS
    limit = 25
    listed, read = _pages(long_run, limit)
    assert listed == expected
    kept_events = sum(1 for e in expected if e["id"] <= run.events_through)
    before = read[: kept_events // limit - 1]  # pages whose events (and the next) are kept
    past = read[kept_events // limit + 1 :]
    assert len(before) >= 3 and past
    assert max(before) * 4 < min(past), read  # a page, not the run
    assert max(before) < 12_000, read


def test_a_listing_past_the_segments_keeps_the_final_ones(
    long_run: Run, skip_clock: clock.SkipClock
) -> None:
    """The last invocation's steps were not final when it ended; a listing after they are
    reads the steps once, keeps them, and the next listing reads only segments."""
    before = runs_store.get_run(long_run.id, with_steps=False)
    assert before is not None
    skip_clock.advance(timedelta(minutes=17))
    first, _ = _pages(long_run, 1000)
    after = runs_store.get_run(long_run.id, with_steps=False)
    assert after is not None and (after.events_through or "") > (before.events_through or "")
    second, _ = _pages(long_run, 1000)
    assert second == first == _whole(long_run)


def test_a_run_from_before_keyed_items_lists_by_reading_it_whole(aws_env: None) -> None:
    """A run item without the mark of keyed invocation items (written before them) is
    listed as before: the same events, whatever the keys."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("a#1")])
    _answer(run, token, {"outcome": "completed", "output": 1, "ops": [complete("a#1", 1)]})
    aws.client("dynamodb").update_item(
        TableName=config.settings().runs_table,
        Key=items.run_key(run.id),
        UpdateExpression="REMOVE ek",
    )
    listed, _ = _pages(run, 2)
    assert listed == _whole(run)
    assert [e["type"] for e in listed][-2:] == ["invocation.completed", "run.completed"]
