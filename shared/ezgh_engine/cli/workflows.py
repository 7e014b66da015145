"""`ezgh workflows apps|runs|schedules …`: the Workflows API from the command line, and
`replay-check` and `runs export` (cli/replay_check.py).

Apps may be named by name, UUID or `wfa_` slug; schedules by UUID or `wfs_` slug; queues (for
`--notify-queue`) by name or ID. Tables for people, `--json` for scripts.
"""

from __future__ import annotations

import argparse
from typing import Any

from ezgh_engine.cli import replay_check, run_watch
from ezgh_engine.cli.common import (
    UUID_RE,
    Api,
    CliError,
    connection_parent,
    csv,
    emit,
    guarded,
    parse_json,
    record,
    segment,
    table,
)

APP_COLUMNS = ("name", "id", "slug", "kind", "status", "workflows", "url")
RUN_COLUMNS = ("id", "workflow", "status", "attempt", "createdAt", "endedAt", "runKey")
SCHEDULE_COLUMNS = ("id", "slug", "workflow", "cron", "timezone", "status", "nextRunAt")
EVENT_COLUMNS = ("at", "type", "stepId", "invocationId", "deploymentId")
NOTIFY_ON = ("completed", "failed", "cancelled", "timedOut")


# --- resolving names --------------------------------------------------------------------------


def resolve_app(api: Api, ref: str) -> dict[str, Any]:
    """An app by UUID, slug or name."""
    if UUID_RE.match(ref) or ref.startswith("wfa_"):
        return dict(api.request("GET", f"/apps/{segment(ref)}"))
    for app in api.all_pages("/apps", "apps").get("apps", []):
        if app.get("name") == ref:
            return dict(app)
    raise CliError(f"404 not_found: no app named {ref!r}", 404, "not_found")


def resolve_queue_id(api: Api, ref: str) -> str:
    """A queue's ID from its name or ID (`GET /queues`)."""
    try:
        queues = api.all_pages("/queues", "queues").get("queues", [])
    except CliError as exc:
        if UUID_RE.match(ref) and exc.status in (404, 403):
            return ref
        raise
    for queue in queues:
        if ref in (queue.get("id"), queue.get("name")):
            return str(queue["id"])
    if UUID_RE.match(ref):
        return ref
    raise CliError(f"404 not_found: no queue named {ref!r}", 404, "not_found")


# --- apps -------------------------------------------------------------------------------------


def _show_app(app: dict[str, Any]) -> None:
    record(app, (*APP_COLUMNS, "notifications", "createdAt", "signingKey"))


def apps_list(args: argparse.Namespace) -> int:
    apps = Api(args).all_pages("/apps", "apps")
    return emit(args, apps, lambda d: table(d.get("apps", []), APP_COLUMNS))


def apps_get(args: argparse.Namespace) -> int:
    return emit(args, resolve_app(Api(args), args.app), _show_app)


def apps_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "kind": args.kind}
    if args.url:
        body["url"] = args.url
    answer = Api(args).request("POST", "/apps", body=body)
    return emit(args, answer, _show_created)


def _show_created(app: dict[str, Any]) -> None:
    """The new app, its signing key (this answer is the only one that holds it) and what
    to run next to serve it yourself (docs/push-apps.md)."""
    _show_app({k: v for k, v in app.items() if k != "signingKey"})
    print()
    print("signing key (shown once, keep it):")
    print(f"  {app.get('signingKey')}")
    if app.get("kind") != "push":
        print()
        print("next: run a Worker for it:")
        print(f"  Worker({app.get('id')!r}, [your workflows]).run()")
        return
    name = app.get("name")
    print()
    print("next:")
    print("  # 1. serve your PushApp with that key (it verifies every engine request with it)")
    print(f"  export EZGH_SIGNING_KEY={app.get('signingKey')}")
    print("  uvicorn your_module:app --host 127.0.0.1 --port 8000")
    if not app.get("url"):
        print("  # 2. tell the engine where it is (any time; change it the same way)")
        print(f"  ezgh workflows apps update {name} --url http://127.0.0.1:8000")
    else:
        print(f"  # 2. it is expected at {app.get('url')} (change: apps update {name} --url URL)")
    print("  # 3. sync: the engine asks the app for its workflows (again after you change them)")
    print(f"  ezgh workflows apps sync {name}")
    print(f"  ezgh workflows runs start --app {name} --workflow WORKFLOW --input '{{}}'")


