"""One fact in, everything it shows out: metrics, a log line, a `ezgh dev` line, a trace
segment (see the package's doc). The callers are the only emission points: the stream's
reader of run and step changes (`service.observe`) and the invoker (`service.invoker`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from ezgh_engine.core import run_facts as rf
from ezgh_engine.observability import metrics, names, progress, sinks, traces

log = logging.getLogger(__name__)

_FAILED_INVOCATIONS = frozenset({"unreachable", "timedOut", "invalid"})


def _metrics(fact: rf.Fact) -> None:
    took = fact.duration_ms
    if fact.kind == rf.RUN_STARTED:
        metrics.add(names.RUNS_STARTED, 1)
    elif fact.kind == rf.RUN_ENDED:
        ended = names.RUNS_ENDED.get(fact.status)
        if ended is not None:
            metrics.add(ended, 1)
        if took is not None:
            metrics.add(names.RUN_DURATION, took)
    elif fact.kind in (rf.STEP_ENDED, rf.STEP_RETRYING) and fact.step_kind == "run":
        if took is not None:
            metrics.add(names.STEP_DURATION, took)
        if fact.kind == rf.STEP_RETRYING:
            metrics.add(names.STEP_RETRIES, 1)
    elif fact.kind == rf.INVOCATION:
        if fact.status in _FAILED_INVOCATIONS:
            metrics.add(names.INVOCATION_FAILURES, 1)
        elif took is not None:
            metrics.add(names.INVOCATION_LATENCY, took)


def _trace(fact: rf.Fact, app_name: str | None, invocation_began: str | None) -> None:
    if not traces.recorded(fact.run_id):
        return
    if fact.kind in (rf.RUN_STARTED, rf.RUN_ENDED):
        traces.add(traces.run_segment(fact))
    elif fact.kind in (rf.STEP_ENDED, rf.STEP_RETRYING) and fact.created_at:
        traces.add(traces.step_subsegment(fact, fact.created_at))
    elif fact.kind == rf.INVOCATION and fact.created_at and fact.started_at:
        began = invocation_began or fact.started_at
        traces.add(traces.invocation_segment(fact, app_name or "app", began))


def _level(fact: rf.Fact) -> int:
    """A run's start and end, its invocations and whatever failed are INFO; a step that
    completed and a wait that began are DEBUG (`LOG_LEVEL=DEBUG` shows them): CloudWatch
    Logs bills each line's bytes, and a run has a line per step."""
    quiet = fact.kind == rf.STEP_WAITING or (
        fact.kind == rf.STEP_ENDED and fact.status == "completed"
    )
    return logging.DEBUG if quiet else logging.INFO


def record(
    fact: rf.Fact, *, app_name: str | None = None, invocation_began: str | None = None
) -> None:
    """Emit `fact` (for an invocation: its app's name, and when the invocation began; the
    fact's `started_at` is when its request to the app began). Never raises: what shows
    the work must not fail it."""
    try:
        _metrics(fact)
        line = progress.line(fact, app_name=app_name)
        took = fact.duration_ms
        extra: dict[str, object] = {**fact.ids, "fact": fact.kind, "status": fact.status}
        if took is not None:
            extra["duration_ms"] = round(took, 1)
        log.log(_level(fact), "%s", line, extra=extra)
        sinks.write_line(line)
        _trace(fact, app_name, invocation_began)
    except Exception:
        log.warning("could not emit %s of run %s", fact.kind, fact.run_id, exc_info=True)


def flush() -> None:
    """Write the metrics collected and send the trace segments kept (end of a handler
    call). Never raises."""
    try:
        metrics.flush()
    except Exception:
        log.warning("could not write metrics", exc_info=True)
    traces.flush()


@contextlib.contextmanager
def flushing() -> Iterator[None]:
    """Around a handler call: flush what it emitted when it ends, however it ends."""
    try:
        yield
    finally:
        flush()
