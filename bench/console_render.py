"""`python -m bench.console_render [--runs 10000] [--repeat 5] [--dynamodb-local]`: how long the
web console takes to show a page of 100 runs with many runs stored (the target: under a second
with 10,000).

Stores the runs straight into the local runtime's table (batch writes of the same items
`runs_store.create_run` writes; the pollers are paused so nothing acts on them), then drives
Debian's Chromium (Playwright, /usr/bin/chromium) through the console: sign in by link, and
time from pressing Search to 100 rows on screen, for the first page and for the next one.
Also times SearchRuns alone (limit=100) so the two can be told apart.

The listing is one query of the project's runs index (gsi1: project, creation time) of
exactly the page; filtered listings read at most `runs_store.SEARCH_READ_BUDGET` items per
request. `--dynamodb-local` stores the runs in AWS's DynamoDB Local (`scripts/test-deps.sh`
installs it) instead of moto. Figures: docs/benchmarks.md ("The web console").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from ezgh_engine import ids
from ezgh_engine.adapters import aws, ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.api.routes_console import sign_in_link
from ezgh_engine.core.models import Run
from ezgh_engine.local.runtime import LocalRuntime

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STATUSES = ("completed", "completed", "completed", "failed", "cancelled")


def store_runs(rt: LocalRuntime, count: int) -> float:
    """Write `count` runs (one per second of creation time, newest now); answer seconds taken."""
    began = time.perf_counter()
    table = next(
        name for name in aws.client("dynamodb").list_tables()["TableNames"] if "runs" in name
    )
    base = datetime.now(UTC) - timedelta(seconds=count)
    batch: list[dict[str, Any]] = []
    for i in range(count):
        at = (base + timedelta(seconds=i)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        run = Run(
            id=ids.new_id(),
            org_id=rt.org_id,
            project_id=rt.project_id,
            app_id="00000000-0000-4000-8000-00000000be0c",
            workflow=f"bench-{i % 7}",
            status=STATUSES[i % len(STATUSES)],  # type: ignore[arg-type]
            input={"i": i},
            attempt=1,
            created_at=at,
            started_at=at,
            version=1,
        )
        batch.append({"PutRequest": {"Item": ddb.to_item(items.run_values(run))}})
        if len(batch) == 25:
            _write(table, batch)
            batch = []
    if batch:
        _write(table, batch)
    return time.perf_counter() - began


def _write(table: str, batch: list[dict[str, Any]]) -> None:
    pending: dict[str, Any] = {table: batch}
    while pending:
        pending = aws.client("dynamodb").batch_write_item(RequestItems=pending)["UnprocessedItems"]


def time_api(rt: LocalRuntime, repeat: int) -> list[float]:
    """Seconds per SearchRuns call of 100 runs."""
    took = []
    with httpx.Client(headers={"Authorization": f"Bearer {rt.api_key}"}, timeout=60) as http:
        for _ in range(repeat):
            began = time.perf_counter()
            answer = http.get(f"{rt.api_prefix}/runs", params={"limit": 100})
            took.append(time.perf_counter() - began)
            assert answer.status_code == 200 and len(answer.json()["runs"]) == 100, answer.text
    return took


def time_console(rt: LocalRuntime, repeat: int) -> dict[str, list[float]]:
    """Seconds from Search (first page) and from Next (second page) to 100 rows shown."""
    from playwright.sync_api import sync_playwright

    rows = "document.querySelectorAll('[data-testid=runs] tr[data-run-id]').length"
    result: dict[str, list[float]] = {
        "console, first page of 100 runs (Search to rows shown)": [],
        "console, next page of 100 runs (Next to rows shown)": [],
        "  first page: of which SearchRuns, seen from the browser": [],
        "  first page: of which the console's render and layout": [],
    }
    measures = "name => performance.getEntriesByName(name).map(e => e.duration / 1000).slice(-1)[0]"
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=ARGS
        )
        page = context.new_page()
        page.goto(sign_in_link(rt.api_url, rt.api_key, rt.org_id, rt.project_id))
        page.wait_for_function(f"() => {rows} === 100", timeout=60_000)
        for _ in range(repeat):
            page.evaluate("() => document.querySelector('[data-testid=runs]').replaceChildren()")
            began = time.perf_counter()
            page.click("[data-testid=run-filters] button[type=submit]")
            page.wait_for_function(f"() => {rows} === 100", timeout=60_000)
            result["console, first page of 100 runs (Search to rows shown)"].append(
                time.perf_counter() - began
            )
            result["  first page: of which SearchRuns, seen from the browser"].append(
                page.evaluate(measures, "ezgh.runs.api")
            )
            result["  first page: of which the console's render and layout"].append(
                page.evaluate(measures, "ezgh.runs.render")
            )
            first = page.locator("tr[data-run-id]").first.get_attribute("data-run-id")
            began = time.perf_counter()
            page.click("[data-testid=next-page]")
            page.wait_for_function(
                f"() => {rows} === 100 && document.querySelector('tr[data-run-id]')"
                f".dataset.runId !== '{first}'",
                timeout=60_000,
            )
            result["console, next page of 100 runs (Next to rows shown)"].append(
                time.perf_counter() - began
            )
        context.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console_render", description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--dynamodb-local", action="store_true", help="DynamoDB on AWS's DynamoDB Local, not moto"
    )
    args = parser.parse_args(argv)
    local = _dynamodb_local() if args.dynamodb_local else None
    try:
        return _run(args)
    finally:
        if local is not None:
            local.stop()


def _dynamodb_local() -> Any:
    """Start DynamoDB Local (the tests' launcher) and point the runtime's DynamoDB at it."""
    import importlib
    import os

    from ezgh_engine.local.emulator import ENV_DYNAMODB_URL

    # The tests' launcher (not a package the bench depends on for anything else).
    server = importlib.import_module("tests.ddblocal").DynamoDBLocal().start()
    os.environ[ENV_DYNAMODB_URL] = server.url
    return server


def _run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as state:
        rt = LocalRuntime(port=0, state_dir=Path(state), apps=[])
        rt.start()
        try:
            for poller in rt.pollers:
                poller.pause()
            stored = store_runs(rt, args.runs)
            print(f"stored {args.runs} runs in {stored:.1f} s")
            api = time_api(rt, args.repeat)
            print(
                f"SearchRuns limit=100: median {statistics.median(api) * 1000:.0f} ms, max {max(api) * 1000:.0f} ms"
            )
            for name, took in time_console(rt, args.repeat).items():
                print(
                    f"{name}: median {statistics.median(took) * 1000:.0f} ms, "
                    f"max {max(took) * 1000:.0f} ms ({len(took)} times)"
                )
        finally:
            rt.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
