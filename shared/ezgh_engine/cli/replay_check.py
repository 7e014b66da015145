"""`ezgh workflows replay-check` and `ezgh workflows runs export`: runs' histories through the
public API, and the replay gate a deploy runs first (docs/deploy.md, "Changing workflow code
with runs in flight").

`replay-check --app APP [--since 7d] --module M:app` reads the histories of the app's live
runs and of those that ended within `--since`, and replays each against the code `M:app`
names (a `PushApp`, a `Worker`, or a list of workflows) in this process, running no step
(`ezgh_workflows.Replayer`). It prints each run's first divergence and what the run will do
when next invoked, and exits 1 when a run the engine may invoke again (a live one, or a
failed or timed-out one a RetryRun replays) breaks. A key that may read runs
(`workflows.runs.read`) is all it needs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from ezgh_engine import clock
from ezgh_engine.cli.common import Api, CliError, emit, segment

LIVE = ("running", "cancelling")
PAGE = 100
SAFE_CHANGES = 'docs/deploy.md, "Changing workflow code with runs in flight"'


class ApiReader:
    """What `ezgh_workflows`' `fetch_history` reads, through the CLI's API client."""

    def __init__(self, api: Api) -> None:
        self._api = api

    def get_run(self, run_id: str) -> Any:
        return self._api.run(run_id)  # every step, however many pages they take

    def list_run_events(
        self, run_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> Any:
        params = {"cursor": cursor, "limit": limit}
        return self._api.request("GET", f"/runs/{segment(run_id)}/events", params=params)

    def get_payload(self, run_id: str, path: str) -> Any:
        # An outputRef is already percent-encoded: keep its escapes as they are.
        return self._api.request("GET", f"/runs/{segment(run_id)}/payloads/{quote(path, '/%')}")


# --- runs export --------------------------------------------------------------------------


def runs_export(args: argparse.Namespace) -> int:
    """Print (or write to `--output`) a run's history in the history file format."""
    from ezgh_workflows._internal.history import fetch_history

    history = fetch_history(ApiReader(Api(args)), args.run_id)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(history.dumps())
        print(
            f"wrote the history of run {history.id} ({len(history.steps)} steps) to {args.output}"
        )
    else:
        sys.stdout.write(history.dumps())
    return 0


# --- replay-check ---------------------------------------------------------------------------


AppResolver = Callable[[Api, str], dict[str, Any]]


def replay_check(args: argparse.Namespace, resolve_app: AppResolver) -> int:
    """Replay the app's runs against `--module`; 1 when one the engine may invoke again
    breaks."""
    from ezgh_workflows import Replayer
    from ezgh_workflows._internal.duration import parse_duration_unbounded
    from ezgh_workflows._internal.history import fetch_history

    if not args.module:
        raise CliError(
            "--module MODULE:ATTR is needed: the code to check (a PushApp, a Worker or a "
            "list of workflows), importable from this directory"
        )
    try:
        since = timedelta(seconds=parse_duration_unbounded(args.since))
    except ValueError as exc:
        raise CliError(f"--since: {exc}") from None
    deployment_id = args.deployment_id or os.environ.get("EZGH_DEPLOYMENT_ID") or None
    replayer = Replayer(load_code(args.module), deployment_id=deployment_id)
    api = Api(args)
    app = resolve_app(api, args.app)
    cutoff = clock.iso(clock.now() - since)
    reader = ApiReader(api)
    reports = []
    for run in runs_to_check(api, str(app["id"]), cutoff):
        try:
            history = fetch_history(reader, str(run["id"]))
        except CliError as exc:
            if exc.status == 404:  # deleted since it was listed
                continue
            raise
        reports.append(_replayed(replayer, history))
    summary = {
        "app": app["name"],
        "module": args.module,
        "deploymentId": deployment_id,
        "endedSince": cutoff,
        "checked": len(reports),
        "breaks": sum(1 for r in reports if r.breaks),
        "runs": [r.to_json() for r in reports],
    }
    emit(args, summary, lambda s: _print(s, reports))
    return 1 if summary["breaks"] else 0


