"""The scale model's key attribution and arithmetic on a tiny recorded workload: requests
fed to the recorder as boto's observer would, no engine run, no timing."""

from __future__ import annotations

from typing import Any

from bench import scale
from bench.instrument import Invocation, Recorder, origin

RUNS_TABLE = "ezgh-local-runs"
REGISTRY = "ezgh-local-registry"
PROJECT = "11111111-1111-4111-8111-111111111111"


def _s(v: str) -> dict[str, str]:
    return {"S": v}


def _feed(rec: Recorder, operation: str, params: dict[str, Any], status: int = 200) -> None:
    with origin("function:api"):
        rec.on_aws(
            {
                "service": "dynamodb",
                "operation": operation,
                "params": params,
                "parsed": {},
                "status": status,
            }
        )


def _run(rec: Recorder, run_id: str, second: int) -> Any:
    """One run: its item created in the project's index, updated twice (once moving no
    index key), a refused update, the key's rate counter of the second, a read of the app."""
    rec.clear(keep_sizes=True)
    rec.active = True
    item = {
        "pk": _s(f"RUN#{run_id}"),
        "sk": _s("RUN"),
        "gsi1pk": _s(f"RUNS#{PROJECT}"),
        "gsi1sk": _s(run_id),
        "status": _s("queued"),
    }
    _feed(rec, "PutItem", {"TableName": RUNS_TABLE, "Item": item})
    key = {"pk": _s(f"RUN#{run_id}"), "sk": _s("RUN")}
    update = {
        "TableName": RUNS_TABLE,
        "Key": key,
        "UpdateExpression": "SET #s = :s",
        "ExpressionAttributeNames": {"#s": "status"},
        "ExpressionAttributeValues": {":s": _s("running")},
    }
    _feed(rec, "UpdateItem", update)
    _feed(rec, "UpdateItem", update, status=400)  # refused: no index copy
    _feed(rec, "UpdateItem", {**update, "UpdateExpression": "REMOVE gsi1pk"})  # leaves it
    _feed(
        rec,
        "UpdateItem",
        {
            "TableName": REGISTRY,
            "Key": {"pk": _s(f"RATE#{PROJECT}#{1_900_000_000 + second}"), "sk": _s("RATE")},
            "UpdateExpression": "ADD #n :one",
            "ExpressionAttributeNames": {"#n": "n"},
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        },
    )
    _feed(
        rec,
        "GetItem",
        {"TableName": REGISTRY, "Key": {"pk": _s(f"APP#{PROJECT}"), "sk": _s("APP")}},
    )
    rec.active = False
    calls = list(rec.calls)
    invocations = [
        Invocation("api", 0.05, "run", cpu_seconds=0.01),
        Invocation("invoker", 1.5, "run", cpu_seconds=0.02),
    ]
    return (calls, invocations, dict(rec.sizes), {PROJECT})


def test_index_copies_land_on_the_index_key_the_item_carries() -> None:
    rec = Recorder()
    calls = _run(rec, "r-1", 0)[0]
    copies = [a.index_writes for c in calls for a in c.accesses if a.kind == "write"]
    # put: a copy; update: a copy (ALL projection); refused: none; the REMOVE: the old key.
    assert copies == [
        [("gsi1", f"RUNS#{PROJECT}")],
        [("gsi1", f"RUNS#{PROJECT}")],
        [],
        [("gsi1", f"RUNS#{PROJECT}")],
        [],
    ]


def test_shared_keys_scale_with_the_rate_and_a_runs_own_do_not() -> None:
    rec = Recorder()
    workload = scale.attribute([_run(rec, "r-1", 0), _run(rec, "r-2", 1)], 10, 100)
    keys = {(k.place, k.key): k for k in workload.keys.values()}
    index = keys[("runs/gsi1", "RUNS#<id>")]
    assert index.shared and index.wru == 6  # 3 copies a run, 1 WRU each
    assert keys[("registry", "RATE#<id>#<t>")].shared
    assert not keys[("runs", "RUN#r-1")].shared
    assert keys[("runs", "RUN#r-1")].wru == 4  # put, update, the refused one, the remove
    m = scale.model(workload, 1000)
    by = {x["limit"]: x for x in m["limits"]}
    hot = by["DynamoDB WCU/s of key runs/gsi1 RUNS#<id>"]
    assert hot["used"] == 3000 and hot["share"] == 3 and hot["reached_at"] == 1000 / 3
    assert by["DynamoDB WCU/s of key runs RUN#r-1"]["used"] == 4  # not scaled
    assert by["DynamoDB RCU/s of key registry APP#<id>"]["used"] == 500  # 0.5 RRU a run
    # The invoker: 1,000 starts over 4 shards read 4 times a second: groups of 10 (the
    # most); each held 1.48 s of waiting + 10 x 0.02 s CPU x 1769/256.
    held = 1.48 + 10 * 0.02 * 1769 / 256
    assert abs(m["concurrency"]["invoker"] - 1000 / 10 * held) < 1e-6
    assert abs(m["concurrency"]["api"] - 50.0) < 1e-9
    assert m["first_aws"] == "DynamoDB WCU/s of key runs/gsi1 RUNS#<id>"


def test_the_year_limit_bucket_scales_with_environments_not_starts() -> None:
    """Each recorded run starts in a fresh project, so each writes its hour's year-limit
    bucket; a deployment writes it once per stream environment, hour and project
    (`year_limits.arm`), so the day's key takes a few writes an hour, not one a start."""
    from ezgh_engine.adapters import year_limit_store

    rec = Recorder()
    runs = []
    for n in (1, 2):
        calls, invocations, sizes, identities = _run(rec, f"r-{n}", n)
        rec.clear(keep_sizes=True)
        rec.active = True
        day = f"{year_limit_store.PREFIX}2026-12-06#3"
        _feed(rec, "PutItem", {"TableName": RUNS_TABLE, "Item": {"pk": _s(day), "sk": _s("h")}})
        rec.active = False
        runs.append((calls + list(rec.calls), invocations, sizes, identities))
    m = scale.model(scale.attribute(runs, 10, 100), 1000)
    hottest = [x["limit"] for x in m["limits"] if x["limit"].startswith("DynamoDB WCU/s")]
    # Scaled by starts it would take 1,000 WCU a second (one write a run): the hottest key.
    # Scaled by environments, 5 shards' environments write it once an hour: not among the
    # three hottest (the index key, the rate counter, a run's own item).
    assert not any(year_limit_store.PREFIX in name for name in hottest), hottest
    assert len(hottest) == 3
