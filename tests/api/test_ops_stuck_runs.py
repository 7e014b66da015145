"""`find_stuck_runs` and `ezgh ops stuck-runs`: run items written directly in moto's table."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from ezgh_engine import clock, ids
from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.cli.main import main
from ezgh_engine.core.models import Run
from ezgh_engine.service.ops import find_stuck_runs

from tests.api.conftest import ENV
from tests.api.steps_helpers import new_run

PROJECT = "22222222-2222-4222-8222-222222222222"


def _ago(seconds: float) -> str:
    from datetime import timedelta

    return clock.iso(clock.now() - timedelta(seconds=seconds))


def _put(values: dict[str, Any]) -> None:
    boto3.client("dynamodb", region_name="us-east-1").put_item(
        TableName=ENV["EZGH_RUNS_TABLE"],
        Item=ddb.to_item({k: v for k, v in values.items() if v is not None}),
    )


def _run(**changes: Any) -> Run:
    """A run that has been running an hour, last invoked long ago, overridden by `changes`."""
    base = dict(
        project_id=PROJECT,
        workflow="onboarding",
        input={"n": 1},
        created_at=_ago(3600),
        started_at=_ago(3600),
        version=3,
        invoke_seq=2,
        handled_seq=2,
        epoch=2,
        lease_until_ms=clock.now_ms() - 3_000_000,
    )
    return new_run(**{**base, **changes})


def _step(run: Run, step_id: str, kind: str, status: str, **extra: Any) -> None:
    """A step item of `run` (more attributes in `extra`, e.g. `wakeAt`)."""
    _put(
        {
            "pk": items.run_pk(run.id),
            "sk": items.STEP_PREFIX + step_id,
            "stepId": step_id,
            "name": step_id,
            "kind": kind,
            "status": status,
            "attempt": 1,
            "order": ids.time_ordered_id(),
            "startedAt": run.created_at,
            **extra,
        }
    )


def _app(app_id: str, project_id: str) -> None:
    """The runs' app exists (a deleted app's runs with pending steps are stuck)."""
    from ezgh_engine.adapters import registry_store
    from ezgh_engine.core.models import App

    now = clock.iso(clock.now())
    app = App(app_id, "wfa_" + app_id, "o", project_id, "a", "push", None, "synced", (), "k", now)
    registry_store.create_app(app)


@pytest.fixture
def runs(aws_env: None) -> dict[str, Run]:
    _app("a", PROJECT)
    stuck = _run()  # its one step completed; nothing owed, no lease, no timer
    _put(items.run_values(stuck))
    _step(stuck, "fetch", "run", "completed")

    sleeping = _run()  # healthy: a timer will wake its step
    _put(items.run_values(sleeping))
    _step(sleeping, "fetch", "run", "completed")
    _step(sleeping, "wait-3d", "sleep", "sleeping")

    owed = _run(invoke_seq=3)  # healthy: an invocation message is due
    _put(items.run_values(owed))

    leased = _run(lease_until_ms=clock.now_ms() + 3_600_000)  # healthy: being invoked now
    _put(items.run_values(leased))

    fresh = _run(created_at=_ago(5), started_at=_ago(5), lease_until_ms=0)  # too recent
    _put(items.run_values(fresh))

    done = _run(status="completed")  # ended: never stuck
    _put(items.run_values(done))

    cancelling = _run(status="cancelling", project_id="33333333-3333-4333-8333-333333333333")
    _put(items.run_values(cancelling))
    return {"stuck": stuck, "sleeping": sleeping, "cancelling": cancelling}


def test_only_the_runs_with_nothing_pending_are_reported(runs: dict[str, Run]) -> None:
    found = find_stuck_runs(older_than_seconds=60)
    assert {s.run_id for s in found} == {runs["stuck"].id, runs["cancelling"].id}
    by_id = {s.run_id: s for s in found}
    why = by_id[runs["stuck"].id].why
    assert "no live lease" in why and "invokeSeq == handledSeq == 2" in why
    assert by_id[runs["cancelling"].id].status == "cancelling"


def test_a_project_is_read_through_its_index(runs: dict[str, Run]) -> None:
    assert [s.run_id for s in find_stuck_runs(PROJECT, older_than_seconds=60)] == [runs["stuck"].id]


def test_older_than_hides_runs_quiet_for_less(runs: dict[str, Run]) -> None:
    assert find_stuck_runs(older_than_seconds=2 * 3600) == []


def test_the_operator_command(runs: dict[str, Run], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "stuck-runs", "--project-id", PROJECT, "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert [s["runId"] for s in answer["stuckRuns"]] == [runs["stuck"].id]
    assert main(["ops", "stuck-runs", "--project-id", ids.new_id()]) == 0
    assert capsys.readouterr().out.strip() == "no stuck runs"


def test_an_app_is_looked_up_in_each_runs_own_project(
    runs: dict[str, Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """App `a` exists in PROJECT only. When the scan meets the other project's run first,
    PROJECT's sleeping run must still find its app (the lookup was cached by app ID alone:
    its pending step was reported as stranded by a deleted app about half the time)."""
    from ezgh_engine.service import ops

    real = ops._active_run_items
    first = runs["cancelling"].id

    def other_project_first(project_id: str | None) -> list[dict[str, Any]]:
        found = list(real(project_id))
        return sorted(found, key=lambda values: values["id"] != first)

    monkeypatch.setattr(ops, "_active_run_items", other_project_first)
    found = {s.run_id for s in find_stuck_runs(older_than_seconds=60)}
    assert runs["sleeping"].id not in found
