"""`ezgh dev`'s throughput: many concurrent runs of `bench` (N sequential run steps, no sleep)
on one `LocalRuntime` as `ezgh dev` runs it (every handler in its execution environments,
moto's server behind the write-ahead journal in a state directory on disk, the push app
served on loopback), measured from the first start to the last end. Answers runs per second and steps per second, and the CPU seconds spent meanwhile by
the runtime's own process (moto, the push app, the bridges, the pollers), by its execution
environments and by the bench's client (a process of its own, as a user's client is): on a
shared machine the rates follow the load, CPU per run less.

    python -m bench.throughput --runs 500 --steps 5
    python -m bench.throughput --runs 500 --no-persist   # without the journal (tests' mode)

The state directory is a temporary one next to the working directory (on the disk `ezgh
dev`'s `.ezgh` would be on, so each journaled request pays the `fdatasync` it pays there).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import WorkflowsClient

from bench import workflows

ENDED = {"completed", "failed", "cancelled", "timedOut"}


DEFAULT_RUNS = 500


def measure(
    runs: int, steps: int, *, persist: bool = True, timeout: float = 1800.0
) -> dict[str, Any]:
    """Start `runs` runs of `steps` steps at once; wait for all to end; the figures.
    `persist` (default, as `ezgh dev`): the journal on, in a state directory on disk."""
    for noisy in ("ezgh", "aws_lambda_powertools", "botocore", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix=".ezgh-throughput-", dir=os.getcwd()) as state:
        runtime = LocalRuntime(
            port=0,
            state_dir=state,
            apps=[("bench", workflows.app)],
            echo=lambda line: None,
            persist=persist,
        )
        with runtime:
            app_id = runtime.apps["bench"].record["id"]
            # The client (starts, then waiting) runs in a process of its own, as `ezgh dev`'s
            # users' do: its CPU is not the runtime's, nor does it take the runtime's GIL.
            spawn = multiprocessing.get_context("spawn")
            ours, theirs = spawn.Pipe()
            driver = spawn.Process(
                target=_drive, args=(theirs, runtime.env, app_id, runs, steps, timeout)
            )
            driver.start()
            try:
                ours.recv()  # imported and connected: ready to start
                journal_before = _journal(runtime)
                events_before = runtime.async_invokes.accepted
                cpu_before = time.process_time(), _environments_cpu(runtime)
                began = time.perf_counter()
                ours.send("go")
                client = ours.recv()
                seconds = time.perf_counter() - began
                runtime_cpu = time.process_time() - cpu_before[0]
                environments_cpu = _environments_cpu(runtime, since=cpu_before[1])
                journal = [a - b for a, b in zip(_journal(runtime), journal_before, strict=True)]
                # Asynchronous invokes of the invoker: a start each, or a group of starts.
                invoker_events = runtime.async_invokes.accepted - events_before
            finally:
                driver.join(timeout=60)
                if driver.is_alive():
                    driver.kill()
    statuses, start_seconds = client["statuses"], client["start_seconds"]
    completed = sum(1 for s in statuses.values() if s == "completed")
    return {
        "runs": runs,
        "steps_per_run": steps,
        "persist": persist,
        "completed": completed,
        "seconds": round(seconds, 2),
        "start_seconds": round(start_seconds, 2),
        "runs_per_second": round(completed / seconds, 2),
        "steps_per_second": round(completed * steps / seconds, 2),
        "runtime_cpu_seconds": round(runtime_cpu, 2),
        "environments_cpu_seconds": round(environments_cpu, 2),
        "client_cpu_seconds": round(client["cpu_seconds"], 2),
        "invoker_events": invoker_events,
        "invoker_events_per_run": round(invoker_events / max(completed, 1), 2),
        "journal_records": journal[0],
        "journal_syncs": journal[1],
        "runtime_cpu_ms_per_run": round(1000 * runtime_cpu / max(completed, 1)),
        "environments_cpu_ms_per_run": round(1000 * environments_cpu / max(completed, 1)),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def _drive(
    conn: Any, env: dict[str, str], app_id: str, runs: int, steps: int, timeout: float
) -> None:
    """The bench's client, in a process of its own: at "go", start the runs (8 at a time)
    and wait for all to end; send back each run's status, the start phase's seconds and
    this process's CPU seconds since "go"."""
    client = WorkflowsClient(
        api_key=env["EZGH_API_KEY"],
        organization_id=env["EZGH_ORG_ID"],
        project_id=env["EZGH_PROJECT_ID"],
        base_url=env["EZGH_API_URL"],
    )
    conn.send("ready")
    conn.recv()
    cpu, began = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        started = list(
            pool.map(lambda _: client.start_run(app_id, "bench", {"n": steps})["id"], range(runs))
        )
    start_seconds = time.perf_counter() - began
    statuses = _wait_all(client, started, began + timeout)
    conn.send(
        {
            "statuses": statuses,
            "start_seconds": start_seconds,
            "cpu_seconds": time.process_time() - cpu,
        }
    )


