"""`ezgh queues …` against the local runtime, in the seed's forms."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ezgh_engine.cli.main import main

from tests.e2e.workflows_app import CALLS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.moto_only(
        "the CLI's printing: the queue store runs on both in tests/api/test_queues.py"
    ),
]


def _ezgh(engine: Any, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    flags = [
        "--api-url",
        engine.api_url,
        "--api-key",
        engine.api_key,
        "--org-id",
        engine.org_id,
        "--project-id",
        engine.project_id,
    ]
    capsys.readouterr()
    code = main([*argv, *flags, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_queues_cli_seed_forms(engine, capsys):
    queue = _ezgh(engine, capsys, "queues", "create", "orders", "--max-receive-count", "5")
    assert queue["name"] == "orders" and queue["maxReceiveCount"] == 5
    _ezgh(engine, capsys, "queues", "create", "payments")
    sub = _ezgh(
        engine,
        capsys,
        "queues",
        "subscriptions",
        "create",
        "orders",
        "--workflow-app",
        "e2e",
        "--workflow",
        "chargeCustomer",
    )
    assert sub["target"]["mode"] == "start" and sub["queueId"] == queue["id"]
    resume = _ezgh(
        engine,
        capsys,
        "queues",
        "subscriptions",
        "create",
        "payments",
        "--workflow-app",
        "e2e",
        "--workflow",
        "chargeCustomer",
        "--mode",
        "resume",
        "--correlation-attribute",
        "orderKey",
    )
    assert resume["target"]["correlationAttribute"] == "orderKey"
    sent = _ezgh(
        engine,
        capsys,
        "queues",
        "send",
        "orders",
        "--body",
        '{"orderId":1042}',
        "--attribute",
        "source=web",
    )
    assert len(sent["messages"]) == 1
    engine.wait_for(lambda: CALLS["chargeCustomer"] == 1, timeout=30)
    assert _ezgh(engine, capsys, "queues", "subscriptions", "get", "orders")["id"] == sub["id"]
    paused = _ezgh(engine, capsys, "queues", "subscriptions", "pause", sub["id"])
    assert paused["state"] == "paused"
    changed = _ezgh(
        engine, capsys, "queues", "subscriptions", "update", "orders", "--max-concurrency", "2"
    )
    assert changed["maxConcurrency"] == 2
    listed = _ezgh(engine, capsys, "queues", "subscriptions", "list")
    assert len(listed["subscriptions"]) == 2
    assert {q["name"] for q in _ezgh(engine, capsys, "queues", "list")["queues"]} == {
        "orders",
        "payments",
    }
    assert _ezgh(engine, capsys, "queues", "redrive", "orders") == {"moved": 0, "remaining": 0}
    _ezgh(engine, capsys, "queues", "subscriptions", "delete", sub["id"])
    _ezgh(engine, capsys, "queues", "delete", "orders")
    assert [q["name"] for q in _ezgh(engine, capsys, "queues", "list")["queues"]] == ["payments"]


def test_queues_cli_reports_errors_without_a_trace(engine, capsys):
    flags = [
        "--api-url",
        engine.api_url,
        "--api-key",
        engine.api_key,
        "--org-id",
        engine.org_id,
        "--project-id",
        engine.project_id,
    ]
    assert main(["queues", "get", "nope", *flags]) == 1
    assert "404 not_found" in capsys.readouterr().err
