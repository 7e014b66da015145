"""The runs indexes: write-sharded, narrow, merged on read (docs/architecture.md, "The runs
indexes"), on moto and DynamoDB Local.

A project's runs spread over `RUNS_INDEX_SHARDS` keys of each index; listings merge them
newest first and page with one position; filters read the index of their key; a `runKey`
search reads the key's items; the one-year sweep reads every shard of the live statuses; a
lease write changes nothing any narrow index holds; runs written before these indexes are
listed from `gsi1` until `ezgh ops runs-index` moves them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ezgh_engine import ids
from ezgh_engine.adapters import (
    ddb,
    invocations_store,
    run_control_store,
    runs_index,
    runs_store,
    year_limit_store,
)
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_index_migration as migration
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core.flows.jobs import interpreter_app_id
from ezgh_engine.core.models import Run, RunError
from ezgh_engine.topology import (
    RUNS_BY_STATUS,
    RUNS_INDEX_SHARDS,
    RUNS_LEGACY_INDEX,
    RUNS_NARROW_INDEXES,
    RUNS_TABLE,
)

pytestmark = pytest.mark.usefixtures("aws_env")

PROJECT = "00000000-0000-4000-8000-0000000000b1"
APP_A = "00000000-0000-4000-8000-0000000000b2"
APP_B = "00000000-0000-4000-8000-0000000000b3"
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _at(i: int) -> str:
    return (BASE + timedelta(seconds=i)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _run(
    i: int, *, app: str = APP_A, workflow: str = "w", status: str = "running", **kw: Any
) -> Run:
    return Run(
        # Derived IDs: the same shards every time (40 of them reach all eight).
        id=ids.derived_id("runs-index-test", f"{i}/{app}/{workflow}/{status}"),
        org_id="org",
        project_id=PROJECT,
        app_id=app,
        workflow=workflow,
        status=status,
        input={"i": i},
        attempt=1,
        created_at=_at(i),
        started_at=_at(i),
        version=1,
        **kw,
    )


def _create(run: Run) -> Run:
    runs_store.create_run(run, now_epoch_s=int(BASE.timestamp()))
    return run


def _ids(
    limit: int = 100, cursor: str | None = None, **filters: Any
) -> tuple[list[str], str | None]:
    after, before = filters.pop("created_after", None), filters.pop("created_before", None)
    runs, nxt = runs_store.search_runs(
        PROJECT,
        filters=filters,
        created_after=after,
        created_before=before,
        limit=limit,
        cursor=cursor,
    )
    return [r.id for r in runs], nxt


def _all_pages(limit: int, **filters: Any) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = _ids(limit, cursor, **filters)
        assert len(page) <= limit
        seen += page
        if cursor is None:
            return seen


def _item(run_id: str) -> dict[str, Any]:
    got = client("dynamodb").get_item(
        TableName=settings().runs_table, Key=items.run_key(run_id), ConsistentRead=True
    )
    return ddb.from_item(got["Item"])


def test_runs_spread_over_every_shard_and_list_newest_first_page_by_page() -> None:
    made = [_create(_run(i)) for i in range(40)]
    newest_first = [r.id for r in reversed(made)]
    shards = {items.shard_of(r.id) for r in made}
    assert len(shards) == RUNS_INDEX_SHARDS  # 40 IDs reach all 8 keys
    for limit in (1, 3, 7, 40, 100):
        assert _all_pages(limit) == newest_first


def test_each_filter_reads_its_own_index() -> None:
    a = [_create(_run(i)) for i in range(6)]
    b = [_create(_run(10 + i, app=APP_B, workflow="other")) for i in range(4)]
    ended = _create(_run(20, status="completed"))
    assert _all_pages(2, appId=APP_B) == [r.id for r in reversed(b)]
    assert _all_pages(2, workflow="w") == [ended.id] + [r.id for r in reversed(a)]
    assert _all_pages(3, status="completed") == [ended.id]
    assert _all_pages(3, status="running", appId=APP_B, workflow="other") == [
        r.id for r in reversed(b)
    ]
    window = _all_pages(2, created_after=_at(2), created_before=_at(11))
    assert window == [b[0].id] + [r.id for r in reversed(a[2:])]


def test_a_status_change_moves_the_run_between_status_keys() -> None:
    run = _create(_run(1))
    assert _ids(status="running")[0] == [run.id]
    stored = runs_store.get_run(run.id)
    assert stored is not None
    error = RunError("workflows.cancelled", "RunCancelledError", "stop")
    assert run_control_store.end_now(stored, "cancelled", error, at=_at(2))
    assert _ids(status="running")[0] == []
    assert _ids(status="cancelled")[0] == [run.id]


def test_a_page_out_of_budget_is_empty_with_a_cursor_and_paging_finds_every_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i in range(50):
        _create(_run(i))
    rare = _create(_run(-5, workflow="rare"))  # the oldest: under every other entry
    monkeypatch.setattr(runs_index, "READ_BUDGET", 10)
    first, cursor = _ids(5, status="running", workflow="rare")
    assert first == [] and cursor  # the budget ran out before a match: said with a cursor
    assert _all_pages(5, status="running", workflow="rare") == [rare.id]


def test_a_run_key_search_reads_the_key_items_of_both_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ezgh_engine.adapters import registry_store
    from ezgh_engine.core.models import App

    app = App(id=APP_A, slug="wfa_a", org_id="org", project_id=PROJECT, name="a", kind="push",
              url=None, status="synced", workflows=("w",), signing_key="k",
              created_at=_at(0))  # fmt: skip
    monkeypatch.setattr(registry_store, "list_apps", lambda _project: [app])
    keyed = _create(_run(1, run_key="order-1"))
    old = _create(_run(2))
    client("dynamodb").put_item(  # a key taken before keys were scoped
        TableName=settings().runs_table,
        Item=ddb.to_item(
            {"pk": items.run_key_pk(PROJECT, "order-2", None), "sk": "RUNKEY", "runId": old.id}
        ),
    )
    monkeypatch.setattr(runs_index, "merged_page", lambda *a, **k: pytest.fail("index read"))
    assert _ids(runKey="order-1")[0] == [keyed.id]
    assert _ids(runKey="order-2")[0] == [old.id]
    assert _ids(runKey="order-1", status="completed")[0] == []
    assert _ids(runKey="nope") == ([], None)


def test_the_year_limit_sweep_reads_live_runs_of_every_shard_and_jobs() -> None:
    live = [_create(_run(i)) for i in range(30)]
    job = _create(_run(31, app=interpreter_app_id(PROJECT), workflow="flow"))
    ended = _create(_run(32, status="completed"))
    later = _create(_run(4000))  # another hour
    found = {
        v["id"]
        for v in year_limit_store.live_runs_created(PROJECT, BASE, BASE + timedelta(hours=1))
    }
    assert found == {r.id for r in live} | {job.id}
    assert ended.id not in found and later.id not in found
    assert _ids(workflow="flow")[0] == []  # a job is never listed as a run


def test_a_lease_writes_nothing_any_narrow_index_holds() -> None:
    """DynamoDB writes an index entry only when the item's entry changes (topology.Index):
    a lease (epoch, leaseUntil, version) changes none; an end moves the status entry only."""
    run = _create(_run(1))
    before = _item(run.id)
    assert invocations_store.take_lease(run.id, 1, now_ms=1, lease_ms=60_000) is not None
    leased = _item(run.id)
    assert leased["leaseUntil"] != before["leaseUntil"]
    assert {i.name: i.writes(before, leased) for i in RUNS_TABLE.indexes} == {
        i.name: 0 for i in RUNS_TABLE.indexes
    }
    stored = runs_store.get_run(run.id)
    assert stored is not None
    error = RunError("workflows.timedOut", "RunTimedOutError", "late")
    assert run_control_store.end_now(stored, "timedOut", error, at=_at(2))
    done = _item(run.id)
    writes = {i.name: i.writes(leased, done) for i in RUNS_TABLE.indexes}
    assert writes == {i.name: 2 if i is RUNS_BY_STATUS else 0 for i in RUNS_TABLE.indexes}
    # The same lease on a run of the old whole-item index: a full copy each time.
    whole = {**before, "gsi1pk": items.runs_index_pk(PROJECT), "gsi1sk": "x"}
    assert RUNS_LEGACY_INDEX.writes(whole, {**whole, "leaseUntil": 5}) == 1


def _as_written_before_the_narrow_indexes(run: Run) -> None:
    """Make a run's item as an older version wrote it: in `gsi1`, in no narrow index."""
    narrow = sorted({i.partition_key for i in RUNS_NARROW_INDEXES} | {"rSort"})
    names = {f"#n{i}": n for i, n in enumerate(narrow)}
    client("dynamodb").update_item(
        TableName=settings().runs_table,
        Key=items.run_key(run.id),
        UpdateExpression="SET gsi1pk = :pk, gsi1sk = :sk REMOVE " + ", ".join(names),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues={
            ":pk": {"S": items.runs_index_pk(PROJECT)},
            ":sk": {"S": items.index_sort(run.created_at, run.id)},
        },
    )


