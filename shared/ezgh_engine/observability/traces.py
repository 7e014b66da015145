"""The run's trace as X-Ray segment documents, sent with `PutTraceSegments`.

One trace per run (`core.trace_ids`: IDs derived from the run, so every function names the
same spans without storing them):

- the run: a segment `ezgh-run` from its start to its end (sent in progress at its start,
  whole at its end), annotated with its ID, app, workflow and status;
- each invocation: a segment `ezgh-invoker` under the run, with a subsegment for the app's
  request, whose ID is the parent the app is told (`traceparent`): the app's own spans join
  the run's trace there;
- each step attempt and each wait: a subsegment of the run, from its start to its end,
  marked `error` when it failed.

Only runs `EZGH_TRACE_SAMPLE_RATE` samples are recorded (0 by default deployed: X-Ray bills
each trace; 1 under `ezgh dev`). Documents are collected per handler call and sent at its
end (`flush`), 50 a request; a failure to send is logged, never raised: a trace is not worth
a retried batch.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any

from ezgh_engine import clock
from ezgh_engine.core import run_facts as rf
from ezgh_engine.core import trace_ids as ti

log = logging.getLogger(__name__)

ENV_SAMPLE_RATE = "EZGH_TRACE_SAMPLE_RATE"
BATCH = 50
RUN_SEGMENT = "ezgh-run"
INVOKER_SEGMENT = "ezgh-invoker"
_ERROR_STATUSES = frozenset({"failed", "timedOut", "unreachable", "invalid"})
_lock = threading.Lock()
_pending: list[str] = []


def sample_rate() -> float:
    try:
        return float(os.environ.get(ENV_SAMPLE_RATE) or 0)
    except ValueError:
        return 0.0


def recorded(run_id: str) -> bool:
    return ti.sampled(run_id, sample_rate())


def _seconds(iso: str) -> float:
    return round(clock.parse_iso(iso).timestamp(), 3)


def _name(text: str) -> str:
    """An X-Ray name: letters, digits, spaces and `_.:/%&#=+\\-@`, 200 characters."""
    return re.sub(r"[^\w .:/%&#=+\\\-@]", "_", text)[:200] or "_"


def run_segment(fact: rf.Fact) -> dict[str, Any] | None:
    """The run's segment: in progress at its start, whole at its end."""
    if not fact.created_at:
        return None
    segment: dict[str, Any] = {
        "name": RUN_SEGMENT,
        "id": ti.run_span(fact.run_id),
        "trace_id": ti.trace_id(fact.run_id, fact.created_at),
        "start_time": _seconds(fact.started_at or fact.created_at),
        "annotations": _annotations(fact),
    }
    if fact.kind == rf.RUN_ENDED:
        segment["end_time"] = _seconds(fact.at)
        segment.update(_marks(fact.status))
    else:
        segment["start_time"] = _seconds(fact.at)
        segment["in_progress"] = True
    return segment


def _annotations(fact: rf.Fact) -> dict[str, Any]:
    found = {
        "run_id": fact.run_id,
        "app_id": fact.app_id,
        "workflow": fact.workflow,
        "status": fact.status,
        "step_id": fact.step_id,
        "invocation_id": fact.invocation_id,
        "error_code": fact.error_code,
    }
    return {k: v for k, v in found.items() if v}


def _marks(status: str) -> dict[str, bool]:
    return {"error": True} if status in _ERROR_STATUSES else {}


def step_subsegment(fact: rf.Fact, created_at: str) -> dict[str, Any] | None:
    """A step attempt's (or a wait's) subsegment of the run, from its start to its end."""
    if not fact.started_at or not fact.step_id:
        return None
    return {
        "type": "subsegment",
        "name": _name(f"{fact.step_kind or 'step'} {fact.step_name or fact.step_id}"),
        "id": ti.step_span(fact.run_id, fact.step_id, fact.attempt),
        "trace_id": ti.trace_id(fact.run_id, created_at),
        "parent_id": ti.run_span(fact.run_id),
        "start_time": _seconds(fact.started_at),
        "end_time": _seconds(fact.at),
        "annotations": {**_annotations(fact), "attempt": fact.attempt},
        **({"error": True} if fact.status in ("failed", "retrying") else {}),
    }


def invocation_segment(fact: rf.Fact, app_name: str, began: str) -> dict[str, Any]:
    """An invocation's segment under the run (from `began`, when the invoker began, to the
    answer), with the app's request (from the fact's `started_at`) as its subsegment."""
    assert fact.created_at and fact.invocation_id and fact.started_at
    app: dict[str, Any] = {
        "name": _name(app_name),
        "id": ti.app_span(fact.run_id, fact.invocation_id),
        "namespace": "remote",
        "start_time": _seconds(fact.started_at),
        "end_time": _seconds(fact.at),
        **_marks(fact.status),
    }
    return {
        "name": INVOKER_SEGMENT,
        "id": ti.invocation_span(fact.run_id, fact.invocation_id),
        "trace_id": ti.trace_id(fact.run_id, fact.created_at),
        "parent_id": ti.run_span(fact.run_id),
        "start_time": _seconds(began),
        "end_time": _seconds(fact.at),
        "annotations": _annotations(fact),
        "subsegments": [app],
        **_marks(fact.status),
    }


def add(document: dict[str, Any] | None) -> None:
    """Keep a segment document to send at the end of this handler call."""
    if document is None:
        return
    with _lock:
        _pending.append(json.dumps(document, separators=(",", ":")))


def pending() -> list[str]:
    with _lock:
        return list(_pending)


def flush() -> None:
    """Send what was kept (`PutTraceSegments`, `BATCH` a request); failures are logged."""
    with _lock:
        documents = list(_pending)
        _pending.clear()
    if not documents:
        return
    from ezgh_engine.adapters import xray

    for start in range(0, len(documents), BATCH):
        try:
            xray.put_segments(documents[start : start + BATCH])
        except Exception as error:  # a trace is never worth failing the work it shows
            log.warning("could not send %d trace segment(s): %s", len(documents), error)
