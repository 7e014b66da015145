"""Concurrent calls of one function never share per-request state.

Lambda serves one request per execution environment; Powertools' resolver keeps the current
event in a class attribute. Served from one process on many threads, a read-only key's
request was answered with an admin key's identity, and a step of one run was recorded in
another run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from ezgh_engine.service.auth import bootstrap_admin
from ezgh_workflows import WorkflowsClient

from tests.e2e.test_durable_runs import wait_ended

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.moto_only("the local runtime's execution environments, not what DynamoDB stores"),
]

ROUNDS = 16


@pytest.fixture(autouse=True)
def eager_thread_switches() -> Iterator[None]:
    """Switch threads as often as possible (this process serves the HTTP bridge): a race
    between concurrent requests that share a process then shows at once, not one run in a
    hundred."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def _mint(engine, key: str, action: str) -> int:
    """POST /apiKeys with `key`; the status."""
    answer = httpx.post(
        f"{engine.api_prefix}/apiKeys",
        headers={"authorization": f"Bearer {key}"},
        json={"name": "minted", "permissions": [{"action": action}]},
        timeout=60,
    )
    return answer.status_code


def _apps(engine, key: str, org: str, project: str) -> tuple[int, list[str]]:
    answer = httpx.get(
        f"{engine.api_url}/v1/organizations/{org}/projects/{project}/apps",
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    names = [a["name"] for a in answer.json().get("apps", [])] if answer.status_code == 200 else []
    return answer.status_code, names


def test_concurrent_requests_of_different_keys_never_cross(engine, client, app_id):
    reader = client.request(
        "POST",
        "/apiKeys",
        json={"name": "reader", "permissions": [{"action": "workflows.runs.read"}]},
    )["key"]
    org2, project2, foreign = bootstrap_admin()

    def admin_mints() -> tuple[str, object]:
        return "admin-mint", _mint(engine, engine.api_key, "workflows.runs.read")

    def reader_mints() -> tuple[str, object]:
        return "reader-mint", _mint(engine, reader, "*")

    def admin_lists() -> tuple[str, object]:
        return "admin-apps", _apps(engine, engine.api_key, engine.org_id, engine.project_id)

    def foreign_lists() -> tuple[str, object]:
        return "foreign-apps", _apps(engine, foreign, org2, project2)

    calls = [admin_mints, reader_mints, admin_lists, foreign_lists] * ROUNDS
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda call: call(), calls))
    expected = {
        "admin-mint": 201,
        "reader-mint": 403,
        "admin-apps": (200, ["e2e"]),
        "foreign-apps": (200, []),
    }
    crossed = [(what, got) for what, got in answers if got != expected[what]]
    assert not crossed, crossed


def test_concurrent_runs_record_their_steps_in_their_own_run(
    engine, client: WorkflowsClient, app_id
):
    sizes = [2 + i % 6 for i in range(ROUNDS)]
    with ThreadPoolExecutor(ROUNDS) as pool:
        runs = list(pool.map(lambda n: client.start_run(app_id, "sequence", {"n": n}), sizes))
    for run, n in zip(runs, sizes, strict=True):
        done = wait_ended(engine, client, run["id"], timeout=60)
        assert done["status"] == "completed", done
        assert done["input"] == {"n": n}
        assert done["output"] == sum(range(n)), (n, done["output"], done["steps"])
        assert len(done["steps"]) == n, (n, [s["id"] for s in done["steps"]])