def apps_update(args: argparse.Namespace) -> int:
    api = Api(args)
    app = resolve_app(api, args.app)
    body: dict[str, Any] = {}
    if args.url is not None:
        body["url"] = args.url
    notify_flags = (args.notify_on, args.notify_workflows, args.notify_group_by)
    if args.no_notify:
        if args.notify_queue or any(f is not None for f in notify_flags):
            raise CliError("--no-notify cannot be combined with other --notify-* flags")
        body["notifications"] = None
    elif args.notify_queue:
        on = csv(args.notify_on) or ["failed", "timedOut"]
        bad = [s for s in on if s not in NOTIFY_ON]
        if bad:
            raise CliError(f"--notify-on: {bad} are not among {', '.join(NOTIFY_ON)}")
        body["notifications"] = {
            "queueId": resolve_queue_id(api, args.notify_queue),
            "on": on,
            "workflows": csv(args.notify_workflows),
            "groupBy": args.notify_group_by or "run",
        }
    elif any(f is not None for f in notify_flags):
        raise CliError("--notify-on/--notify-workflows/--notify-group-by need --notify-queue")
    if not body:
        raise CliError("nothing to update: pass --url, --notify-queue … or --no-notify")
    answer = api.request("PATCH", f"/apps/{segment(app['id'])}", body=body)
    return emit(args, answer, _show_app)


def apps_sync(args: argparse.Namespace) -> int:
    api = Api(args)
    app = resolve_app(api, args.app)
    return emit(args, api.request("POST", f"/apps/{segment(app['id'])}/sync"), _show_app)


def apps_delete(args: argparse.Namespace) -> int:
    api = Api(args)
    app = resolve_app(api, args.app)
    api.request("DELETE", f"/apps/{segment(app['id'])}")
    return emit(args, {"deleted": app["id"]}, lambda d: print(f"deleted app {app['name']}"))


# --- runs -------------------------------------------------------------------------------------


def _show_run(run: dict[str, Any]) -> None:
    record(
        run,
        (
            "id",
            "appId",
            "workflow",
            "status",
            "attempt",
            "runKey",
            "scheduleId",
            "parentRunId",
            "input",
            "inputRef",
            "output",
            "outputRef",
            "error",
            "createdAt",
            "startedAt",
            "endedAt",
        ),
    )
    steps = run.get("steps")
    if steps:
        print()
        table(steps, ("id", "kind", "status", "attempt", "startedAt", "endedAt"))
    _show_callback_urls(steps or [])


def _show_callback_urls(steps: list[dict[str, Any]]) -> None:
    """The URLs of callback steps still waiting (GetRun shows them to a key that may
    complete them): a POST of a JSON body completes one."""
    for step in steps:
        if step.get("kind") == "callback" and step.get("url") and step.get("status") == "waiting":
            print(
                f"callback {step.get('name') or step.get('id')} waits for a POST to {step['url']}"
            )


def runs_start(args: argparse.Namespace) -> int:
    api = Api(args)
    app = resolve_app(api, args.app)
    body: dict[str, Any] = {
        "appId": app["id"],
        "workflow": args.workflow,
        "input": parse_json(args.input, "--input") if args.input is not None else None,
    }
    if args.run_key:
        body["runKey"] = args.run_key
    started = api.request("POST", "/runs", body=body)
    if args.wait:
        return run_watch.watched(args, str(started["id"]), first=started)
    return emit(args, started, _show_run)


