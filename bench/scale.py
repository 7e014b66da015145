"""`python -m bench --scale`: where one project's bursts meet a limit first.

Records a workload (runs of a `steps`-step workflow whose steps each take `step_ms`, one
after another on a fresh state, each a lone start) and attributes every AWS request to the
partition keys it lands on (bench/keys.py: an item's key and each index copy's key) and to
the function that made it. Then, for each rate of starts a second in one project, scales
the per-run figures (`model`):

- a key that every run shares (the same key in two runs: a project's index key, a key's
  rate counter of the second) takes rate x its units per run; a key of one run (its items)
  takes at most its run's units whatever the rate; a key written once per environment, hour
  and project (bench/keys.py `hourly_per_environment`: the year-limit buckets) takes one
  write per stream environment an hour, whatever the rate. Compared with DynamoDB's per-partition
  limits (`PARTITION_WCU`, `PARTITION_RCU`);
- each function's concurrency by Little's law: rate x invocations per run x measured
  seconds per invocation. The invoker's starts come in groups (docs/architecture.md, "The
  invoker"): a stream shard's batch (Lambda reads each shard `SHARD_READS_PER_SECOND` times
  a second) holds rate / shards / reads starts, at most `GROUP_MAX_MESSAGES`, so a group of
  f is held as long as one push's waiting plus f pushes' CPU (stretched to 256 MB's vCPU
  share: the worst case, CPU not overlapping). The stream function's concurrency is at most
  its shards. Compared with the account's 1,000, less the stack's reservations;
- Scheduler and SQS requests a second against their quotas; the HTTP API's stage rate and
  the API key's own limit (the stack's and the engine's settings).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ezgh_engine.config import DEFAULT_KEY_RATE_LIMIT
from ezgh_engine.core.messages import GROUP_MAX_MESSAGES
from ezgh_engine.topology import TOPOLOGY

from bench.instrument import AwsCall, Invocation, index_units, request_units

RATES = (10, 100, 1000)
# DynamoDB's throughput per partition (a partition key never spreads over more than one):
# 3,000 read units and 1,000 write units a second.
PARTITION_RCU = 3000
PARTITION_WCU = 1000
# A new on-demand table serves up to 4,000 writes and 12,000 reads a second at once: about
# four partitions, so four stream shards; more as its throughput grows (one per 1,000 WCU
# or 3,000 RCU, the per-partition limits).
INITIAL_PARTITIONS = 4
# Lambda's DynamoDB stream mapping polls each shard about four times a second, one batch
# (one stream invocation) at a time per shard (parallelization factor 1).
SHARD_READS_PER_SECOND = 4
ACCOUNT_CONCURRENCY = 1000
VCPU_MB = 1769  # Lambda gives 1 vCPU at 1,769 MB (bench/report.py)
# AWS quotas, us-east-1 defaults (docs/scale.md cites them): EventBridge Scheduler's
# CreateSchedule/DeleteSchedule request rates and its invocations (fires) a second; an SQS
# standard queue's requests are nearly unlimited, a FIFO queue without high throughput mode
# takes 300 a second (3,000 messages batched).
SCHEDULER_CREATE_PER_SECOND = 1000
SCHEDULER_FIRES_PER_SECOND = 1000
SQS_FIFO_PER_SECOND = 300

_TIME = re.compile(r"\d{9,}")


def canonical(key: str, identities: set[str] | frozenset[str] = frozenset()) -> str:
    """A partition key with its time windows masked (`RATE#k#1765000000` is the same key
    the next second: a new one each second, taking all of that second's requests) and the
    ids of what existed before its run (the project, the app, the API key) named `<id>`:
    each run of the workload gets a fresh state, and a deployment keeps one."""
    for identity in identities:
        key = key.replace(identity, "<id>")
    return _TIME.sub("<t>", key)


@dataclass
class KeyLoad:
    """What one (canonical) partition key took over the workload."""

    place: str  # table, or table/index
    key: str
    wru: float = 0.0
    rru: float = 0.0
    requests: int = 0
    runs: set[int] = field(default_factory=set)  # which runs touched it

    @property
    def shared(self) -> bool:
        return len(self.runs) > 1


@dataclass
class Workload:
    """Per-run figures of a recorded workload."""

    runs: int
    steps: int
    step_ms: int
    keys: dict[tuple[str, str], KeyLoad]
    # function -> (invocations, wall seconds, CPU seconds) summed over the runs
    functions: dict[str, tuple[int, float, float]]
    operations: dict[str, int]  # "service.Operation" -> count over the runs
    run_seconds: float


def _logical(physical: str) -> str:
    from bench.keys import table_of

    table, _, index = physical.partition("/")
    found = table_of(table)
    name = found.key if found else table
    return f"{name}/{index}" if index else name


def attribute(
    runs: list[tuple[list[AwsCall], list[Invocation], dict[tuple[str, str, str], int], set[str]]],
    steps: int,
    step_ms: int,
    run_seconds: float = 0.0,
) -> Workload:
    """Attribute each run's DynamoDB units to partition keys and its time to functions."""
    keys: dict[tuple[str, str], KeyLoad] = {}
    functions: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    operations: dict[str, int] = defaultdict(int)

    def load(place: str, key: str, identities: set[str]) -> KeyLoad:
        at = (_logical(place), canonical(key, identities))
        if at not in keys:
            keys[at] = KeyLoad(*at)
        return keys[at]

    for n, (calls, invocations, sizes, identities) in enumerate(runs):
        for call in calls:
            if call.origin == "esm:stream":
                continue  # the stream mapping's reads are free and unthrottled per key
            operations[f"{call.service}.{call.operation}"] += 1
            for access in call.accesses:
                wru, rru = request_units([access], sizes)
                if access.key is not None:
                    item = load(access.key[0], access.key[1], identities)
                elif access.read_partition is not None:
                    item = load(*access.read_partition, identities)
                else:
                    continue
                item.wru, item.rru, item.requests = (
                    item.wru + wru,
                    item.rru + rru,
                    item.requests + 1,
                )
                item.runs.add(n)
                if access.index_writes and access.key is not None:
                    each = index_units(access, sizes) / len(access.index_writes)
                    for name, value in access.index_writes:
                        copy = load(f"{access.key[0]}/{name}", value, identities)
                        copy.wru += each
                        copy.requests += 1
                        copy.runs.add(n)
        for inv in invocations:
            f = functions[inv.function]
            f[0] += 1
            f[1] += inv.seconds
            f[2] += min(inv.cpu_seconds, inv.seconds)
    return Workload(
        len(runs),
        steps,
        step_ms,
        keys,
        {k: (int(v[0]), v[1], v[2]) for k, v in functions.items()},
        dict(operations),
        run_seconds,
    )


def _reservations() -> dict[str, int]:
    from infra.stack import PUBLIC_CONCURRENCY  # the stack's reserved concurrency

    return dict(PUBLIC_CONCURRENCY)


def _api_stage_rate() -> float:
    from infra.components.api import Throttle

    return float(Throttle().rate)


def model(w: Workload, rate: float) -> dict[str, Any]:
    """Every limit's use at `rate` starts a second, and which is reached first."""
    per_run = 1 / w.runs
    limits: list[dict[str, Any]] = []

    def limit(name: str, kind: str, used: float, ceiling: float, note: str = "") -> None:
        limits.append(
            {
                "limit": name,
                "kind": kind,
                "used": used,
                "ceiling": ceiling,
                "share": used / ceiling if ceiling else math.inf,
                # The starts a second at which it is reached (all of it scales with the rate
                # but a run's own keys and the stream's shard cap: an estimate for those).
                "reached_at": rate * ceiling / used if used else math.inf,
                "note": note,
            }
        )

    # DynamoDB: the hottest shared key's writes and reads (a run's own keys never scale).
    per_start = [k for k in w.keys.values() if "/" not in k.place and not _hourly(k)]
    table_wru = sum(k.wru for k in per_start) * per_run * rate
    table_rru = sum(k.rru for k in per_start) * per_run * rate
    partitions = max(
        INITIAL_PARTITIONS,
        math.ceil(table_wru / PARTITION_WCU),
        math.ceil(table_rru / PARTITION_RCU),
    )

    def key_rate(k: KeyLoad, attr: str) -> float:
        units = getattr(k, attr)
        if _hourly(k):  # one write per stream environment (at most one per shard) an hour
            return units / max(1, len(k.runs)) * partitions / 3600
        return units * (per_run * rate if k.shared else 1)

    for attr, ceiling, unit in (("wru", PARTITION_WCU, "WCU"), ("rru", PARTITION_RCU, "RCU")):
        scaled = [(key_rate(k, attr), k) for k in w.keys.values() if getattr(k, attr)]
        for used, hot in sorted(scaled, key=lambda s: -s[0])[:3]:  # the three hottest
            limit(
                f"DynamoDB {unit}/s of key {hot.place} {hot.key}",
                "AWS, per partition key (cannot be raised)",
                used,
                ceiling,
            )
    # Lambda: concurrency by function.
    reserved = _reservations()
    concurrency: dict[str, float] = {}
    invoker = TOPOLOGY.function("invoker")
    for fn, (count, seconds, cpu) in sorted(w.functions.items()):
        per_second = count * per_run * rate
        mean, mean_cpu = seconds / count, cpu / count
        if fn == invoker.key:
            fill = min(
                GROUP_MAX_MESSAGES, max(1.0, per_second / partitions / SHARD_READS_PER_SECOND)
            )
            stretched = mean_cpu * max(1.0, VCPU_MB / invoker.memory_mb)
            held = (mean - mean_cpu) + fill * stretched
            concurrency[fn] = per_second / fill * held
        elif fn == "stream":
            concurrency[fn] = min(partitions, per_second * mean)
        else:
            concurrency[fn] = per_second * mean
    for fn, used in concurrency.items():
        if fn in reserved:
            limit(f"Lambda concurrency of {fn} (reserved)", "stack setting", used, reserved[fn])
    unreserved = ACCOUNT_CONCURRENCY - sum(reserved.values())
    shared = sum(v for fn, v in concurrency.items() if fn not in reserved)
    limit(
        "Lambda concurrency of the unreserved functions ("
        + ", ".join(f"{fn} {v:,.0f}" for fn, v in concurrency.items() if fn not in reserved)
        + ")",
        "AWS account quota (raised on request)",
        shared,
        unreserved,
    )
    limit(
        "Lambda concurrency, account",
        "AWS account quota (raised on request)",
        sum(concurrency.values()),
        ACCOUNT_CONCURRENCY,
    )
    ops = {k: v * per_run * rate for k, v in w.operations.items()}
    limit(
        "Scheduler CreateSchedule/s",
        "AWS quota (raised on request)",
        ops.get("scheduler.CreateSchedule", 0.0),
        SCHEDULER_CREATE_PER_SECOND,
    )
    sqs = sum(v for k, v in ops.items() if k.startswith("sqs."))
    limit("SQS requests/s (standard queues)", "AWS (nearly unlimited)", sqs, math.inf)
    api = w.functions.get("api", (0, 0.0, 0.0))[0] * per_run * rate
    limit("HTTP API requests/s (the stage's throttle)", "stack setting", api, _api_stage_rate())
    limit(
        "API key requests/s (EZGH_KEY_RATE_LIMIT, default)",
        "engine setting (one key)",
        api,
        DEFAULT_KEY_RATE_LIMIT,
    )
    first = max(limits, key=lambda x: x["share"])
    aws = [x for x in limits if x["kind"].startswith("AWS")]
    first_aws = max(aws, key=lambda x: x["share"])
    return {
        "first_aws": first_aws["limit"] if first_aws["share"] >= 1 else None,
        "rate": rate,
        "partitions": partitions,
        "concurrency": concurrency,
        "limits": limits,
        "first": first["limit"] if first["share"] >= 1 else None,
        "highest": first,
    }


def _hourly(k: KeyLoad) -> bool:
    from bench.keys import hourly_per_environment

    return hourly_per_environment(k.key)


def record(engine: Any, runs: int, steps: int, step_ms: int) -> Workload:
    """Run `runs` runs of `steps` steps of `step_ms` each, one after another, and attribute
    them (the key's rate limit set so that one key may start `max(RATES)` runs a second,
    as a team would, so the counter shows its shards)."""
    import os

    from ezgh_engine import config

    from bench.engine import Engine

    assert isinstance(engine, Engine)
    previous = os.environ.get(config.ENV_KEY_RATE_LIMIT)
    os.environ[config.ENV_KEY_RATE_LIMIT] = str(max(RATES))
    config.reset_settings()
    try:
        results = [engine.run(steps, None, step_ms=step_ms) for _ in range(runs)]
    finally:
        if previous is None:
            os.environ.pop(config.ENV_KEY_RATE_LIMIT, None)
        else:
            os.environ[config.ENV_KEY_RATE_LIMIT] = previous
        config.reset_settings()
    seconds = sum(r.seconds for r in results) / len(results)
    return attribute(
        [(r.calls, r.invocations, r.sizes, r.identities) for r in results], steps, step_ms, seconds
    )


def figures(w: Workload, rates: tuple[int, ...] = RATES) -> dict[str, Any]:
    hot = sorted(w.keys.values(), key=lambda k: -(k.wru + k.rru) * (w.runs if k.shared else 1))
    return {
        "workload": {
            "runs": w.runs,
            "steps": w.steps,
            "step_ms": w.step_ms,
            "run_seconds": w.run_seconds,
            "functions": {
                fn: {
                    "invocations_per_run": n / w.runs,
                    "seconds_per_invocation": s / n,
                    "cpu_seconds_per_invocation": c / n,
                }
                for fn, (n, s, c) in sorted(w.functions.items())
            },
            "keys": [
                {
                    "place": k.place,
                    "key": k.key,
                    "shared": k.shared,
                    "wru_per_run": k.wru / w.runs if k.shared else k.wru / max(1, len(k.runs)),
                    "rru_per_run": k.rru / w.runs if k.shared else k.rru / max(1, len(k.runs)),
                }
                for k in hot[:12]
            ],
        },
        "rates": [model(w, r) for r in rates],
    }


def report(out: dict[str, Any]) -> str:
    w = out["workload"]
    lines = [
        f"Scale model: one project, a {w['steps']}-step workflow with {w['step_ms']} ms steps "
        f"(recorded: {w['runs']} runs, {w['run_seconds']:.2f} s each on the local runtime)",
        "",
        "Per run, by function (measured locally):",
        "| function | invocations/run | s/invocation | CPU s/invocation |",
        "|---|---|---|---|",
    ]
    for fn, f in w["functions"].items():
        lines.append(
            f"| {fn} | {f['invocations_per_run']:.2f} | {f['seconds_per_invocation']:.3f}"
            f" | {f['cpu_seconds_per_invocation']:.3f} |"
        )
    lines += [
        "",
        "Per run, by partition key (shared: the same key in every run; else one run's own):",
        "| table | key | shared | WRU/run | RRU/run |",
        "|---|---|---|---|---|",
    ]
    for k in w["keys"]:
        lines.append(
            f"| {k['place']} | {k['key']} | {'yes' if k['shared'] else 'no'}"
            f" | {k['wru_per_run']:.2f} | {k['rru_per_run']:.2f} |"
        )
    for m in out["rates"]:
        lines += [
            "",
            f"At {m['rate']:,} starts/s (stream shards assumed: {m['partitions']}):",
            "| limit | kind | used | ceiling | share | reached at starts/s |",
            "|---|---|---|---|---|---|",
        ]
        for x in sorted(m["limits"], key=lambda x: -x["share"]):
            ceiling = "-" if math.isinf(x["ceiling"]) else f"{x['ceiling']:,.0f}"
            reached = "-" if math.isinf(x["reached_at"]) else f"{x['reached_at']:,.0f}"
            lines.append(
                f"| {x['limit']} | {x['kind']} | {x['used']:,.1f} | {ceiling}"
                f" | {x['share']:.0%} | {reached} |"
            )
        h = m["highest"]
        lines.append(
            f"First limit reached: {m['first']}"
            if m["first"]
            else f"No limit reached; the nearest: {h['limit']} at {h['share']:.0%}"
        )
        lines.append(f"First AWS limit reached: {m['first_aws'] or 'none'}")
    return "\n".join(lines) + "\n"
