"""The stream's reader of what runs do: every committed change of a run or step item becomes
the facts it shows (`core.run_facts`), emitted once here (`observability.emit`).

A second reader of the `runs` stream, beside the outbox (`service.stream`), on purpose:

- it needs the changes the outbox's filter leaves out (a step that ends, a run item with a
  lease), and widening that filter would cost the outbox an invocation for each;
- it waits for a batch (the mapping's batching window, topology `OBSERVE_SOURCE`), so a
  busy stack pays one invocation for many changes;
- it never holds the outbox: its failures (a trace that cannot be sent) are logged, and its
  batch is never retried, so no metric is counted twice by a retry of its own.

A step's trace segment needs its run's creation time (the trace ID holds it): a run item in
the same batch gives it, else one read of the run item per run and batch, and only for the
runs whose trace is recorded.
"""

from __future__ import annotations

import logging
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import ddb, runs_store
from ezgh_engine.core import run_facts as rf
from ezgh_engine.observability import emit, logs, traces

log = logging.getLogger(__name__)


def _image(record: dict[str, Any], which: str) -> dict[str, Any] | None:
    raw = record.get("dynamodb", {}).get(which)
    return ddb.from_item(raw) if raw else None


def _facts(record: dict[str, Any], now: str) -> list[rf.Fact]:
    if record.get("eventName") == "REMOVE":
        return []
    return rf.facts_of(_image(record, "OldImage"), _image(record, "NewImage"), now=now)


def _created_at(fact: rf.Fact, known: dict[str, str | None]) -> str | None:
    """When the fact's run was created (for its trace ID), read once per run and batch."""
    if fact.run_id not in known:
        run = runs_store.get_run(fact.run_id, with_steps=False)
        known[fact.run_id] = run.created_at if run is not None else None
    return known[fact.run_id]


def _with_run_times(facts: list[rf.Fact]) -> list[rf.Fact]:
    """The facts, each step fact of a recorded trace with its run's creation time."""
    from dataclasses import replace

    known: dict[str, str | None] = {f.run_id: f.created_at for f in facts if f.created_at}
    out = []
    for fact in facts:
        if fact.step_id and not fact.created_at and traces.recorded(fact.run_id):
            fact = replace(fact, created_at=_created_at(fact, known))
        out.append(fact)
    return out


def handle_batch(records: list[dict[str, Any]]) -> None:
    """Emit the facts of a batch of stream records (never raises, never asks for a retry)."""
    now = clock.iso(clock.now())
    facts: list[rf.Fact] = []
    for record in records:
        try:
            facts.extend(_facts(record, now))
        except Exception:
            log.warning("could not read a stream record's facts", exc_info=True)
    try:
        facts = _with_run_times(facts)
    except Exception:
        log.warning("could not read the runs of a batch's steps", exc_info=True)
    with emit.flushing():
        for fact in facts:
            with logs.bound(**fact.ids):
                emit.record(fact)