def test_runs_from_before_the_narrow_indexes_stay_listed_through_their_move() -> None:
    made = [_create(_run(i, status="completed" if i % 3 == 0 else "running")) for i in range(20)]
    old = made[:12]
    for run in old:
        _as_written_before_the_narrow_indexes(run)
    newest_first = [r.id for r in reversed(made)]
    running = [r.id for r in reversed(made) if r.status == "running"]
    assert _all_pages(4) == newest_first  # from gsi1 and the shards, merged
    assert _all_pages(4, status="running") == running
    live = year_limit_store.live_runs_created(PROJECT, BASE, BASE + timedelta(hours=1))
    assert {v["id"] for v in live} == set(running)

    assert migration.indexes_missing() == []
    dry = migration.backfill(PROJECT, apply=False)
    assert (dry.found, dry.moved) == (12, 0)
    # Half moved (a backfill interrupted): each run listed once, none lost.
    for values in migration.legacy_runs(PROJECT)[:6]:
        assert migration.move(values)
    assert _all_pages(3) == newest_first
    done = migration.backfill(PROJECT)
    assert (done.found, done.moved, done.changed) == (6, 6, 0)
    assert migration.legacy_runs(None) == []
    assert _all_pages(4) == newest_first
    assert _all_pages(4, status="running") == running
    assert "gsi1pk" not in _item(old[0].id)


def test_a_cursor_of_the_whole_item_index_still_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's cursor from before the upgrade (gsi1's key) resumes at the same place."""
    made = [_create(_run(i)) for i in range(6)]
    scope = json.dumps(["runs", PROJECT, {}, None, None], sort_keys=True)
    last = made[3]
    old_cursor = ddb.encode_cursor(
        {
            "pk": {"S": items.run_pk(last.id)},
            "sk": {"S": items.RUN_SK},
            "gsi1pk": {"S": items.runs_index_pk(PROJECT)},
            "gsi1sk": {"S": items.index_sort(last.created_at, last.id)},
        },
        scope=scope,
    )
    assert _ids(10, old_cursor)[0] == [r.id for r in reversed(made[:3])]
