"""`ezgh flows …`: EzFlow graph workflows from the command line.

    ezgh flows create examples/flows/order-check.json   # a flow and its first commit
    ezgh flows list | get order-check | delete order-check
    ezgh flows commit order-check FILE [--branch main] [--message "..."]
    ezgh flows commits order-check [--branch main]
    ezgh flows start order-check [--input '{"orderId": 1}'] [--tracking-id T] [--branch B]
    ezgh flows jobs list [--flow order-check] [--status WAITING] [--tracking-id T]
    ezgh flows jobs get <jobId>        # the job and a table of its actions
    ezgh flows jobs cancel <jobId>
    ezgh flows failed-items list [--flow order-check] [--job <jobId>]
    ezgh flows failed-items retry <failedItemId>

A flow file is JSON: `{name, description?, graph: {nodes, edges}}` (for `create`), or a bare
graph `{nodes, edges}` (for `commit`). Flows are named by name, ID or slug.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ezgh_engine.cli.common import (
    Api,
    CliError,
    connection_parent,
    emit,
    guarded,
    parse_json,
    record,
    segment,
    table,
)

FLOW_COLUMNS = ("name", "id", "slug", "activeBranch", "createdAt")
COMMIT_COLUMNS = ("id", "branch", "message", "createdAt")
JOB_COLUMNS = ("id", "flowId", "status", "trackingId", "startedAt", "durationMs")
ACTION_COLUMNS = ("nodeId", "moduleType", "status", "attempt", "durationMs", "output", "error")
FAILED_COLUMNS = ("id", "jobId", "nodeId", "moduleType", "attempts", "createdAt", "retriedAt")


def _read_json(path: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    return parse_json(text, path)


def _graph_of(data: Any, path: str) -> dict[str, Any]:
    graph = data.get("graph", data) if isinstance(data, dict) else None
    if not isinstance(graph, dict) or "nodes" not in graph:
        raise CliError(f"{path}: expected {{nodes, edges}} or {{name, graph: {{nodes, edges}}}}")
    return graph


def _create(args: argparse.Namespace) -> int:
    data = _read_json(args.file)
    name = args.name or (data.get("name") if isinstance(data, dict) else None)
    if not name:
        raise CliError(f"{args.file}: no name (give one in the file or with --name)")
    api = Api(args)
    body: dict[str, Any] = {"name": name}
    if isinstance(data, dict) and data.get("description"):
        body["description"] = data["description"]
    flow = api.request("POST", "/flows", body=body)
    made = api.request(
        "POST",
        f"/flows/{segment(flow['id'])}/commits",
        body={"graph": _graph_of(data, args.file), "message": args.message or "initial"},
    )
    answer = {**flow, "commit": {k: v for k, v in made.items() if k != "graph"}}
    return emit(args, answer, lambda d: record(d))


def _list(args: argparse.Namespace) -> int:
    flows = Api(args).all_pages("/flows", "flows")
    return emit(args, flows, lambda d: table(d.get("flows", []), FLOW_COLUMNS))


def _get(args: argparse.Namespace) -> int:
    return emit(args, Api(args).request("GET", f"/flows/{segment(args.flow)}"), record)


def _delete(args: argparse.Namespace) -> int:
    Api(args).request("DELETE", f"/flows/{segment(args.flow)}")
    return emit(args, {"deleted": args.flow}, lambda _: print(f"deleted flow {args.flow}"))


def _commit(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"graph": _graph_of(_read_json(args.file), args.file)}
    if args.branch:
        body["branch"] = args.branch
    if args.message:
        body["message"] = args.message
    made = Api(args).request("POST", f"/flows/{segment(args.flow)}/commits", body=body)
    return emit(args, made, lambda d: record(d, COMMIT_COLUMNS))


def _commits(args: argparse.Namespace) -> int:
    found = Api(args).request(
        "GET", f"/flows/{segment(args.flow)}/commits", params={"branch": args.branch}
    )
    return emit(args, found, lambda d: table(d.get("commits", []), COMMIT_COLUMNS))


def _start(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.input is not None:
        body["input"] = parse_json(args.input, "--input")
    if args.tracking_id:
        body["trackingId"] = args.tracking_id
    if args.branch:
        body["branch"] = args.branch
    job = Api(args).request("POST", f"/flows/{segment(args.flow)}/jobs", body=body)
    return emit(args, job, lambda j: record(j, JOB_COLUMNS))


def _show_job(job: dict[str, Any]) -> None:
    record(job, (*JOB_COLUMNS, "commitId", "branch", "finishedAt", "output", "error"))
    print()
    table(job.get("actions", []), ACTION_COLUMNS)
    for action in job.get("actions", []):
        if action.get("resumeUrl"):
            print(f"\nnode {action['nodeId']} waits for a POST to {action['resumeUrl']}")


def _jobs_list(args: argparse.Namespace) -> int:
    params = {"flowId": args.flow, "status": args.status, "trackingId": args.tracking_id}
    found = Api(args).request("GET", "/jobs", params=params)
    return emit(args, found, lambda d: table(d.get("jobs", []), JOB_COLUMNS))


def _jobs_get(args: argparse.Namespace) -> int:
    return emit(args, Api(args).request("GET", f"/jobs/{segment(args.job)}"), _show_job)


def _jobs_cancel(args: argparse.Namespace) -> int:
    job = Api(args).request("POST", f"/jobs/{segment(args.job)}/cancel")
    return emit(args, job, lambda j: record(j, JOB_COLUMNS))


def _failed_list(args: argparse.Namespace) -> int:
    found = Api(args).request(
        "GET", "/failedItems", params={"flowId": args.flow, "jobId": args.job}
    )
    return emit(args, found, lambda d: table(d.get("failedItems", []), FAILED_COLUMNS))


def _failed_retry(args: argparse.Namespace) -> int:
    job = Api(args).request("POST", f"/failedItems/{segment(args.item)}/retry")
    return emit(args, job, lambda j: record(j, JOB_COLUMNS))


def _sub(commands: Any, parent: Any, name: str, text: str, func: Any, *positional: str) -> Any:
    p = commands.add_parser(name, parents=[parent], help=text)
    for arg in positional:
        p.add_argument(arg)
    p.set_defaults(func=guarded(func))
    return p


def register(subparsers: Any) -> None:
    parent = connection_parent()
    flows = subparsers.add_parser("flows", help="EzFlow graph workflows: flows, commits, jobs")
    commands = flows.add_subparsers(dest="flows_command", metavar="COMMAND", required=True)
    p = _sub(commands, parent, "create", "create a flow from a JSON file", _create, "file")
    p.add_argument("--name", help="the flow's name (default: the file's name field)")
    p.add_argument("--message", help="the first commit's message")
    _sub(commands, parent, "list", "list flows", _list)
    _sub(commands, parent, "get", "show a flow", _get, "flow")
    _sub(commands, parent, "delete", "delete a flow", _delete, "flow")
    p = _sub(commands, parent, "commit", "commit a graph file", _commit, "flow", "file")
    p.add_argument("--branch")
    p.add_argument("--message")
    p = _sub(commands, parent, "commits", "list commits, newest first", _commits, "flow")
    p.add_argument("--branch")
    p = _sub(commands, parent, "start", "start a job", _start, "flow")
    p.add_argument("--input", help="the job's input, JSON")
    p.add_argument("--tracking-id")
    p.add_argument("--branch", help="default: the flow's active branch")

    jobs = commands.add_parser("jobs", help="jobs: list, get, cancel")
    job_commands = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)
    p = _sub(job_commands, parent, "list", "search jobs, newest first", _jobs_list)
    p.add_argument("--flow", help="name, ID or slug")
    p.add_argument("--status", choices=("RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED"))
    p.add_argument("--tracking-id")
    _sub(job_commands, parent, "get", "a job and its actions", _jobs_get, "job")
    _sub(job_commands, parent, "cancel", "cancel a job", _jobs_cancel, "job")

    failed = commands.add_parser("failed-items", help="failed node executions: list, retry")
    failed_commands = failed.add_subparsers(dest="failed_command", metavar="COMMAND", required=True)
    p = _sub(failed_commands, parent, "list", "list failed items", _failed_list)
    p.add_argument("--flow")
    p.add_argument("--job")
    _sub(failed_commands, parent, "retry", "resume the job from that node", _failed_retry, "item")
