"""A run's trace: its IDs, derived from the run, and the headers that carry them.

Every run has one trace. Its ID is derived from the run (its creation second and a hash of
its ID), and each span's ID from what the span is (the run, an invocation, a step's
attempt), so every function that meets the run names the same trace and the same spans
without storing or passing them: the invoker tells the app its invocation's span
(`traceparent`, W3C Trace Context, and the same as an X-Ray trace header), the stream
reader that records the run's steps parents them on the run's span. A segment sent twice
(a redelivered stream batch) has the same ID: it is the same segment.

Whether a run's trace is recorded (`sampled`) is decided from its ID too, so all the
functions agree on it without asking each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ezgh_engine import clock

W3C_VERSION = "00"


def _hex(text: str, digits: int) -> str:
    value = hashlib.sha256(text.encode()).hexdigest()[:digits]
    return value if value.strip("0") else "1".rjust(digits, "0")  # all zeros is invalid


def trace_id(run_id: str, created_at: str) -> str:
    """The run's X-Ray trace ID, `1-<8 hex: creation second>-<24 hex: of the run ID>`."""
    seconds = int(clock.parse_iso(created_at).timestamp())
    return f"1-{seconds & 0xFFFFFFFF:08x}-{_hex('trace:' + run_id, 24)}"


def span_id(*parts: str) -> str:
    """A span's 16-hex ID, derived from what the span is (`"run", run_id`, ...)."""
    return _hex("span:" + "\x1f".join(parts), 16)


def run_span(run_id: str) -> str:
    return span_id("run", run_id)


def invocation_span(run_id: str, invocation_id: str) -> str:
    return span_id("invocation", run_id, invocation_id)


def app_span(run_id: str, invocation_id: str) -> str:
    """The span of the app's request within an invocation: the parent the app's own spans
    get (the `traceparent` of the invoke request)."""
    return span_id("app", run_id, invocation_id)


def step_span(run_id: str, step_id: str, attempt: int) -> str:
    return span_id("step", run_id, step_id, str(attempt))


def sampled(run_id: str, rate: float) -> bool:
    """Whether the run's trace is recorded at `rate` (0 to 1): the same answer everywhere."""
    if rate <= 0:
        return False
    if rate >= 1:
        return True
    return int(_hex("sample:" + run_id, 8), 16) / 0xFFFFFFFF < rate


@dataclass(frozen=True)
class TraceContext:
    """Where a span sits: its trace, its own ID (the parent of what it calls), sampled."""

    trace_id: str  # X-Ray form: 1-xxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx
    parent_id: str
    sampled: bool

    @property
    def w3c_trace_id(self) -> str:
        """The same 128 bits as W3C writes them (32 hex digits)."""
        return self.trace_id[2:].replace("-", "")

    def traceparent(self) -> str:
        """The W3C `traceparent` header: `00-<trace>-<parent>-<flags>`."""
        flags = "01" if self.sampled else "00"
        return f"{W3C_VERSION}-{self.w3c_trace_id}-{self.parent_id}-{flags}"

    def xray_header(self) -> str:
        """The `X-Amzn-Trace-Id` header of the same context."""
        return f"Root={self.trace_id};Parent={self.parent_id};Sampled={int(self.sampled)}"

    def to_wire(self) -> dict[str, str]:
        """The invoke request's `trace` field (docs/protocol.md section 1.2)."""
        return {"traceparent": self.traceparent(), "xrayTraceHeader": self.xray_header()}


def app_context(run_id: str, created_at: str, invocation_id: str, rate: float) -> TraceContext:
    """The context the app gets with an invocation: its spans' parent is the app span."""
    return TraceContext(
        trace_id(run_id, created_at), app_span(run_id, invocation_id), sampled(run_id, rate)
    )
