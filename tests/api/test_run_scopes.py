"""Run permissions against a key's resource scope: what an attack on the running API
found a scoped key could do outside its scope.

Every test drives the real API handler on in-process moto with keys scoped to one
`<app name>/<workflow>`, and checks the state after a refusal: nothing may have happened.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import runs_store
from ezgh_engine.core.models import RunError
from ezgh_engine.protocol import outcomes as rules
from ezgh_engine.service import outcomes

from tests.api.conftest import Project

READ = "workflows.runs.read"


def pull_app(project: Project, name: str, workflows: list[str]) -> dict[str, Any]:
    """A synced pull app (a worker announced its workflows)."""
    app = project.call("POST", "/apps", body={"name": name, "kind": "pull"}).body
    synced = project.call(
        "POST", f"/apps/{app['id']}/workers", body={"workerId": "w", "workflows": workflows}
    )
    assert synced.status == 200, synced.body
    return dict(synced.body)


def start(project: Project, app: dict[str, Any], workflow: str, value: Any = None) -> str:
    answer = project.call(
        "POST", "/runs", body={"appId": app["id"], "workflow": workflow, "input": value}
    )
    assert answer.status == 201, answer.body
    return str(answer.body["id"])


def key(project: Project, *permissions: tuple[str, str | None]) -> str:
    body = {
        "name": "k-" + ids.new_id()[:8],
        "permissions": [
            {"action": a, **({"resource": r} if r is not None else {})} for a, r in permissions
        ],
    }
    answer = project.call("POST", "/apiKeys", body=body)
    assert answer.status == 201, answer.body
    return str(answer.body["key"])


def fail_run(run_id: str) -> None:
    """End the run `failed`, as an invocation answering `failed` does."""
    leased = inv.take_lease(run_id, 1, now_ms=clock.now_ms(), lease_ms=600_000)
    assert leased is not None
    full = runs_store.get_run(run_id)
    assert full is not None
    outcome = rules.Outcome("failed", error=RunError("user", "Boom", "boom"))
    outcomes.apply(
        replace(full, epoch=leased.epoch),
        1,
        outcome,
        invocation_id=ids.time_ordered_id(),
        started_at=clock.iso(clock.now()),
    )
    ended = runs_store.get_run(run_id)
    assert ended is not None and ended.status == "failed"


def status_of(run_id: str) -> str:
    run = runs_store.get_run(run_id, with_steps=False)
    assert run is not None
    return run.status


# --- SearchRuns ----------------------------------------------------------------------------


def test_a_scoped_key_searches_only_the_runs_it_may_read(project: Project) -> None:
    alpha = pull_app(project, "alpha", ["a", "b"])
    beta = pull_app(project, "beta", ["other"])
    secret_a = start(project, alpha, "a", {"card": "SECRET-CARD-A"})
    secret_b = start(project, alpha, "b", {"card": "SECRET-CARD-B"})
    mine = start(project, beta, "other", {"mine": True})
    reader = key(project, (READ, "beta/other"))

    everything = project.call("GET", "/runs", key=reader)
    assert everything.status == 200, everything.body
    assert [r["id"] for r in everything.body["runs"]] == [mine]
    assert "SECRET-CARD" not in everything.raw  # (not digits: a random ID may hold any)
    other_app = project.call("GET", "/runs", key=reader, query={"appId": alpha["id"]})
    assert other_app.status == 200 and other_app.body["runs"] == []
    other_wf = project.call("GET", "/runs", key=reader, query={"workflow": "a"})
    assert other_wf.status == 200 and other_wf.body["runs"] == []
    # Paging: a page of one still finds the key's run behind runs it may not read.
    paged = project.call("GET", "/runs", key=reader, query={"limit": "1"})
    assert [r["id"] for r in paged.body["runs"]] == [mine]
    # The admin key still sees every run; the GetRun answers agree with the search.
    admin = project.call("GET", "/runs").body["runs"]
    assert {r["id"] for r in admin} == {secret_a, secret_b, mine}
    assert project.call("GET", f"/runs/{secret_a}", key=reader).status == 403
    assert project.call("GET", f"/runs/{mine}", key=reader).status == 200


def test_a_key_with_a_scoped_star_grant_searches_its_resource_only(project: Project) -> None:
    alpha = pull_app(project, "alpha", ["a", "b"])
    start(project, alpha, "a")
    mine = start(project, alpha, "b")
    star = key(project, ("*", "alpha/b"))
    found = project.call("GET", "/runs", key=star)
    assert [r["id"] for r in found.body["runs"]] == [mine]


def test_a_key_without_the_read_action_cannot_search(project: Project) -> None:
    alpha = pull_app(project, "alpha", ["a"])
    start(project, alpha, "a")
    starter = key(project, ("workflows.runs.start", "alpha/a"))
    answer = project.call("GET", "/runs", key=starter)
    assert answer.status == 403 and answer.body["error"]["code"] == "forbidden"


# --- runs of a deleted app -------------------------------------------------------------------


def test_runs_of_a_deleted_app_keep_their_resource(project: Project) -> None:
    """The run's resource comes from the run (it keeps its app's name): once the app is
    gone, a key scoped to another app still cannot read or cancel it, and one scoped to the
    run's own `<app name>/<workflow>` still can."""
    alpha = pull_app(project, "alpha", ["a"])
    beta = pull_app(project, "beta", ["other"])
    run_id = start(project, alpha, "a", {"card": "SECRET-CARD-A"})
    start(project, beta, "other")
    stranger = key(project, ("*", "beta/other"))
    owner = key(project, (READ, "alpha/a"), ("workflows.runs.cancel", "alpha/a"))
    assert project.call("DELETE", f"/apps/{alpha['id']}").status == 204

    read = project.call("GET", f"/runs/{run_id}", key=stranger)
    assert read.status == 403 and "SECRET-CARD" not in read.raw
    for sub in ("/events", "/payloads/input"):
        assert project.call("GET", f"/runs/{run_id}{sub}", key=stranger).status == 403
    assert project.call("POST", f"/runs/{run_id}/cancel", key=stranger).status == 403
    assert project.call("DELETE", f"/runs/{run_id}", key=stranger).status == 403
    # Deleting the app ended its live runs (`workflows.app_deleted`); the refused
    # calls changed nothing.
    assert status_of(run_id) == "failed"
    listed = project.call("GET", "/runs", key=stranger).body["runs"]
    assert run_id not in [r["id"] for r in listed]

    assert project.call("GET", f"/runs/{run_id}", key=owner).body["input"] == {
        "card": "SECRET-CARD-A"
    }
    assert project.call("DELETE", f"/runs/{run_id}", key=owner).status == 204
    assert project.call("GET", f"/runs/{run_id}").status == 404


