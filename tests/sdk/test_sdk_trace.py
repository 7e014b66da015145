"""The SDK's side of the run's trace: the invoke request's `trace` field, read leniently
(an older engine sends none; a malformed one never refuses an invocation), and given to
the workflow (`ctx.trace`) and to each step (`step_context().trace`)."""

from __future__ import annotations

from ezgh_workflows import TraceContext
from ezgh_workflows._internal.protocol import parse_invoke
from ezgh_workflows._internal.trace import parse_trace

PARENT = "00-6b1526460123456789abcdef01234567-89abcdef01234567-01"
XRAY = "Root=1-6b152646-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"


def test_a_trace_field_is_read_into_a_context() -> None:
    context = parse_trace({"traceparent": PARENT, "xrayTraceHeader": XRAY})
    assert context == TraceContext(PARENT, XRAY)
    assert context.trace_id == "6b1526460123456789abcdef01234567"
    assert context.parent_id == "89abcdef01234567" and context.sampled
    assert context.headers() == {"traceparent": PARENT, "X-Amzn-Trace-Id": XRAY}
    assert not parse_trace({"traceparent": PARENT[:-2] + "00"}).sampled  # type: ignore[union-attr]


def test_a_missing_or_malformed_trace_is_none() -> None:
    for body in (None, "x", {}, {"traceparent": "00-xyz"}, {"traceparent": 5}):
        assert parse_trace(body) is None


def test_the_invoke_request_carries_it() -> None:
    body = {
        "protocol": "1.5",
        "type": "invoke",
        "invocationId": "i1",
        "run": {"id": "r1", "workflow": "w"},
        "steps": [],
        "api": {"url": "http://127.0.0.1:1", "token": "t"},
        "trace": {"traceparent": PARENT},
    }
    assert parse_invoke(body).trace == TraceContext(PARENT)
    assert parse_invoke({**body, "trace": None}).trace is None
