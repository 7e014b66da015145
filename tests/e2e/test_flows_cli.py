"""`ezgh flows …` against the local runtime, on the example flow of `examples/flows`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from ezgh_engine.cli.main import main

from tests.e2e.test_flows import interpreter  # noqa: F401  (a fixture, used below)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.usefixtures("interpreter"),
    pytest.mark.moto_only("the CLI's printing: flows run on both in tests/e2e/test_flows.py"),
]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flows" / "order-check.json"


def _ezgh(engine: Any, capsys: pytest.CaptureFixture[str], *argv: str, as_json: bool = True) -> Any:
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
    code = main([*argv, *flags, *(["--json"] if as_json else [])])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out) if as_json else out.out


def _ended(engine: Any, capsys: Any, job_id: str, status: str = "COMPLETED") -> Any:
    found: dict[str, Any] = {}

    def check() -> bool:
        found.update(_ezgh(engine, capsys, "flows", "jobs", "get", job_id))
        return found["status"] == status

    engine.wait_for(check, timeout=30)
    return found


def test_the_example_flow_through_the_cli(engine: Any, capsys: Any) -> None:
    flow = _ezgh(engine, capsys, "flows", "create", str(EXAMPLE))
    assert flow["name"] == "order-check" and flow["commit"]["branch"] == "main"
    small = _ezgh(
        engine,
        capsys,
        "flows",
        "start",
        "order-check",
        "--input",
        '{"orderId": 1, "amount": 20}',
        "--tracking-id",
        "cli-1",
    )
    done = _ended(engine, capsys, small["id"])
    assert done["output"] == {"result": {"orderId": 1, "approved": True, "trackingId": "cli-1"}}
    # For people too, a value is spelled as JSON spells it: the `auto` node's output is `true`.
    shown = _ezgh(engine, capsys, "flows", "jobs", "get", small["id"], as_json=False)
    auto = next(line for line in shown.splitlines() if line.startswith("auto "))
    assert auto.split()[-2:] == ["true", "-"], auto  # its output, and no error
    assert "True" not in shown and "None" not in shown
    skipped = {a["nodeId"] for a in done["actions"] if a["status"] == "SKIPPED"}
    assert skipped == {"approval", "decided"}
    large = _ezgh(
        engine, capsys, "flows", "start", "order-check", "--input", '{"orderId": 2, "amount": 500}'
    )
    waiting = _ended(engine, capsys, large["id"], "WAITING")
    url = next(a["resumeUrl"] for a in waiting["actions"] if a["nodeId"] == "approval")
    text = _ezgh(engine, capsys, "flows", "jobs", "get", large["id"], as_json=False)
    assert "NODEID" in text and "approval" in text and url in text  # the per-action table
    assert httpx.post(url, json={"approved": False}).status_code == 200
    done = _ended(engine, capsys, large["id"])
    assert done["output"]["result"]["approved"] is False
    listed = _ezgh(engine, capsys, "flows", "jobs", "list", "--flow", "order-check")
    assert {j["id"] for j in listed["jobs"]} == {small["id"], large["id"]}
    commits = _ezgh(engine, capsys, "flows", "commits", "order-check")
    assert len(commits["commits"]) == 1
    _ezgh(engine, capsys, "flows", "commit", "order-check", str(EXAMPLE), "--message", "again")
    assert len(_ezgh(engine, capsys, "flows", "commits", "order-check")["commits"]) == 2
    assert _ezgh(engine, capsys, "flows", "failed-items", "list")["failedItems"] == []


def test_the_cli_reports_an_invalid_graph(
    engine: Any,
    capsys: Any,
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"name": "bad", "graph": {"nodes": [{"id": "x", "moduleType": "eval"}]}})
    )
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
    assert main(["flows", "create", str(bad), *flags]) == 1
    err = capsys.readouterr().err
    assert "400 validation_error" in err and "node x" in err and "Traceback" not in err