def _journal(runtime: LocalRuntime) -> tuple[int, int]:
    """The journal's records written and `fdatasync`s made so far ((0, 0) without one)."""
    journaling = runtime.emulator.journaling
    if journaling is None:
        return 0, 0
    return journaling.journal.records_written, journaling.journal.commits.syncs


def _environments_cpu(runtime: LocalRuntime, since: dict[int, float] | None = None) -> Any:
    """Each execution environment's CPU seconds (pid -> seconds, from /proc); with `since`
    (an earlier answer), the seconds spent after it, summed. Linux only: 0 elsewhere."""
    spent: dict[int, float] = {}
    pools = runtime.environments.pools.values() if runtime.environments is not None else ()
    for pool in pools:
        for pid in pool.pids():
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            spent[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    if since is None:
        return spent
    return sum(seconds - since.get(pid, 0.0) for pid, seconds in spent.items())


def _wait_all(client: WorkflowsClient, run_ids: list[str], deadline: float) -> dict[str, str]:
    """Wait until no run is running (one search a second, so that the bench's own reads
    cost the engine next to nothing), then read every run's status: run id -> status."""
    while time.perf_counter() < deadline:
        live = client.search_runs(status="running", limit=1)["runs"]
        if not live:
            break
        time.sleep(1.0)
    wanted, statuses = set(run_ids), {run_id: "running" for run_id in run_ids}
    for status in sorted(ENDED):
        cursor = None
        while True:
            page = client.search_runs(status=status, limit=100, cursor=cursor)
            for run in page["runs"]:
                if run["id"] in wanted:
                    statuses[run["id"]] = status
            cursor = page.get("nextCursor")
            if not cursor:
                break
    return statuses


def report(figures: dict[str, Any]) -> str:
    """The figures in one line."""
    journal = "journaled" if figures.get("persist", True) else "not journaled"
    return (
        f"ezgh dev throughput ({journal}): {figures['runs']} concurrent runs of "
        f"{figures['steps_per_run']} steps: {figures['completed']} completed in "
        f"{figures['seconds']} s = {figures['runs_per_second']} runs/s, "
        f"{figures['steps_per_second']} steps/s; CPU {figures['runtime_cpu_seconds']} s in the "
        f"runtime's process ({figures['runtime_cpu_ms_per_run']} ms per run), "
        f"{figures['environments_cpu_seconds']} s in its environments "
        f"({figures['environments_cpu_ms_per_run']} ms per run), {figures['client_cpu_seconds']} s "
        f"in the bench's client; {figures.get('invoker_events', '?')} asynchronous invokes of "
        f"the invoker ({figures.get('invoker_events_per_run', '?')} per run); journal "
        f"{figures['journal_records']} records, "
        f"{figures['journal_syncs']} fdatasyncs; load at the end "
        f"{figures['load'][0]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--no-persist",
        dest="persist",
        action="store_false",
        help="without the write-ahead journal (as the tests run; `ezgh dev` journals)",
    )
    parser.add_argument("--json", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    figures = measure(args.runs, args.steps, persist=args.persist)
    print(report(figures))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)
    return 0 if figures["completed"] == figures["runs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