def test_a_run_whose_resource_is_unknown_needs_an_unscoped_grant(project: Project) -> None:
    """A run stored before runs kept their app's name, whose app is gone: no resource can be
    named, so no scoped grant covers it (before: every one did)."""
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.adapters import waits_store as ws

    alpha = pull_app(project, "alpha", ["a"])
    run_id = start(project, alpha, "a", {"card": "SECRET-CARD-A"})
    legacy = runs_store.get_run(run_id, with_steps=False)
    assert legacy is not None
    assert ws.transact(
        [ws.plain_put(items.run_values(replace(legacy, app_name=None)), only_new=False)]
    )
    scoped = key(project, ("*", "alpha/a"))
    assert project.call("GET", f"/runs/{run_id}", key=scoped).status == 200  # app still there
    assert project.call("DELETE", f"/apps/{alpha['id']}").status == 204
    assert project.call("GET", f"/runs/{run_id}", key=scoped).status == 403
    assert project.call("POST", f"/runs/{run_id}/cancel", key=scoped).status == 403
    assert project.call("DELETE", f"/runs/{run_id}", key=scoped).status == 403
    assert status_of(run_id) == "failed"  # ended by the app's deletion, not by the refused calls
    assert project.call("GET", f"/runs/{run_id}").status == 200  # the admin key's is unscoped


# --- check before acting ----------------------------------------------------------------------


def test_cancel_without_read_is_refused_before_the_run_is_touched(project: Project) -> None:
    alpha = pull_app(project, "alpha", ["a"])
    run_id = start(project, alpha, "a")
    canceller = key(project, ("workflows.runs.cancel", "alpha/a"))
    answer = project.call("POST", f"/runs/{run_id}/cancel", key=canceller)
    assert answer.status == 403 and answer.body["error"]["code"] == "forbidden"
    assert status_of(run_id) == "running"
    both = key(project, ("workflows.runs.cancel", "alpha/a"), (READ, "alpha/a"))
    assert project.call("POST", f"/runs/{run_id}/cancel", key=both).status == 202
    assert status_of(run_id) == "cancelling"


def test_retry_without_read_is_refused_before_the_run_is_touched(project: Project) -> None:
    alpha = pull_app(project, "alpha", ["a"])
    run_id = start(project, alpha, "a")
    fail_run(run_id)
    starter = key(project, ("workflows.runs.start", "alpha/a"))
    answer = project.call("POST", f"/runs/{run_id}/retry", key=starter)
    assert answer.status == 403 and answer.body["error"]["code"] == "forbidden"
    after = runs_store.get_run(run_id, with_steps=False)
    assert after is not None and (after.status, after.attempt) == ("failed", 1)
    both = key(project, ("workflows.runs.start", "alpha/a"), (READ, "alpha/a"))
    retried = project.call("POST", f"/runs/{run_id}/retry", key=both)
    assert retried.status == 200 and retried.body["attempt"] == 2