def runs_get(args: argparse.Namespace) -> int:
    if args.follow:
        return run_watch.watched(args, args.run_id)
    return emit(args, Api(args).run(args.run_id), _show_run)


def runs_watch(args: argparse.Namespace) -> int:
    return run_watch.watched(args, args.run_id)


def runs_list(args: argparse.Namespace) -> int:
    api = Api(args)
    params: dict[str, Any] = {
        "workflow": args.workflow,
        "status": args.status,
        "runKey": args.run_key,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    if args.app:
        params["appId"] = resolve_app(api, args.app)["id"]
    answer = api.request("GET", "/runs", params=params)

    def human(d: dict[str, Any]) -> None:
        table(d.get("runs", []), RUN_COLUMNS)
        if d.get("nextCursor"):
            print(f"more: --cursor {d['nextCursor']}")

    return emit(args, answer, human)


def runs_cancel(args: argparse.Namespace) -> int:
    answer = Api(args).request("POST", f"/runs/{segment(args.run_id)}/cancel")
    return emit(args, answer, _show_run)


def runs_retry(args: argparse.Namespace) -> int:
    answer = Api(args).request("POST", f"/runs/{segment(args.run_id)}/retry")
    return emit(args, answer, _show_run)


def runs_events(args: argparse.Namespace) -> int:
    api = Api(args)
    events: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = api.request("GET", f"/runs/{segment(args.run_id)}/events", params={"cursor": cursor})
        events.extend(page.get("events", []))
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return emit(args, {"events": events}, lambda d: table(d["events"], EVENT_COLUMNS))


# --- schedules --------------------------------------------------------------------------------


def _show_schedule(s: dict[str, Any]) -> None:
    record(s, (*SCHEDULE_COLUMNS, "appId", "input", "createdAt", "updatedAt"))


def schedules_create(args: argparse.Namespace) -> int:
    api = Api(args)
    app = resolve_app(api, args.app)
    body: dict[str, Any] = {"appId": app["id"], "workflow": args.workflow, "cron": args.cron}
    if args.timezone:
        body["timezone"] = args.timezone
    if args.input is not None:
        body["input"] = parse_json(args.input, "--input")
    return emit(args, api.request("POST", "/schedules", body=body), _show_schedule)


def schedules_list(args: argparse.Namespace) -> int:
    answer = Api(args).all_pages("/schedules", "schedules")
    return emit(args, answer, lambda d: table(d.get("schedules", []), SCHEDULE_COLUMNS))


def schedules_get(args: argparse.Namespace) -> int:
    answer = Api(args).request("GET", f"/schedules/{segment(args.schedule)}")
    return emit(args, answer, _show_schedule)


def schedules_update(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    for flag in ("cron", "timezone", "workflow"):
        if getattr(args, flag) is not None:
            body[flag] = getattr(args, flag)
    if args.input is not None:
        body["input"] = parse_json(args.input, "--input")
    if not body:
        raise CliError("nothing to update: pass --cron, --timezone, --workflow or --input")
    answer = Api(args).request("PATCH", f"/schedules/{segment(args.schedule)}", body=body)
    return emit(args, answer, _show_schedule)


def _schedule_action(action: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        answer = Api(args).request("POST", f"/schedules/{segment(args.schedule)}/{action}")
        return emit(args, answer, _show_schedule)

    return run


def schedules_delete(args: argparse.Namespace) -> int:
    Api(args).request("DELETE", f"/schedules/{segment(args.schedule)}")
    return emit(
        args, {"deleted": args.schedule}, lambda d: print(f"deleted schedule {args.schedule}")
    )


# --- the parser -------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add `workflows apps|runs|schedules …`."""
    parent = connection_parent()
    workflows = subparsers.add_parser("workflows", help="apps, runs and schedules")
    resources = workflows.add_subparsers(dest="resource", metavar="RESOURCE", required=True)

    def leaf(group: Any, name: str, func: Any, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = group.add_parser(name, parents=[parent], help=help)
        parser.set_defaults(func=guarded(func))
        return parser

    apps = resources.add_parser("apps", help="apps that host workflows").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    leaf(apps, "list", apps_list, "list apps")
    leaf(apps, "get", apps_get, "show an app").add_argument("app", help="name, UUID or slug")
    p = leaf(apps, "create", apps_create, "create an app")
    p.add_argument("name")
    p.add_argument("--kind", choices=("push", "pull"), default="push")
    p.add_argument("--url", help="a push app's URL (or later: apps update NAME --url URL)")
    p = leaf(apps, "update", apps_update, "change an app's URL or run-result notifications")
    p.add_argument("app", help="name, UUID or slug")
    p.add_argument("--url")
    p.add_argument("--notify-queue", metavar="QUEUE", help="queue name or ID for run results")
    p.add_argument("--notify-on", metavar="STATUSES", help="e.g. failed,timedOut")
    p.add_argument("--notify-workflows", metavar="NAMES", help="only these workflows (a,b)")
    p.add_argument("--notify-group-by", choices=("run", "workflow"))
    p.add_argument("--no-notify", action="store_true", help="turn notifications off")
    leaf(apps, "sync", apps_sync, "sync a push app").add_argument("app")
    leaf(apps, "delete", apps_delete, "delete an app").add_argument("app")

    runs = resources.add_parser("runs", help="workflow runs").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    p = leaf(runs, "start", runs_start, "start a run")
    p.add_argument("--app", required=True, help="app name, UUID or slug")
    p.add_argument("--workflow", required=True)
    p.add_argument("--input", help="JSON input")
    p.add_argument("--run-key")
    run_watch.add_follow_flags(p, "--wait", "print the run's progress until it ends")
    p = leaf(runs, "get", runs_get, "show a run and its steps")
    p.add_argument("run_id")
    run_watch.add_follow_flags(p, "--follow", "print the run's progress until it ends")
    p = leaf(
        runs,
        "watch",
        runs_watch,
        f"print a run's progress until it ends ({run_watch.EXIT_HELP})",
    )
    p.add_argument("run_id")
    run_watch.add_follow_flags(p, None, "")
    p = leaf(runs, "list", runs_list, "search runs, newest first")
    p.add_argument("--app")
    p.add_argument("--workflow")
    p.add_argument(
        "--status",
        choices=("running", "cancelling", "completed", "failed", "cancelled", "timedOut"),
    )
    p.add_argument("--run-key")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--cursor")
    leaf(runs, "cancel", runs_cancel, "cancel a run").add_argument("run_id")
    leaf(runs, "retry", runs_retry, "retry a failed or timed-out run").add_argument("run_id")
    leaf(runs, "events", runs_events, "list a run's events").add_argument("run_id")
    replay_check.register(runs, resources, leaf, resolve_app)

    schedules = resources.add_parser("schedules", help="cron schedules").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    p = leaf(schedules, "create", schedules_create, "create a schedule")
    p.add_argument("--app", required=True, help="app name, UUID or slug")
    p.add_argument("--workflow", required=True)
    p.add_argument("--cron", required=True, help="5-field cron, e.g. '0 9 * * 1-5'")
    p.add_argument("--timezone", help="IANA time zone (default UTC)")
    p.add_argument("--input", help="JSON input of each run")
    leaf(schedules, "list", schedules_list, "list schedules")
    leaf(schedules, "get", schedules_get, "show a schedule").add_argument("schedule")
    p = leaf(schedules, "update", schedules_update, "change a schedule")
    p.add_argument("schedule", help="UUID or slug")
    p.add_argument("--cron")
    p.add_argument("--timezone")
    p.add_argument("--workflow")
    p.add_argument("--input", help="JSON input of each run")
    for action in ("pause", "resume"):
        leaf(schedules, action, _schedule_action(action), f"{action} a schedule").add_argument(
            "schedule"
        )
    leaf(schedules, "delete", schedules_delete, "delete a schedule").add_argument("schedule")
