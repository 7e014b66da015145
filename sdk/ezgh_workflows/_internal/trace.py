"""The run's trace as the engine gives it to an invocation: `ctx.trace`, `step_context().trace`.

Every run has one trace; each invocation's request carries the span of the app's request in
it (`trace`: W3C `traceparent` and the same as X-Ray's `X-Amzn-Trace-Id`; the engine also
sends both as HTTP headers). Spans an app starts under it join the run's trace, e.g. with
OpenTelemetry::

    from opentelemetry import trace
    from opentelemetry.propagate import extract

    with trace.get_tracer("app").start_as_current_span(
        "charge", context=extract(step_context().trace.headers())
    ):
        ...

``sampled`` says whether the engine records the run's trace (its sample rate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class TraceContext:
    """Where the current invocation sits in its run's trace."""

    traceparent: str
    xray_trace_header: str | None = None

    @property
    def trace_id(self) -> str:
        """The run's trace ID (32 hex digits, W3C form)."""
        return self.traceparent.split("-")[1]

    @property
    def parent_id(self) -> str:
        """The span to parent the app's own spans on (16 hex digits)."""
        return self.traceparent.split("-")[2]

    @property
    def sampled(self) -> bool:
        return int(self.traceparent.split("-")[3], 16) & 1 == 1

    def headers(self) -> dict[str, str]:
        """The context as HTTP headers (for a propagator, or a call the app makes)."""
        found = {"traceparent": self.traceparent}
        if self.xray_trace_header:
            found["X-Amzn-Trace-Id"] = self.xray_trace_header
        return found


def parse_trace(body: Any) -> TraceContext | None:
    """An invoke request's `trace` field; None when absent or not well formed (an older
    engine sends none: tracing is optional, never a reason to refuse an invocation)."""
    if not isinstance(body, dict):
        return None
    parent = body.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.match(parent):
        return None
    xray = body.get("xrayTraceHeader")
    return TraceContext(parent, xray if isinstance(xray, str) else None)
