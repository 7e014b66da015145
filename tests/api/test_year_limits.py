"""Every run ends by its one-year limit through an hourly sweep (service/year_limits.py), on
moto and on DynamoDB Local: a run is counted in its creation hour's bucket once per hour and
project (no Scheduler call per run, which a burst of starts would have throttled), and the
sweep reads only what is due."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws, runs_store, year_limit_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run
from ezgh_engine.service import stream, year_limits
from ezgh_engine.service.timers import YEAR_LIMIT, YEAR_LIMIT_ERROR

from tests.api.test_ops_stuck_runs import _put, _run


@pytest.fixture
def requests(aws_env: None) -> Iterator[list[dict[str, Any]]]:
    """Every AWS request the engine's clients make (service, operation, params)."""
    year_limits.forget_armed()
    seen: list[dict[str, Any]] = []
    stop = aws.observe(seen.append)
    try:
        yield seen
    finally:
        stop()
        year_limits.forget_armed()


def _created(days_ago: float, **changes: Any) -> Run:
    at = clock.iso(clock.now() - timedelta(days=days_ago))
    run = _run(created_at=at, started_at=at, **changes)
    _put(items.run_values(run))
    year_limits.arm(items.run_values(run))
    return run


def _status(run: Run) -> str:
    got = runs_store.get_run(run.id, with_steps=False)
    assert got is not None
    return got.status


def test_the_sweep_ends_the_live_runs_past_their_limit_and_no_other(
    requests: list[dict[str, Any]],
) -> None:
    due = _created(367)
    due_cancelling = _created(367, status="cancelling")
    ended = _created(367, status="completed")
    young = _created(300)
    assert year_limits.sweep() == 2
    for run in (due, due_cancelling):
        done = runs_store.get_run(run.id, with_steps=False)
        assert done is not None and done.status == "timedOut"
        assert done.error == YEAR_LIMIT_ERROR
    assert _status(ended) == "completed" and _status(young) == "running"
    # The due hour's bucket is done with; the young run's stays for its sweep.
    assert not year_limit_store.bucket_exists(*year_limits.bucket_of(items.run_values(due)))
    assert year_limit_store.bucket_exists(*year_limits.bucket_of(items.run_values(young)))
    assert year_limits.sweep() == 0  # again: nothing more


def test_a_run_is_ended_within_the_hour_after_its_limit_not_before(
    requests: list[dict[str, Any]],
) -> None:
    run = _created(0)
    limit = clock.parse_iso(run.created_at) + YEAR_LIMIT
    assert year_limits.sweep(now=limit - timedelta(seconds=1)) == 0
    assert _status(run) == "running"
    # A later hourly sweep (or one a day late, made up for by the next) ends it.
    assert year_limits.sweep(now=limit + timedelta(hours=20)) == 1
    assert _status(run) == "timedOut"


def test_a_burst_of_starts_writes_one_bucket_and_no_schedule(
    requests: list[dict[str, Any]],
) -> None:
    """Fifty runs started in one hour of one project: their stream records write the
    hour's bucket once; no `CreateSchedule`, and no `DeleteSchedule` when they end."""
    runs = [
        _run(created_at=clock.iso(clock.now()), invoke_seq=1, handled_seq=0, lease_until_ms=0)
        for _ in range(50)
    ]
    year_limits.forget_armed()
    requests.clear()
    for run in runs:
        image = items.run_values(run)
        stream.handle_record({"eventName": "INSERT", "dynamodb": {"NewImage": _typed(image)}})
        ended = {**image, "status": "completed", "handledSeq": 1}
        stream.handle_record(
            {
                "eventName": "MODIFY",
                "dynamodb": {"OldImage": _typed(image), "NewImage": _typed(ended)},
            }
        )
    assert [r for r in requests if r["service"] == "scheduler"] == []
    bucket_writes = [
        r
        for r in requests
        if r["operation"] == "PutItem"
        and r["params"]["Item"]["pk"]["S"].startswith(year_limit_store.PREFIX)
    ]
    assert len(bucket_writes) == 1


def test_the_sweep_reads_nothing_per_live_run_before_its_limit(
    requests: list[dict[str, Any]],
) -> None:
    """A hundred live runs a day old: the sweep reads the two days' buckets around its cutoff
    (each day's shards and its unsharded key of older stacks: empty) and no run."""
    for _ in range(100):
        _created(1)
    requests.clear()
    assert year_limits.sweep() == 0
    reads = [(r["operation"], r["params"].get("IndexName")) for r in requests]
    assert reads == [("Query", None)] * 2 * (year_limit_store.SHARDS + 1)
    assert all(r["parsed"].get("Count") == 0 for r in requests)


def _typed(values: dict[str, Any]) -> dict[str, Any]:
    from ezgh_engine.adapters import ddb

    return ddb.to_item({k: v for k, v in values.items() if v is not None})


def test_project_isolation(requests: list[dict[str, Any]]) -> None:
    """A bucket names its project: another project's run of the same hour is swept from its
    own index, each once."""
    other = "33333333-3333-4333-8333-333333333333"
    mine, theirs = _created(367), _created(367, project_id=other)
    assert year_limits.sweep() == 2
    assert _status(mine) == _status(theirs) == "timedOut"


def test_buckets_spread_over_the_day_key_s_shards(requests: list[dict[str, Any]]) -> None:
    """At the top of an hour every stream environment writes a bucket for every project at
    once: they land on `SHARDS` keys (by project), not on one day key; each is swept."""
    projects = [f"{n:08x}-3333-4333-8333-333333333333" for n in range(40)]
    runs = [_created(367, project_id=p) for p in projects]
    keys = {
        r["params"]["Item"]["pk"]["S"]
        for r in requests
        if r["operation"] == "PutItem"
        and r["params"]["Item"]["pk"]["S"].startswith(year_limit_store.PREFIX)
    }
    assert len(keys) == year_limit_store.SHARDS  # 40 projects: every shard takes some
    assert year_limits.sweep() == len(runs)
    assert {_status(r) for r in runs} == {"timedOut"}


def test_a_bucket_an_older_stack_wrote_on_the_unsharded_key_is_swept(
    requests: list[dict[str, Any]],
) -> None:
    run = _created(367)
    hour, project = year_limits.bucket_of(items.run_values(run))  # type: ignore[misc]
    year_limit_store.delete_bucket(hour, project)
    legacy = year_limit_store.bucket_key(hour, project, legacy=True)
    assert "#" not in legacy["pk"]["S"].removeprefix(year_limit_store.PREFIX)  # a day, no shard
    _put({"pk": legacy["pk"]["S"], "sk": legacy["sk"]["S"]})
    assert year_limits.sweep() == 1
    assert _status(run) == "timedOut"
    got = aws.client("dynamodb").get_item(
        TableName=settings().runs_table, Key=legacy, ConsistentRead=True
    )
    assert "Item" not in got  # done with: deleted where it was written
