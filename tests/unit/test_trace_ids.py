"""A run's trace IDs: derived from the run (the same in every function, no storage), in the
forms X-Ray and W3C Trace Context take, and the context an app gets with an invocation."""

from __future__ import annotations

import re

from ezgh_engine.core import trace_ids as ti

RUN = "6a0b7c1e-2f3d-4e5a-8b9c-0d1e2f3a4b5c"
CREATED = "2026-12-05T10:00:00.000Z"


def test_a_runs_trace_id_is_xray_shaped_and_holds_its_creation_second() -> None:
    trace = ti.trace_id(RUN, CREATED)
    assert re.fullmatch(r"1-[0-9a-f]{8}-[0-9a-f]{24}", trace)
    assert int(trace.split("-")[1], 16) == 1796464800  # 2026-12-05T10:00:00Z
    assert trace == ti.trace_id(RUN, CREATED)  # every function derives the same
    assert trace != ti.trace_id(RUN.replace("6", "7"), CREATED)


def test_span_ids_name_what_the_span_is() -> None:
    spans = {
        ti.run_span(RUN),
        ti.invocation_span(RUN, "inv-1"),
        ti.app_span(RUN, "inv-1"),
        ti.invocation_span(RUN, "inv-2"),
        ti.step_span(RUN, "charge#1", 1),
        ti.step_span(RUN, "charge#1", 2),
    }
    assert len(spans) == 6
    assert all(re.fullmatch(r"[0-9a-f]{16}", s) and s.strip("0") for s in spans)
    assert ti.step_span(RUN, "charge#1", 2) == ti.step_span(RUN, "charge#1", 2)


def test_the_app_context_in_w3c_and_xray_forms() -> None:
    context = ti.app_context(RUN, CREATED, "inv-1", rate=1.0)
    trace = ti.trace_id(RUN, CREATED)
    parent = context.traceparent()
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", parent)
    assert parent.split("-")[1] == trace[2:].replace("-", "")
    assert parent.split("-")[2] == ti.app_span(RUN, "inv-1")
    assert context.xray_header() == f"Root={trace};Parent={ti.app_span(RUN, 'inv-1')};Sampled=1"
    wire = context.to_wire()
    assert wire == {"traceparent": parent, "xrayTraceHeader": context.xray_header()}
    unsampled = ti.app_context(RUN, CREATED, "inv-1", rate=0.0)
    assert unsampled.traceparent().endswith("-00") and unsampled.xray_header().endswith("=0")


def test_sampling_is_decided_by_the_run_alike_everywhere() -> None:
    runs = [f"run-{n}" for n in range(2000)]
    assert not any(ti.sampled(r, 0) for r in runs) and all(ti.sampled(r, 1) for r in runs)
    chosen = [r for r in runs if ti.sampled(r, 0.1)]
    assert 120 < len(chosen) < 280  # about a tenth
    assert chosen == [r for r in runs if ti.sampled(r, 0.1)]
    assert set(chosen) <= {r for r in runs if ti.sampled(r, 0.5)}  # a higher rate keeps them
