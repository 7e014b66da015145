"""What showing the runs costs in the bench: the observe function's stream mapping billed as
one request per batching window, a dashboard priced only when the stack has one, and a
run's log bytes (EMF and JSON lines) measured as a deployed function writes them."""

from __future__ import annotations

from typing import Any

import pytest

from bench import idle
from bench import prices as p
from bench.cost import WINDOWS, batched_requests, bill
from bench.instrument import Invocation


def _inv(function: str, at: float) -> Invocation:
    return Invocation(function, 0.001, "run", "", 0, 0, 0.0, at)


def test_invocations_of_one_window_are_one_request() -> None:
    window = WINDOWS["observe"]
    invs = [_inv("observe", t) for t in (0, 1, window - 1, window, window + 5, 3 * window)]
    other = _inv("steps", 2)
    found = batched_requests([*invs, other])
    assert [found[id(i)] for i in invs] == [1, 0, 0, 1, 0, 1]
    assert id(other) not in found  # no window: a request each
    b = bill([], [*invs, other], [], 0, {})
    assert b.lambda_requests == {"observe": 3, "steps": 1}
    assert b.requests["lambda"] == 4
    assert b.lambda_invocations["observe"] == 6


def test_log_bytes_are_billed_per_gb_ingested() -> None:
    b = bill([], [], [], 0, {}, log_bytes=2_000_000)
    assert b.usd["logs"] == pytest.approx(2e-3 * p.CLOUDWATCH_LOGS_USD_PER_GB_INGESTED)
    assert b.as_dict()["cloudwatch_logs_bytes"] == 2_000_000
    assert "logs" not in bill([], [], [], 0, {}).usd


def _template(*types: str) -> dict[str, Any]:
    return {"Resources": {f"R{i}": {"Type": t, "Properties": {}} for i, t in enumerate(types)}}


def test_a_dashboard_is_priced_only_when_the_stack_has_one() -> None:
    without = {x.item for x in idle.template_lines(_template("AWS::IAM::Role"))}
    assert not any(item.startswith("CloudWatch dashboards") for item in without)
    lines = idle.template_lines(_template("AWS::CloudWatch::Dashboard"))
    dashboard = next(x for x in lines if x.item.startswith("CloudWatch dashboards"))
    assert dashboard.usd_high == p.CLOUDWATCH_DASHBOARD_USD_PER_MONTH
    metrics = next(x for x in lines if x.item.startswith("custom metrics"))
    assert metrics.usd_high == 0.0  # none sent while idle


@pytest.mark.e2e
def test_a_run_measures_its_log_bytes_and_observe_windows() -> None:
    from bench.engine import Engine

    with Engine() as engine:
        result = engine.run(2)
    total = result.total
    assert total.log_bytes > 0 and total.usd["logs"] > 0
    observe = total.lambda_invocations["observe"]
    assert 1 <= total.lambda_requests["observe"] < observe  # a 1 h sleep: two windows
