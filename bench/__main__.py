"""`python -m bench [--json PATH] [--sizes 1,10,100] [--runs N] [--histories 10,100]
[--workers N] [--subscriptions M] [--idle-only | --no-idle] [--throughput RUNS]`

Prices a month of a deployment that does nothing (from the synthesized template, plus N idle
pull workers and M subscriptions: bench/idle.py), then runs `bench` workflows on the local
runtime, counts every request the engine makes and prices it (bench/prices.py). See
docs/benchmarks.md for the method.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import dbos_bench, idle, report, scale, throughput
from bench import prices as p
from bench.engine import LONG_SLEEP, SHORT_SLEEP, Engine


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _observability(w: Any, out: dict[str, Any]) -> None:
    """What showing the runs costs, per run: the log bytes (EMF and JSON lines) and the
    observe function's invocations, billed as one request per batching window. The bytes
    are the most a run writes: the local stream reader invokes the observe function per
    record, each invocation writing its own EMF document, where a deployed window writes
    one for the whole batch."""
    w("\nObservability per run (in the lines above): ")
    parts = []
    for f in out["sizes"].values():
        d = f["detail"]
        logged = d.get("cloudwatch_logs_bytes", 0)
        observe = d["lambda_invocations"].get("observe", 0)
        usd = d["usd_by_origin"].get("function:observe", 0.0) + d["usd"].get("logs", 0.0)
        parts.append(
            f"{f['steps']} steps: at most {logged:,} B of EMF and log lines, observe {observe} "
            f"invocations in {d['lambda_requests'].get('observe', 0)} windows, "
            f"{_money(usd * 1e6)}/M runs"
        )
    w(
        "; ".join(parts) + ". X-Ray, when a run's trace is recorded (-c ezgh:traceSampleRate, "
        f"0 by default): {_money(p.XRAY_USD_PER_TRACE_RECORDED * 1e6)}/M runs\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--sizes",
        type=_ints,
        default=[1, 10, 100],
        help="sequential run steps per workflow (each with one 1h sleep)",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs per size (averaged)")
    parser.add_argument(
        "--histories",
        type=_ints,
        default=[10, 100],
        help="history lengths for the scaling figures ('' to skip; 1000 is slow on moto)",
    )
    parser.add_argument(
        "--seeded-histories",
        type=_ints,
        default=[],
        help="history lengths whose steps the bench writes into the run instead of running "
        "them (Engine.run_seeded): 10,000 in minutes, not an hour ('' to skip)",
    )
    parser.add_argument(
        "--seeded-only",
        action="store_true",
        help="only the seeded histories (and their ListRunEvents)",
    )
    parser.add_argument(
        "--latency-steps",
        type=int,
        default=100,
        help="steps of the latency workflow (ezgh and DBOS)",
    )
    parser.add_argument(
        "--fanouts",
        type=_ints,
        default=[10, 100],
        help="widths of a gather of parallel run steps to measure ('' to skip)",
    )
    parser.add_argument(
        "--events-limit",
        type=int,
        default=100,
        help="the page size of ListRunEvents over each history run (0 skips the listing)",
    )
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS comparison")
    parser.add_argument(
        "--throughput",
        type=int,
        default=0,
        metavar="RUNS",
        help="also measure `ezgh dev`'s runs/s and steps/s with RUNS concurrent 5-step runs "
        "(bench/throughput.py; 0 skips it)",
    )
    parser.add_argument(
        "--no-short-sleep",
        action="store_true",
        help="skip the run with a sleep of <= 15 minutes (SQS delay)",
    )
    parser.add_argument(
        "--no-goal-run",
        action="store_true",
        help="skip the run of the step count the goal check computes (when not in --sizes)",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="only the scale model (bench/scale.py): requests per partition key and function, "
        "and the limits at 10, 100 and 1,000 starts a second",
    )
    parser.add_argument(
        "--scale-runs", type=int, default=8, help="runs the scale model records (at least 2)"
    )
    parser.add_argument("--workers", type=int, default=1, help="idle pull workers to price")
    parser.add_argument("--subscriptions", type=int, default=1, help="subscriptions to price")
    parser.add_argument("--idle-only", action="store_true", help="only the idle month")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle month (no synth)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    out: dict[str, Any] = {
        "prices": {"date": p.PRICES_DATE, "region": p.REGION, "sources": p.SOURCES},
        "sizes": {},
    }
    if args.scale:
        with Engine() as engine:
            workload = scale.record(engine, max(2, args.scale_runs), 10, 100)
        out["scale"] = scale.figures(workload)
        sys.stdout.write(scale.report(out["scale"]))
        _write(args.json, out)
        return 0
    if not args.no_idle:
        out["idle"] = idle.idle_figures(idle.synth_template(), args.workers, args.subscriptions)
    if args.idle_only:
        idle.print_idle(sys.stdout.write, out["idle"])
        _write(args.json, out)
        return 0
    if args.seeded_only:
        with Engine() as engine:
            out["seeded"] = [_seeded(engine, h, args.events_limit) for h in args.seeded_histories]
        _scaling(sys.stdout.write, out["seeded"], seeded=True)
        _write(args.json, out)
        return 0
    latency_gaps: list[float] = []
    retention_size = 10 if 10 in args.sizes else args.sizes[0]
    with Engine() as engine:
        for size in args.sizes:
            results = [engine.run(size, LONG_SLEEP) for _ in range(max(1, args.runs))]
            figures = report.size_figures(results)
            figures["levers"] = report.levers(figures)
            figures["memory"] = report.memory_figures(figures)
            out["sizes"][str(size)] = figures
            if size == retention_size:  # its state is still there: purge the last run
                stored = engine.stored(results[-1].run_id)
                purge = engine.retention(results[-1].run_id)
                out["retention"] = report.retention_figures(purge, results[-1], stored)
            if size == args.latency_steps:
                for result in results:
                    latency_gaps.extend(report.step_gaps(result))
        out["goal"] = report.goal_check(out["sizes"])
        if out["goal"] and not args.no_goal_run:
            _confirm_goal(engine, out["goal"], out["sizes"], args.runs)
        if not latency_gaps and args.latency_steps:
            latency_gaps = report.step_gaps(engine.run(args.latency_steps, None))
        if not args.no_short_sleep:
            short_size = 10 if 10 in args.sizes else args.sizes[0]
            short = report.size_figures([engine.run(short_size, SHORT_SLEEP)])
            out["short_sleep"] = {
                k: short[k]
                for k in (
                    "steps",
                    "requests_per_step",
                    "requests_per_step_by_service",
                    "usd_per_million_steps",
                    "usd_per_million_runs",
                    "detail",
                )
            }
        out["scaling"] = [_history(engine, h, args.events_limit) for h in args.histories]
        out["seeded"] = [_seeded(engine, h, args.events_limit) for h in args.seeded_histories]
        out["fanout"] = [report.fan_figures(engine.run_fan(n)) for n in args.fanouts]
        out["fanout_marginal"] = report.fan_marginal(out["fanout"])
    out["marginal"] = report.marginal(out["sizes"])
    dbos_gaps, why = (None, "--no-dbos")
    if not args.no_dbos and latency_gaps:
        dbos_gaps, why = dbos_bench.run(args.latency_steps)
    out["latency"] = report.latency_figures(latency_gaps, dbos_gaps, why)
    out["latency"]["steps"] = args.latency_steps
    if args.throughput:
        out["throughput"] = throughput.measure(args.throughput, 5)  # journaled, as `ezgh dev`
    out["seconds"] = time.perf_counter() - began
    print_report(out)
    if "throughput" in out:
        sys.stdout.write("\n" + throughput.report(out["throughput"]) + "\n")
    _write(args.json, out)
    return 0


def _history(engine: Engine, history: int, events_limit: int) -> dict[str, Any]:
    """The invocation after the sleep of a run with `history` steps before it, and (with
    `events_limit`) ListRunEvents over that whole run, page by page."""
    result = engine.run(history + 1, LONG_SLEEP, sleep_after=history, timeout=3600.0)
    figures = report.scaling_figures(result, history)
    if events_limit:
        pages = engine.list_events(result.run_id, events_limit)
        figures["events"] = report.events_figures(pages)
    return figures


def _seeded(engine: Engine, history: int, events_limit: int) -> dict[str, Any]:
    """`_history` over a run whose `history` steps the bench wrote (Engine.run_seeded)."""
    result = engine.run_seeded(history)
    figures = report.scaling_figures(result, history)
    if events_limit:
        figures["events"] = report.events_figures(engine.list_events(result.run_id, events_limit))
    return figures


# A computed step count past this is not worth a confirmation run (nor a goal in reach).
GOAL_RUN_MAX_STEPS = 1000


def _confirm_goal(
    engine: Engine, goal: dict[str, Any], sizes: dict[str, dict[str, Any]], runs: int
) -> None:
    """Measure the run of the step count where the all-in line reaches the goal (the
    estimate, checked), unless that size was measured already."""
    steps = goal["all_in"]["steps_to_goal"]
    if steps is None or steps > GOAL_RUN_MAX_STEPS:
        return
    figures = sizes.get(str(steps)) or report.size_figures(
        [engine.run(steps, LONG_SLEEP) for _ in range(max(1, runs))]
    )
    goal["confirmation"] = {
        "steps": steps,
        "usd_per_million_steps": figures["usd_per_million_steps"],
        "met": figures["usd_per_million_steps"] <= goal["goal_usd_per_million_steps"],
    }


def _write(path: Path | None, out: dict[str, Any]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


def _money(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:,.4f}"


def print_report(out: dict[str, Any]) -> None:
    w = sys.stdout.write
    w(
        f"EZGH Workflows bench: local runtime, list prices {out['prices']['region']} "
        f"as of {out['prices']['date']} (bench/prices.py)\n\n"
    )
    if "idle" in out:
        idle.print_idle(w, out["idle"])
        w("\n")
    w("Cost: N sequential run steps + one 1h sleep (EventBridge Scheduler), per run\n")
    head = (
        "steps",
        "req/step",
        "ddb",
        "sqs",
        "sched",
        "lambda",
        "httpapi",
        "app/run",
        "WRU/step",
        "$/M steps",
        "$/M runs",
    )
    w("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for f in out["sizes"].values():
        s = f["requests_per_step_by_service"]
        sched = s["scheduler"] + s["scheduler-fire"]
        w(
            f"| {f['steps']} | {f['requests_per_step']:.1f} | {s['dynamodb']:.1f} | {s['sqs']:.1f}"
            f" | {sched:.2f} | {s['lambda']:.1f} | {s['http-api']:.1f}"
            f" | {f['app_requests_per_run']:.0f} | {f['dynamodb_wru_per_step']:.1f}"
            f" | {_money(f['usd_per_million_steps'])} | {_money(f['usd_per_million_runs'])} |\n"
        )
    m = out.get("marginal")
    if m:
        w(
            f"\nMarginal, one more step (from {m['from_steps']} to {m['to_steps']} steps): "
            f"{m['requests_per_step']:.2f} requests, {_money(m['usd_per_million_steps'])}"
            f"/M steps\n"
        )
    if out.get("goal"):
        _goal(w, out["goal"])
    w("\n$ per million steps by line:\n")
    lines = report.USD_LINES
    w("| steps | " + " | ".join(lines) + " |\n|" + "---|" * (len(lines) + 1) + "\n")
    for f in out["sizes"].values():
        by = f["usd_per_million_steps_by_line"]
        w(f"| {f['steps']} | " + " | ".join(_money(by[k]) for k in lines) + " |\n")
    w("\nLambda invocations per step: ")
    w(
        "; ".join(
            f"{f['steps']} steps: "
            + ", ".join(f"{k} {v:.2f}" for k, v in f["lambda_invocations_per_step"].items())
            for f in out["sizes"].values()
        )
        + "\n"
    )
    _observability(w, out)
    r = out.get("retention")
    if r:
        w(
            f"\nRetention (the purge once a run's item expires, {r['steps']}-step run with a "
            f"sleep): {r['requests_per_run']} requests ({r['operations']}), "
            f"{_money(r['usd_per_million_runs'])}/M runs, {r['share_of_run_cost']:.1%} of the "
            f"run's own cost\n"
        )
        st = r["stored"]
        w(
            f"Kept for {st['retention_days']} days after its end: {st['items']} items, "
            f"{st['table_bytes']:,} B in the table, {st['index_bytes']:,} B in its indexes, "
            f"{st['s3_bytes']:,} B in S3: {_money(r['storage_usd_per_million_runs'])}/M runs "
            f"(with point-in-time recovery). The run with its purge and storage: "
            f"{_money(r['run_with_after_end_usd_per_million_runs'])}/M runs\n"
        )
        fit = (out.get("goal") or {}).get("all_in") or {}
        if "fixed_usd_per_million_runs" in fit:
            fixed = fit["fixed_usd_per_million_runs"]
            w(
                f"A run's fixed cost, all-in: {_money(fixed)} + purge "
                f"{_money(r['usd_per_million_runs'])} + storage "
                f"{_money(r['storage_usd_per_million_runs'])} = "
                f"{_money(fixed + r['after_end_usd_per_million_runs'])}/M runs\n"
            )
    sh = out.get("short_sleep")
    if sh:
        w(
            f"\nA sleep of <= 15 min (SQS DelaySeconds, {SHORT_SLEEP} measured) with {sh['steps']} "
            f"steps: {sh['requests_per_step']:.1f} req/step, "
            f"{_money(sh['usd_per_million_steps'])}/M steps, "
            f"{_money(sh['usd_per_million_runs'])}/M runs\n"
        )
    lat = out["latency"]
    if not lat["samples"]:
        w("\nStep latency: not measured (no run of --latency-steps steps)\n")
    else:
        _latency(w, lat)
    _rest(w, out)


def _goal(w: Any, g: dict[str, Any]) -> None:
    """The goal check (`report.goal_check`): met or not at its step count, and from how many
    steps a run meets it, all-in and without the load-dependent Lambda GB-s."""
    goal, n = g["goal_usd_per_million_steps"], g["goal_steps"]
    at = g["goal_steps_usd_per_million_steps"]
    verdict = "not measured" if at is None else ("MET" if g["goal_met"] else "NOT MET")
    w(
        f"\nGoal: <= {_money(goal)}/M steps for a {n}-step run with one sleep: {verdict}"
        + (f" ({_money(at)}/M steps)" if at is not None else "")
        + "\n"
    )
    w(
        "  a run = fixed cost + floor x steps, the least-squares line through the runs of "
        + ", ".join(str(n) for n in g["all_in"]["fit_steps"])
        + " steps\n"
    )
    for key, label in (
        ("all_in", "all-in"),
        ("without_lambda_gb_s", "without Lambda GB-s (load-independent)"),
    ):
        f = g[key]
        reach = f["steps_to_goal"]
        w(
            f"  {label}: floor {_money(f['floor_usd_per_million_steps'])}/M steps, fixed "
            f"{_money(f['fixed_usd_per_million_runs'])}/M runs -> "
            + (f"the goal from {reach} steps a run" if reach else "the goal at no step count")
        )
        if key != "all_in" and str(n) in f["usd_per_million_steps"]:
            cost = f["usd_per_million_steps"][str(n)]
            over = "over" if cost > goal else "within"
            w(f"; at {n} steps {_money(cost)}/M steps ({over} the goal with no GB-s at all)")
        w("\n")
    over, met = g["measured_over_goal"], g["measured_at_goal"]
    parts = []
    if over:
        parts.append(f"{over[0]} steps {_money(over[1])} (over)")
    if met:
        parts.append(f"{met[0]} steps {_money(met[1])} (met)")
    c = g.get("confirmation")
    if c:
        parts.append(
            f"the computed {c['steps']} steps, run: {_money(c['usd_per_million_steps'])} "
            f"({'met' if c['met'] else 'over'})"
        )
    if parts:
        w("  measured: " + "; ".join(parts) + "\n")


def _latency(w: Any, lat: dict[str, Any]) -> None:
    w(
        f"\nStep latency, {lat['steps']}-step workflow (gap between step bodies, "
        f"{lat['samples']} samples):\n"
    )
    w(f"  ezgh local runtime: p50 {lat['ezgh_p50_ms']:.1f} ms, p95 {lat['ezgh_p95_ms']:.1f} ms\n")
    if "dbos_p50_ms" in lat:
        w(
            f"  DBOS + SQLite:      p50 {lat['dbos_p50_ms']:.2f} ms, p95 {lat['dbos_p95_ms']:.2f} ms\n"
        )
        w(f"  ratio ezgh/DBOS:    p50 {lat['ratio_p50']:.1f}x, p95 {lat['ratio_p95']:.1f}x\n")
    else:
        w(f"  DBOS skipped: {lat['dbos_skipped']}\n")


def _scaling(w: Any, scaling: list[dict[str, Any]], *, seeded: bool = False) -> None:
    """The invocation after a sleep, by the history before it (and ListRunEvents over it)."""
    if not scaling:
        return
    how = "seeded by the bench" if seeded else "run"
    w(
        f"\nScaling ({how}): the invocation after the sleep (timer + invoke + 1 new step + "
        "completion)\n| history steps | requests | DynamoDB RRU | DynamoDB bytes read | invoke "
        "request bytes | app's calls answered bytes | invoker s | $ |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    for s in scaling:
        w(
            f"| {s['history_steps']} | {s['requests']} | {s['dynamodb_rru']:.1f}"
            f" | {s['dynamodb_bytes_read']:,} | {s['invoke_request_bytes']:,}"
            f" | {s.get('app_calls_answer_bytes', 0):,}"
            f" | {s['invoker_seconds']:.3f} | {s['usd'] * 1e6:.2f}e-6 |\n"
        )
    _events(w, scaling)


def _rest(w: Any, out: dict[str, Any]) -> None:
    _scaling(w, out["scaling"])
    _scaling(w, out.get("seeded") or [], seeded=True)
    _fanout(w, out.get("fanout") or [], out.get("fanout_marginal"))
    ref = out["sizes"].get("10") or next(iter(out["sizes"].values()))
    w(
        f"\nLevers not built, estimated from the {ref['steps']}-step breakdown "
        f"(now {_money(ref['usd_per_million_steps'])}/M steps, "
        f"{ref['requests_per_step']:.1f} req/step):\n"
    )
    for lever in ref["levers"]:
        w(
            f"  - {lever['lever']}: -{lever['requests_per_step_saved']:.1f} req/step, "
            f"-{_money(lever['usd_per_million_steps_saved'])}/M steps\n"
        )
    _memory(w, ref)
    w(
        "\nAnchors, per million billed units: "
        + "; ".join(
            f"{name} ${lo:g}" + (f"-{hi:g}" if hi != lo else "") + f" per {unit}"
            for name, unit, lo, hi in p.ANCHORS
        )
        + "\n"
    )
    w(f"\n(bench took {out['seconds']:.0f} s)\n")


def _events(w: Any, scaling: list[dict[str, Any]]) -> None:
    """ListRunEvents over each history run: what a page costs, first to last."""
    listed = [s for s in scaling if "events" in s]
    if not listed:
        return
    w(
        f"\nListRunEvents over the whole run, {listed[0]['events']['limit']} events a page\n"
        "| history steps | events | pages | requests | RRU | RRU/page mean | RRU/page max "
        "| bytes read | first page | last page |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    for s in listed:
        e = s["events"]
        w(
            f"| {s['history_steps']} | {e['events']} | {e['pages']} | {e['requests']}"
            f" | {e['dynamodb_rru']:.1f} | {e['dynamodb_rru_per_page_mean']:.1f}"
            f" | {e['dynamodb_rru_per_page_max']:.1f} | {e['dynamodb_bytes_read']:,}"
            f" | {e['dynamodb_bytes_read_first_page']:,} | {e['dynamodb_bytes_read_last_page']:,}"
            " |\n"
        )


def _fanout(w: Any, fans: list[dict[str, Any]], slope: dict[str, Any] | None) -> None:
    """Gathers of parallel steps: each branch's share of the run's cost."""
    if not fans:
        return
    w(
        "\nFan-out: one gather of N parallel run steps (each a branch invocation), per run\n"
        "| N | completed | main inv. | req/branch | ddb req/branch | transactions/branch "
        "| WRU/branch | RRU | DynamoDB bytes read | bytes read/branch | $/M branches | s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    for f in fans:
        done = "yes" if f["completed"] else f"NO ({f['status']}, {f['steps_recorded']} steps)"
        w(
            f"| {f['width']} | {done} | {f['main_invocations']} | {f['requests_per_branch']:.1f}"
            f" | {f['dynamodb_requests_per_branch']:.1f} | {f['transactions_per_branch']:.2f}"
            f" | {f['dynamodb_wru_per_branch']:.1f} | {f['dynamodb_rru']:.0f}"
            f" | {f['dynamodb_bytes_read']:,} | {f['dynamodb_bytes_read_per_branch']:,.0f}"
            f" | {_money(f['usd_per_million_branches'])} | {f['seconds']:.1f} |\n"
        )
    for f in fans:
        if f["error"]:
            w(f"  N={f['width']}: {f['error'][:300]}\n")
    if slope:
        w(
            f"  one more branch (from {slope['from_width']} to {slope['to_width']}): "
            f"{slope['requests_per_branch']:.1f} requests, "
            f"{slope['dynamodb_wru_per_branch']:.1f} WRU, "
            f"{slope['transactions_per_branch']:.2f} transactions, "
            f"{slope['dynamodb_bytes_read_per_branch']:,.0f} bytes read, "
            f"{_money(slope['usd_per_million_branches'])}/M branches\n"
        )


def _memory(w: Any, ref: dict[str, Any]) -> None:
    """Each function's GB-s at other memory sizes, its CPU part stretched to the size's vCPU
    share (report.memory_figures); * marks the configured size."""
    mem = ref.get("memory") or {}
    if not mem:
        return
    sizes = report.MEMORY_CHOICES
    w(
        f"\nLambda GB-s by memory, {ref['steps']}-step run, CPU part stretched to the size's "
        f"vCPU share (1 vCPU at {report.VCPU_MB} MB; * configured): $/M steps (ms per "
        "invocation)\n"
    )
    w("| function | invocations | local s (CPU s) | " + " | ".join(f"{mb} MB" for mb in sizes))
    w(" |\n|" + "---|" * (len(sizes) + 3) + "\n")
    for fn, m in mem.items():
        cells = []
        for mb in sizes:
            at = m["at_mb"][str(mb)]
            mark = "*" if mb == m["configured_mb"] else ""
            cells.append(
                f"{mark}{_money(at['usd_per_million_steps'])} ({at['ms_per_invocation']:.0f})"
            )
        w(
            f"| {fn} | {m['invocations']} | {m['seconds']:.3f} ({m['cpu_seconds']:.3f}) | "
            + " | ".join(cells)
            + " |\n"
        )


if __name__ == "__main__":
    raise SystemExit(main())