# --- run keys: one workflow's callers cannot take another's key -------------------------------


def _start_keyed(project: Project, secret: str | None, app: dict[str, Any], workflow: str,
                 value: Any, run_key: str) -> Any:  # fmt: skip
    body = {"appId": app["id"], "workflow": workflow, "input": value, "runKey": run_key}
    return project.call("POST", "/runs", key=secret, body=body)


def test_a_run_key_is_unique_within_one_workflow_only(project: Project) -> None:
    """A caller of alpha/b cannot squat the key a caller of alpha/a (or of beta/a) needs."""
    alpha, beta = pull_app(project, "alpha", ["a", "b"]), pull_app(project, "beta", ["a"])
    squatter = key(project, ("workflows.runs.start", "alpha/b"))
    taken = _start_keyed(project, squatter, alpha, "b", 1, "order-7")
    assert taken.status == 201, taken.body
    owner = key(project, ("workflows.runs.start", "alpha/a"), (READ, "alpha/a"))
    mine = _start_keyed(project, owner, alpha, "a", 1, "order-7")
    assert mine.status == 201 and mine.body["id"] != taken.body["id"], mine.body
    assert _start_keyed(project, None, beta, "a", 1, "order-7").status == 201
    again = _start_keyed(project, owner, alpha, "a", 1, "order-7")
    assert again.status == 200 and again.body["id"] == mine.body["id"]
    # Searching by the key finds each workflow's run, for a key that may read them.
    found = project.call("GET", "/runs", key=owner, query={"runKey": "order-7"}).body["runs"]
    assert [r["id"] for r in found] == [mine.body["id"]]


def test_a_run_key_conflict_names_the_run_only_to_a_key_that_may_read_it(
    project: Project,
) -> None:
    alpha = pull_app(project, "alpha", ["a"])
    first = _start_keyed(project, None, alpha, "a", 1, "k-1").body["id"]
    starter = key(project, ("workflows.runs.start", "alpha/a"))  # may start, not read
    refused = _start_keyed(project, starter, alpha, "a", 2, "k-1")
    assert refused.status == 409 and refused.body["error"]["code"] == "run_key_conflict"
    assert first not in refused.raw
    reader = key(project, ("workflows.runs.start", "alpha/a"), (READ, "alpha/a"))
    named = _start_keyed(project, reader, alpha, "a", 2, "k-1")
    assert named.status == 409 and first in named.body["error"]["message"]


def _legacy_keyed_run(project: Project, app: dict[str, Any], workflow: str, run_key: str) -> str:
    """A run started before keys were scoped: its key item is project-wide."""
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.adapters import waits_store as ws

    run_id = start(project, app, workflow, {"n": 1})
    stored = runs_store.get_run(run_id, with_steps=False)
    assert stored is not None
    assert ws.transact([ws.plain_put(items.run_values(replace(stored, run_key=run_key)),
                                     only_new=False)])  # fmt: skip
    legacy = {"pk": items.run_key_pk(project.project_id, run_key, None), "sk": "RUNKEY",
              "runId": run_id, "ttl": 4102444800}  # fmt: skip
    assert ws.transact([ws.plain_put(legacy)])
    return run_id


def test_a_key_taken_before_keys_were_scoped_still_answers_its_own_workflow(
    project: Project,
) -> None:
    from ezgh_engine.adapters import run_items as items
    from ezgh_engine.adapters import waits_store as ws

    alpha = pull_app(project, "alpha", ["a", "b"])
    old = _legacy_keyed_run(project, alpha, "a", "order-1")
    same = _start_keyed(project, None, alpha, "a", {"n": 1}, "order-1")
    assert same.status == 200 and same.body["id"] == old
    other_input = _start_keyed(project, None, alpha, "a", {"n": 2}, "order-1")
    assert other_input.status == 409 and other_input.body["error"]["code"] == "run_key_conflict"
    # Another workflow's start is not the old key's business.
    assert _start_keyed(project, None, alpha, "b", {"n": 1}, "order-1").status == 201
    # Deleting the old run frees its (project-wide) key: the workflow's next start is new.
    fail_run(old)
    assert project.call("DELETE", f"/runs/{old}").status == 204
    assert ws.get(items.run_key_pk(project.project_id, "order-1", None), "RUNKEY") is None
    fresh = _start_keyed(project, None, alpha, "a", {"n": 1}, "order-1")
    assert fresh.status == 201 and fresh.body["id"] != old
