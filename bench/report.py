"""Turn recorded runs into the figures `python -m bench` prints and writes."""

from __future__ import annotations

import math
from typing import Any

from ezgh_engine.adapters.run_writes import RETENTION_SECONDS

from bench import prices as p
from bench.cost import Bill
from bench.engine import EventPages, FanResult, RunResult, Stored

SERVICES = ["dynamodb", "sqs", "s3", "scheduler", "scheduler-fire", "lambda", "http-api"]
USD_LINES = ["dynamodb", "lambda", "http-api", "sqs", "scheduler", "s3", "logs"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def size_figures(results: list[RunResult]) -> dict[str, Any]:
    """Averages over the runs of one size, per step and per million."""
    steps = results[0].steps
    bills = [r.total for r in results]
    per_run_requests = _mean([b.total_requests for b in bills])
    usd_run = _mean([b.total_usd for b in bills])
    by_service = {s: _mean([b.requests.get(s, 0) for b in bills]) / steps for s in SERVICES}
    usd_lines = {k: _mean([b.usd.get(k, 0.0) for b in bills]) for k in USD_LINES}
    functions = sorted({f for b in bills for f in b.lambda_invocations})
    return {
        "steps": steps,
        "runs": len(results),
        "requests_per_run": per_run_requests,
        "requests_per_step": per_run_requests / steps,
        "requests_per_step_by_service": by_service,
        "app_requests_per_run": _mean([b.app_requests for b in bills]),
        "lambda_invocations_per_step": {
            f: _mean([b.lambda_invocations.get(f, 0) for b in bills]) / steps for f in functions
        },
        "dynamodb_wru_per_step": _mean([b.wru for b in bills]) / steps,
        "dynamodb_rru_per_step": _mean([b.rru for b in bills]) / steps,
        "usd_per_million_steps": usd_run / steps * 1e6,
        "usd_per_million_runs": usd_run * 1e6,
        # The one line that moves with the machine's load (locally measured durations).
        "usd_per_million_runs_lambda_gb_s": _mean([sum(b.lambda_gb_usd.values()) for b in bills])
        * 1e6,
        "usd_per_million_steps_by_line": {k: v / steps * 1e6 for k, v in usd_lines.items()},
        "seconds_per_run": _mean([r.seconds for r in results]),
        "detail": bills[0].as_dict(),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def step_gaps(result: RunResult) -> list[float]:
    """Seconds between consecutive step bodies, leaving out the one across the sleep."""
    stamps = result.stamps
    gaps = []
    for i in range(1, len(stamps)):
        if result.sleep_index is not None and i == result.sleep_index:
            continue
        gaps.append(stamps[i] - stamps[i - 1])
    return gaps


def latency_figures(ezgh: list[float], dbos: list[float] | None, why: str) -> dict[str, Any]:
    found: dict[str, Any] = {
        "ezgh_p50_ms": percentile(ezgh, 0.5) * 1000,
        "ezgh_p95_ms": percentile(ezgh, 0.95) * 1000,
        "samples": len(ezgh),
    }
    if dbos:
        found.update(
            dbos_p50_ms=percentile(dbos, 0.5) * 1000, dbos_p95_ms=percentile(dbos, 0.95) * 1000
        )
        found["ratio_p50"] = found["ezgh_p50_ms"] / max(found["dbos_p50_ms"], 1e-9)
        found["ratio_p95"] = found["ezgh_p95_ms"] / max(found["dbos_p95_ms"], 1e-9)
    else:
        found["dbos_skipped"] = why
    return found


def scaling_figures(result: RunResult, history: int) -> dict[str, Any]:
    """What the invocation after the sleep costs, with `history` steps recorded before it."""
    resume: Bill = result.phases["resume"]
    invoker_seconds = resume.lambda_seconds.get("invoker", 0.0)
    # What the app's own calls read back (protocol 1.5: the history's pages; its step calls'
    # answers are a few hundred bytes each).
    answered = sum(
        i.response_bytes
        for i in result.invocations
        if i.phase == "resume" and i.function == "steps"
    )
    return {
        "history_steps": history,
        "app_calls_answer_bytes": answered,
        "requests": resume.total_requests,
        "operations": dict(resume.operations),
        "dynamodb_rru": resume.rru,
        "dynamodb_bytes_read": resume.ddb_bytes_read,
        "invoke_request_bytes": resume.app_bytes_sent,
        "invoker_seconds": invoker_seconds,
        "usd": resume.total_usd,
    }


def fan_figures(result: FanResult) -> dict[str, Any]:
    """A gather of `width` parallel steps: whether it completed, and its cost in all and per
    branch (the run's own start and end spread over its branches)."""
    total = result.total
    per = 1 / result.width
    transactions = total.operations.get("dynamodb.TransactWriteItems", 0)
    return {
        "width": result.width,
        "completed": result.completed,
        "status": result.status,
        "steps_recorded": result.steps_recorded,
        "error": result.error,
        "seconds": result.seconds,
        "main_invocations": result.main_invocations,
        "branch_invocations": result.branch_invocations,
        "requests": total.total_requests,
        "requests_per_branch": total.total_requests * per,
        "dynamodb_requests_per_branch": total.requests.get("dynamodb", 0) * per,
        "transactions_per_branch": transactions * per,
        "dynamodb_wru_per_branch": total.wru * per,
        "dynamodb_rru": total.rru,
        "dynamodb_bytes_read": total.ddb_bytes_read,
        "dynamodb_bytes_read_per_branch": total.ddb_bytes_read * per,
        "app_bytes_sent": total.app_bytes_sent,
        "usd_per_million_branches": total.total_usd * per * 1e6,
        "operations": dict(total.operations),
        "detail": total.as_dict(),
    }


def fan_marginal(fans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What one more branch costs: the slope between the two widest gathers that completed
    (the run's fixed cost cancels out). None with fewer than two."""
    done = sorted((f for f in fans if f["completed"]), key=lambda f: f["width"])
    if len(done) < 2:
        return None
    small, large = done[-2], done[-1]
    extra = large["width"] - small["width"]

    def slope(key: str) -> float:
        return float(large[key] * large["width"] - small[key] * small["width"]) / extra

    return {
        "from_width": small["width"],
        "to_width": large["width"],
        "requests_per_branch": slope("requests_per_branch"),
        "dynamodb_wru_per_branch": slope("dynamodb_wru_per_branch"),
        "transactions_per_branch": slope("transactions_per_branch"),
        "dynamodb_bytes_read_per_branch": slope("dynamodb_bytes_read_per_branch"),
        "usd_per_million_branches": slope("usd_per_million_branches"),
    }


def events_figures(pages: EventPages) -> dict[str, Any]:
    """ListRunEvents over a whole run: what each page cost to read."""
    rru = [b.rru for b in pages.pages]
    read = [b.ddb_bytes_read for b in pages.pages]
    return {
        "events": pages.events,
        "limit": pages.limit,
        "pages": len(pages.pages),
        "requests": sum(b.total_requests for b in pages.pages),
        "dynamodb_rru": sum(rru),
        "dynamodb_rru_per_page_max": max(rru, default=0.0),
        "dynamodb_rru_per_page_mean": sum(rru) / len(rru) if rru else 0.0,
        "dynamodb_bytes_read": sum(read),
        "dynamodb_bytes_read_first_page": read[0] if read else 0,
        "dynamodb_bytes_read_last_page": read[-1] if read else 0,
        "usd": sum(b.total_usd for b in pages.pages),
    }


def marginal(sizes: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """What one more step costs: the slope between the two largest sizes measured (a run's
    fixed cost cancels out). None with fewer than two sizes."""
    if len(sizes) < 2:
        return None
    small, large = sorted(sizes.values(), key=lambda f: f["steps"])[-2:]
    extra = large["steps"] - small["steps"]
    per_run = lambda f, key: f[key] * f["steps"]  # noqa: E731 - the per-run total
    return {
        "from_steps": small["steps"],
        "to_steps": large["steps"],
        "requests_per_step": (
            per_run(large, "requests_per_step") - per_run(small, "requests_per_step")
        )
        / extra,
        "usd_per_million_steps": (
            per_run(large, "usd_per_million_steps") - per_run(small, "usd_per_million_steps")
        )
        / extra,
    }


# The cost goal: a 10-step run with one sleep at most $1.50 per million steps, all-in.
GOAL_USD_PER_MILLION_STEPS = 1.50
GOAL_STEPS = 10


def _line_fit(points: list[tuple[int, float]], at: int) -> dict[str, Any]:
    """A run's cost as `fixed + floor x steps`, from (steps, $ per million runs) points: the
    least-squares line through the runs of `at` steps and more (all of them if fewer than two
    are that long), so that one run's noise (Lambda's GB-s) weighs less. The floor is its
    slope (what one more step costs: a run's fixed cost cancels out), the fixed cost its
    value at zero steps."""
    used = sorted(p for p in points if p[0] >= at)
    if len(used) < 2:
        used = sorted(points)
    mean_n = sum(n for n, _ in used) / len(used)
    mean_c = sum(c for _, c in used) / len(used)
    spread = sum((n - mean_n) ** 2 for n, _ in used)
    floor = sum((n - mean_n) * (c - mean_c) for n, c in used) / spread
    return {
        "floor_usd_per_million_steps": floor,
        "fixed_usd_per_million_runs": mean_c - floor * mean_n,
        "fit_steps": [n for n, _ in used],
    }


def steps_to_reach(fixed: float, floor: float, goal: float) -> int | None:
    """The fewest steps a run needs for `fixed / n + floor <= goal` ($ per million steps);
    None if no step count reaches it (the floor alone is at or over the goal)."""
    if floor >= goal:
        return None

    def meets(n: int) -> bool:
        return fixed / n + floor <= goal + 1e-12  # a float quotient may land a hair over

    n = max(1, math.ceil(fixed / (goal - floor)))
    while n > 1 and meets(n - 1):
        n -= 1
    while not meets(n):
        n += 1
    return n


def goal_check(
    sizes: dict[str, dict[str, Any]],
    goal: float = GOAL_USD_PER_MILLION_STEPS,
    goal_steps: int = GOAL_STEPS,
) -> dict[str, Any] | None:
    """Where a run with one sleep reaches `goal` $ per million steps, from the measured
    sizes (two at least): the floor per step, the fixed cost per run and the step count
    they give, all-in and without Lambda's GB-s (the load-independent part: requests, read
    and write units, fees, which no machine makes cheaper); the measured sizes on either
    side of the goal; and whether the `goal_steps` run meets it. None with one size."""
    if len(sizes) < 2:
        return None
    figures = sorted(sizes.values(), key=lambda f: f["steps"])
    out: dict[str, Any] = {"goal_usd_per_million_steps": goal, "goal_steps": goal_steps}
    for key, cost in (
        ("all_in", lambda f: f["usd_per_million_runs"]),
        (
            "without_lambda_gb_s",
            lambda f: f["usd_per_million_runs"] - f.get("usd_per_million_runs_lambda_gb_s", 0.0),
        ),
    ):
        points = [(f["steps"], cost(f)) for f in figures]
        fit = _line_fit(points, goal_steps)
        fit["steps_to_goal"] = steps_to_reach(
            fit["fixed_usd_per_million_runs"], fit["floor_usd_per_million_steps"], goal
        )
        fit["usd_per_million_steps"] = {str(n): c / n for n, c in points}
        out[key] = fit
    per_step = [(f["steps"], f["usd_per_million_steps"]) for f in figures]
    out["measured_over_goal"] = max((p for p in per_step if p[1] > goal), default=None)
    out["measured_at_goal"] = min((p for p in per_step if p[1] <= goal), default=None)
    at_goal = sizes.get(str(goal_steps))
    out["goal_steps_usd_per_million_steps"] = at_goal["usd_per_million_steps"] if at_goal else None
    out["goal_met"] = at_goal["usd_per_million_steps"] <= goal if at_goal else None
    return out


def levers(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Estimated savings per million steps, from one size's measured breakdown, of the
    levers not built (docs/benchmarks.md lists those built, with before and after)."""
    d = figures["detail"]
    steps = figures["steps"]
    per_m = 1e6 / steps
    invoker_gb = d["lambda_gb_s_usd"].get("invoker", 0.0)
    invoker_s = d["lambda_seconds"].get("invoker", 0.0)
    app_s = d["app_seconds"]
    waiting_usd = invoker_gb * min(app_s / invoker_s, 1.0) if invoker_s else 0.0
    stream_idle = d["lambda_invocations_without_requests"].get("stream", 0)
    stream_n = d["lambda_invocations"].get("stream", 0)
    stream_usd = d["usd_by_origin"].get("function:stream", 0.0)
    stream_idle_usd = stream_usd * stream_idle / stream_n if stream_n else 0.0
    live_reads = d["by_origin"].get("function:steps dynamodb.GetItem", 0)
    premium = d.get("dynamodb_transact_wru_premium", 0.0)
    return [
        {
            # An end, a sleep's suspend and a sleep's wake-up are single writes
            # now; what is left in a transaction (each item 2x) is off the bench's path
            # (other waits' suspends, a retry's wake-up).
            "lever": "the remaining transactions as single writes",
            "requests_per_step_saved": 0.0,
            "usd_per_million_steps_saved": premium * p.DYNAMODB_USD_PER_WRU * per_m,
        },
        {
            "lever": "no run read per step call (step conditions only)",
            "requests_per_step_saved": live_reads / steps,
            "usd_per_million_steps_saved": live_reads * p.DYNAMODB_USD_PER_RRU * 0.5 * per_m,
        },
        {
            "lever": "invoker not billed while the app runs",
            "requests_per_step_saved": 0.0,
            "usd_per_million_steps_saved": waiting_usd * per_m,
        },
        {
            # Not half its GB-s: its CPU part takes twice as long at half the vCPU share
            # (memory_figures); its waiting part halves.
            "lever": "steps function at 256 MB instead of 512 MB (CPU part stretched)",
            "requests_per_step_saved": 0.0,
            "usd_per_million_steps_saved": _memory_saving(figures, "steps", 512, 256),
        },
        {
            "lever": "stream invocations that do nothing (finer filters)",
            "requests_per_step_saved": stream_idle / steps,
            "usd_per_million_steps_saved": stream_idle_usd * per_m,
        },
    ]


# "At 1,769 MB, a function has the equivalent of one vCPU (one vCPU-second of credits per
# second)", and CPU is allocated in proportion to memory (Lambda developer guide, "Configure
# Lambda function memory"). Locally a handler's thread has a whole core.
VCPU_MB = 1769
MEMORY_CHOICES = (128, 256, 512, 1024)


def modeled_seconds(wall: float, cpu: float, memory_mb: int) -> float:
    """A locally measured invocation's duration on Lambda at `memory_mb`: its waiting part as
    measured, its CPU part stretched to the memory's share of a vCPU."""
    share = min(1.0, memory_mb / VCPU_MB)
    return max(wall - cpu, 0.0) + cpu / share


def memory_figures(figures: dict[str, Any]) -> dict[str, Any]:
    """Per function, from one size's breakdown: locally measured seconds, its CPU part, and
    its GB-s in $ per million steps and ms per invocation at each of `MEMORY_CHOICES`, with
    the CPU part stretched (`modeled_seconds`); the configured size marked. Per-invocation
    ms are averages, so a function's cold start weighs on its mean."""
    from ezgh_engine.topology import TOPOLOGY

    d = figures["detail"]
    per_m = 1e6 / figures["steps"]
    out: dict[str, Any] = {}
    for fn, n in sorted(d["lambda_invocations"].items()):
        wall = d["lambda_seconds"].get(fn, 0.0)
        cpu = d.get("lambda_cpu_seconds", {}).get(fn, 0.0)
        at: dict[str, Any] = {}
        for mb in MEMORY_CHOICES:
            secs = modeled_seconds(wall, cpu, mb)
            at[str(mb)] = {
                "ms_per_invocation": secs / n * 1000,
                "usd_per_million_steps": secs
                * mb
                / 1024
                * p.LAMBDA_USD_PER_GB_SECOND_ARM64
                * per_m,
            }
        out[fn] = {
            "configured_mb": TOPOLOGY.function(fn).memory_mb,
            "invocations": n,
            "seconds": wall,
            "cpu_seconds": cpu,
            "at_mb": at,
        }
    return out


def _memory_saving(figures: dict[str, Any], fn: str, now_mb: int, then_mb: int) -> float:
    at = memory_figures(figures).get(fn, {}).get("at_mb", {})
    if not at:
        return 0.0
    return float(
        at[str(now_mb)]["usd_per_million_steps"] - at[str(then_mb)]["usd_per_million_steps"]
    )


def retention_figures(purge: Bill, run: RunResult, stored: Stored) -> dict[str, Any]:
    """What one ended run costs after it ended, beside its own bill: the purge once its
    item expires (`Engine.retention`) and what it keeps meanwhile (`Engine.stored`),
    stored for the retention period (DynamoDB table and index storage, point-in-time
    recovery on the table's data, S3)."""
    months = RETENTION_SECONDS / p.SECONDS_PER_MONTH
    gb = 1 / 1e9
    storage_usd = months * (
        (stored.table_bytes + stored.index_bytes) * gb * p.DYNAMODB_USD_PER_GB_MONTH
        + stored.table_bytes * gb * p.DYNAMODB_PITR_USD_PER_GB_MONTH
        + stored.s3_bytes * gb * p.S3_USD_PER_GB_MONTH
    )
    after_usd = purge.total_usd + storage_usd
    return {
        "steps": run.steps,
        "requests_per_run": purge.total_requests,
        "operations": ", ".join(f"{k} {v}" for k, v in sorted(purge.operations.items())),
        "usd_per_million_runs": purge.total_usd * 1e6,
        "share_of_run_cost": purge.total_usd / run.total.total_usd if run.total.total_usd else 0.0,
        "stored": {
            "items": stored.items,
            "table_bytes": stored.table_bytes,
            "index_bytes": stored.index_bytes,
            "s3_bytes": stored.s3_bytes,
            "retention_days": RETENTION_SECONDS // 86400,
        },
        "storage_usd_per_million_runs": storage_usd * 1e6,
        "after_end_usd_per_million_runs": after_usd * 1e6,
        "run_with_after_end_usd_per_million_runs": (run.total.total_usd + after_usd) * 1e6,
        "detail": purge.as_dict(),
    }
