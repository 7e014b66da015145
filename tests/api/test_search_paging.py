"""SearchRuns and `GET /jobs` read a bounded number of index items per request (a page of
100 runs with 10,000 stored), and their cursors still visit every match once.

The default listing (no filter) is one read of `limit` items. A filtered one reads on until
it has `limit` matches or `SEARCH_READ_BUDGET` items, then answers what it has with a cursor
where it stopped: a status only a few runs have no longer walks the project's whole index in
one request (it did, page after page, for as long as the page was not full).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ezgh_engine import ids
from ezgh_engine.adapters import runs_index, runs_store
from ezgh_engine.core.flows.jobs import Actor, JobInput
from ezgh_engine.core.models import Principal, Run
from ezgh_engine.topology import RUNS_INDEX_SHARDS

pytestmark = pytest.mark.usefixtures("aws_env")

PROJECT = "00000000-0000-4000-8000-0000000000a1"
ADMIN = Principal("org", PROJECT, "key", (("*", None),))
BASE = datetime(2026, 1, 1, tzinfo=UTC)
GRAPH = {"nodes": [{"id": "start", "moduleType": "trigger.manual"}], "edges": []}


def _store(count: int, failed: set[int], workflow: str = "w", value: Any = None) -> list[str]:
    """`count` runs created a second apart (index i = i seconds after BASE); the ones in
    `failed` are failed, the rest completed. Their IDs, newest first."""
    made = []
    for i in range(count):
        at = (BASE + timedelta(seconds=i)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        run = Run(
            id=ids.new_id(),
            org_id="org",
            project_id=PROJECT,
            app_id="00000000-0000-4000-8000-0000000000a2",
            workflow=workflow,
            status="failed" if i in failed else "completed",
            input=value(i) if callable(value) else {"i": i},
            attempt=1,
            created_at=at,
            started_at=at,
            version=1,
        )
        runs_store.create_run(run, now_epoch_s=int(BASE.timestamp()))
        made.append(run.id)
    return made[::-1]


def _search(limit: int, cursor: str | None, **filters: str) -> tuple[list[str], str | None]:
    runs, nxt = runs_store.search_runs(
        PROJECT,
        filters=filters,
        created_after=None,
        created_before=None,
        limit=limit,
        cursor=cursor,
    )
    return [r.id for r in runs], nxt


class _Counting:
    """The DynamoDB client, counting the items each query asked for and read."""

    def __init__(self, client: Any) -> None:
        self.client, self.limits, self.scanned = client, [], []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def query(self, **kwargs: Any) -> Any:
        answer = self.client.query(**kwargs)
        self.limits.append(kwargs.get("Limit"))
        self.scanned.append(answer.get("ScannedCount", len(answer.get("Items", []))))
        return answer


def _count(monkeypatch: pytest.MonkeyPatch) -> _Counting:
    counting = _Counting(runs_index._ddb())
    monkeypatch.setattr(runs_index, "_ddb", lambda: counting)
    return counting


PARTITIONS = RUNS_INDEX_SHARDS + 1  # the shards, and the whole-item index's older runs


def test_the_default_listing_reads_about_a_page_over_every_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    newest_first = _store(30, set())
    counting = _count(monkeypatch)
    page, cursor = _search(10, None)
    assert page == newest_first[:10] and cursor
    # A small chunk of each partition (no filter: nothing read is thrown away), and a chunk
    # more of a shard the merge read out before the page was full.
    assert len(counting.limits) >= PARTITIONS
    assert sum(counting.scanned) <= 10 + PARTITIONS * 4
    rest, last = _search(25, cursor)
    assert rest == newest_first[10:] and last is None


def test_a_rare_status_is_read_from_its_own_index_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    newest_first = _store(60, {0, 19})  # the oldest run and one in the middle
    failed = [newest_first[60 - 1 - 19], newest_first[-1]]
    counting = _count(monkeypatch)
    page, cursor = _search(10, None, status="failed")
    assert page == failed and cursor is None
    assert sum(counting.scanned) == 2  # the matches, nothing else


def test_a_filter_outside_the_index_key_pages_within_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """status + workflow: the status index's entries are tested for the workflow, at most
    the budget a page; an empty page with a cursor says the budget ran out first."""
    _store(60, set())
    rare = _store(1, set(), workflow="rare")
    monkeypatch.setattr(runs_index, "READ_BUDGET", 25)
    counting = _count(monkeypatch)
    seen: list[str] = []
    cursor: str | None = None
    requests = 0
    while True:
        counting.scanned.clear()
        page, cursor = _search(10, cursor, status="completed", workflow="rare")
        assert sum(counting.scanned) <= 25 + PARTITIONS * 25
        seen += page
        requests += 1
        if cursor is None:
            break
    assert seen == rare


def test_a_scoped_search_pages_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    newest_first = _store(40, set())
    monkeypatch.setattr(runs_index, "READ_BUDGET", 15)
    wanted = set(newest_first[30:])  # the oldest ten only
    seen: list[str] = []
    cursor: str | None = None
    while True:
        runs, cursor = runs_store.search_runs(
            PROJECT,
            filters={},
            created_after=None,
            created_before=None,
            limit=5,
            cursor=cursor,
            keep=lambda r: r.id in wanted,
        )
        assert len(runs) <= 5
        seen += [r.id for r in runs]
        if cursor is None:
            break
    assert seen == newest_first[30:]


def test_jobs_by_a_rare_status_read_a_bounded_number_of_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`GET /jobs` reads at most its budget of index entries, and for those only their run
    items (a batch), never a job's steps: a status few jobs have answers a short page."""
    from ezgh_engine.adapters import flows_store
    from ezgh_engine.core.flows.graph import parse_graph
    from ezgh_engine.service import flow_jobs

    def job_input(i: int) -> Any:
        return JobInput("flow-1", "commit-1", "2026-01-01T00:00:00.000Z", "main", {"i": i}, "t",
                        Actor("key", "api"))  # fmt: skip

    newest_first = _store(30, {2}, workflow="flow", value=lambda i: job_input(i).to_run_input())
    for n, run_id in enumerate(reversed(newest_first)):
        at = (BASE + timedelta(seconds=n)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        flow_jobs.index_job(PROJECT, run_id, job_input(n), parse_graph(GRAPH), at)
    monkeypatch.setattr(flow_jobs, "JOBS_READ_BUDGET", 10, raising=False)
    reads: list[str] = []
    original = flows_store.run_items
    monkeypatch.setattr(flows_store, "run_items", lambda ids: reads.extend(ids) or original(ids))
    monkeypatch.setattr(runs_store, "get_run", lambda *a, **k: pytest.fail("a whole run read"))
    page, cursor = flow_jobs.search_jobs(ADMIN, status="FAILED", limit=5)
    assert page == [] and cursor and len(reads) == 10
    seen = []
    while cursor:
        reads.clear()
        page, cursor = flow_jobs.search_jobs(ADMIN, status="FAILED", limit=5, cursor=cursor)
        assert len(reads) <= 10
        seen += [j["id"] for j in page]
    assert seen == [newest_first[30 - 1 - 2]]
    reads.clear()
    page, cursor = flow_jobs.search_jobs(ADMIN, limit=3)  # no status: read what it lists
    assert [j["id"] for j in page] == newest_first[:3] and cursor and len(reads) <= 4