def _replayed(replayer: Any, history: Any) -> Any:
    """The run's report; a replay that raised counts as a break (the gate fails closed)."""
    from ezgh_workflows._internal.replay import Divergence, ReplayReport

    try:
        return replayer.replay(history)
    except Exception as exc:
        text = f"unknown: the replay raised {type(exc).__name__}: {exc}"
        divergence = Divergence("error", None, None, text, replayer.deployment_id)
        steps = len(history.steps)
        return ReplayReport(
            history.id, history.workflow, history.status, steps, 0, text, divergence
        )


def load_code(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (this directory importable, as for uvicorn) and answer it."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"--module {spec!r}: expected MODULE:ATTR")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except Exception as exc:  # the user's module: anything may fail in its import
        raise CliError(f"--module {spec!r}: {type(exc).__name__}: {exc}") from None
    from ezgh_workflows._internal.replay import workflows_of

    try:
        workflows_of(found)
    except TypeError as exc:
        raise CliError(f"--module {spec!r}: {exc}") from None
    return found


def runs_to_check(api: Api, app_id: str, ended_since: str) -> Iterator[dict[str, Any]]:
    """The app's runs that are live or ended at ``ended_since`` or later (SearchRuns, every
    page: a run ends at most 30 days before its data is deleted)."""
    cursor: str | None = None
    while True:
        params = {"appId": app_id, "limit": PAGE, "cursor": cursor}
        page = api.request("GET", "/runs", params=params)
        for run in page.get("runs", []):
            if run.get("status") in LIVE or str(run.get("endedAt") or "") >= ended_since:
                yield run
        cursor = page.get("nextCursor")
        if not cursor:
            return


def _print(summary: dict[str, Any], reports: list[Any]) -> None:
    code = summary["module"] + (
        f" (deployment {summary['deploymentId']})" if summary["deploymentId"] else ""
    )
    print(
        f"replay-check: {summary['checked']} runs of app {summary['app']} (live, or ended "
        f"since {summary['endedSince']}) against {code}"
    )
    for report in reports:
        verdict = "BREAK" if report.breaks else ("ended" if report.divergence else "ok")
        detail = (
            report.divergence.kind
            if report.divergence
            else (f"replayed {report.replayed} of {report.recorded} steps; {report.outcome}")
        )
        print(
            f"{verdict:<6} {report.workflow:<20} {report.run_id}  {report.run_status:<10} {detail}"
        )
        if report.divergence is not None:
            for line in report.divergence.lines():
                print(f"       {line}")
            if not report.invoked_again:
                print("       (this run ended and is not invoked again: not counted)")
        for skipped in report.skipped:
            print(f"       skipped: {skipped.describe()}: a step of its own name, safe")
    if summary["breaks"]:
        print(
            f"{summary['breaks']} of {summary['checked']} runs break on this code: do not deploy "
            f"it while they are in flight. Changing code safely: {SAFE_CHANGES}."
        )
    else:
        print("no run breaks on this code.")


def register(runs: Any, resources: Any, leaf: Any, resolve_app: AppResolver) -> None:
    """Add `runs export` and `replay-check` to `ezgh workflows` (``resolve_app`` finds an
    app by name, UUID or slug)."""
    p = leaf(runs, "export", runs_export, "write a run's history as JSON (for Replayer)")
    p.add_argument("run_id")
    p.add_argument("--output", "-o", help="write to this file instead of stdout")
    p = leaf(
        resources,
        "replay-check",
        lambda args: replay_check(args, resolve_app),
        "replay the app's runs in flight against local code; exit 1 if any would break",
    )
    p.add_argument("--app", required=True, help="app name, UUID or slug")
    p.add_argument("--module", help="the code to check: MODULE:ATTR (a PushApp, Worker or list)")
    p.add_argument(
        "--since", default="7d", help="also runs that ended this long ago or later (default 7d)"
    )
    p.add_argument(
        "--deployment-id", help="the checked code's deployment ID (default EZGH_DEPLOYMENT_ID)"
    )
