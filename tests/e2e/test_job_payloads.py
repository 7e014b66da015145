"""A job's values stored outside its run are references in GetJob, read whole with
`GET /jobs/{jobId}/payloads/{path}` (`service.job_views`; the fitting and the paging of
actions under a small budget: tests/unit/test_job_views.py)."""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine.local.runtime import LocalRuntime

from tests.e2e.test_flows import Api, api, edge, interpreter, transform, trigger

pytestmark = pytest.mark.e2e
__all__ = ["api", "interpreter"]  # the fixtures this module uses

BIG = "x" * 100_000  # over the inline threshold (64 KB): stored outside the run's items


def _job(api: Api) -> dict[str, Any]:
    api.flow(
        "big",
        [trigger(), transform("copy", "input.s"), transform("wrap", "{kept: in.copy}")],
        [edge("start", "copy"), edge("copy", "wrap")],
    )
    done = api.wait(api.start("big", input={"s": BIG})["id"])
    assert done["status"] == "COMPLETED", done
    return done


def test_values_stored_outside_a_job_are_references_read_whole(api: Api) -> None:
    job = _job(api)
    acts = {a["nodeId"]: a for a in job["actions"]}
    # copy's output is stored outside the run: a reference; wrap's input holds it, so it
    # is a reference too (GetJob reads no payload), and wrap's output as well.
    assert "output" not in acts["copy"] and acts["copy"]["outputRef"]
    assert "input" not in acts["wrap"] and acts["wrap"]["inputRef"] == "actions/wrap/input"
    base = f"/jobs/{job['id']}/payloads"
    assert api("GET", f"{base}/{acts['copy']['outputRef']}") == BIG
    assert api("GET", f"{base}/actions/wrap/input") == {"copy": BIG}
    assert api("GET", f"{base}/{acts['wrap']['outputRef']}") == {"kept": BIG}
    assert api("GET", f"{base}/input") == {"s": BIG}
    output = job.get("output") or api("GET", f"{base}/{job['outputRef']}")
    assert output == {"wrap": {"kept": BIG}}
    # The trigger's input is built from nothing stored: inline.
    assert acts["start"]["input"] == {}
    status, body = api.call("GET", f"{base}/actions/nowhere/input")
    assert status == 404 and body["error"]["code"] == "not_found"
    assert api.call("GET", f"{base}/steps/job/output")[0] == 404  # the engine's own step


def test_a_job_payload_needs_read_on_its_flow(api: Api, engine: LocalRuntime) -> None:
    job = _job(api)
    api("POST", "/flows", json={"name": "other"})
    made = api("POST", "/apiKeys", json={"name": "reader", "permissions": [
        {"action": "flows.jobs.read", "resource": "other"}]})  # fmt: skip
    reader = Api(engine, made["key"])
    try:
        status, _ = reader.call("GET", f"/jobs/{job['id']}/payloads/input")
        assert status in (403, 404)
        assert reader.call("GET", f"/jobs/{job['id']}")[0] == status  # as the job itself
    finally:
        reader.http.close()
