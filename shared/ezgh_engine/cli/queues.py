"""`ezgh queues …`: EZGH Queues from the command line (seed 004's forms).

    ezgh queues create orders [--fifo] [--max-receive-count 5] [--visibility-timeout 30]
    ezgh queues list | get orders | delete orders | redrive orders
    ezgh queues send orders --body '{"orderId":1042}' --attribute source=web [--group-id g]
    ezgh queues subscriptions create orders --workflow-app billing-jobs --workflow chargeCustomer
    ezgh queues subscriptions create payments --workflow-app billing-jobs --workflow order \\
        --mode resume --correlation-attribute orderKey
    ezgh queues subscriptions create hooks --url https://example.com/in
    ezgh queues subscriptions list | get | update | pause | resume | delete <subscription>

Queues are named by name or ID; apps by name, UUID or slug; a subscription by its ID or by its
queue's name or ID (a queue has at most one subscription). Tables for people, `--json` for
scripts. Settings as for every API subcommand (see `cli.common`).
"""

from __future__ import annotations

import argparse
from typing import Any

from ezgh_engine.cli.common import (
    UUID_RE,
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
from ezgh_engine.cli.workflows import resolve_app

QUEUE_COLUMNS = ("name", "id", "fifo", "maxReceiveCount", "visibilityTimeoutSeconds", "createdAt")
SUB_COLUMNS = ("id", "queueId", "target", "maxConcurrency", "state", "status")


def resolve_queue(api: Api, ref: str) -> dict[str, Any]:
    """A queue by ID or name (the API takes both)."""
    return dict(api.request("GET", f"/queues/{segment(ref)}"))


def resolve_subscription(api: Api, ref: str) -> dict[str, Any]:
    """A subscription by its ID, or the subscription of the queue named `ref`."""
    if UUID_RE.match(ref):
        try:
            return dict(api.request("GET", f"/subscriptions/{segment(ref)}"))
        except CliError as exc:
            if exc.status != 404:
                raise
    queue = resolve_queue(api, ref)
    subs = api.all_pages("/subscriptions", "subscriptions", {"queueId": queue["id"]})
    found = subs.get("subscriptions", [])
    if not found:
        raise CliError(f"404 not_found: queue {ref!r} has no subscription", 404, "not_found")
    return dict(found[0])


# --- queues --------------------------------------------------------------------------------


def _create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "fifo": args.fifo}
    if args.max_receive_count is not None:
        body["maxReceiveCount"] = args.max_receive_count
    if args.visibility_timeout is not None:
        body["visibilityTimeoutSeconds"] = args.visibility_timeout
    queue = Api(args).request("POST", "/queues", body=body)
    return emit(args, queue, lambda q: record(q))


def _list(args: argparse.Namespace) -> int:
    queues = Api(args).all_pages("/queues", "queues")
    return emit(args, queues, lambda d: table(d.get("queues", []), QUEUE_COLUMNS))


def _get(args: argparse.Namespace) -> int:
    return emit(args, resolve_queue(Api(args), args.queue), lambda q: record(q))


def _delete(args: argparse.Namespace) -> int:
    api = Api(args)
    queue = resolve_queue(api, args.queue)
    api.request("DELETE", f"/queues/{segment(queue['id'])}")
    return emit(args, {"deleted": queue["id"]}, lambda _: print(f"deleted queue {queue['name']}"))


def _messages(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.messages is not None:
        messages = parse_json(args.messages, "--messages")
        if not isinstance(messages, list):
            raise CliError("--messages: a JSON list of {body, attributes?, groupId?, dedupId?}")
        return messages
    if not args.body:
        raise CliError("give --body (once per message) or --messages JSON")
    attributes: dict[str, str] = {}
    for pair in args.attribute or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--attribute {pair!r}: use NAME=VALUE")
        attributes[name] = value
    out = []
    for body in args.body:
        message: dict[str, Any] = {"body": body}
        if attributes:
            message["attributes"] = dict(attributes)
        if args.group_id:
            message["groupId"] = args.group_id
        if args.dedup_id and len(args.body) == 1:
            message["dedupId"] = args.dedup_id
        out.append(message)
    return out


def _send(args: argparse.Namespace) -> int:
    api = Api(args)
    queue = resolve_queue(api, args.queue)
    answer = api.request(
        "POST", f"/queues/{segment(queue['id'])}/messages", body={"messages": _messages(args)}
    )
    return emit(args, answer, lambda d: table(d.get("messages", []), ("messageId", "seq")))


def _redrive(args: argparse.Namespace) -> int:
    api = Api(args)
    queue = resolve_queue(api, args.queue)
    answer = api.request("POST", f"/queues/{segment(queue['id'])}/redrive")
    return emit(
        args,
        answer,
        lambda d: print(f"moved {d.get('moved')} message(s); {d.get('remaining')} left"),
    )


# --- subscriptions -------------------------------------------------------------------------


def _target(api: Api, args: argparse.Namespace, *, partial: bool = False) -> dict[str, Any] | None:
    if args.url:
        return {"kind": "https", "url": args.url}
    if not (args.workflow_app or args.workflow or args.mode or args.correlation_attribute):
        if partial:
            return None
        raise CliError("give --url, or --workflow-app and --workflow")
    target: dict[str, Any] = {"kind": "workflow"}
    if args.workflow_app:
        target["appId"] = resolve_app(api, args.workflow_app)["id"]
    if args.workflow:
        target["workflow"] = args.workflow
    if args.mode or not partial:
        target["mode"] = args.mode or "start"
    if args.correlation_attribute:
        target["correlationAttribute"] = args.correlation_attribute
    if not partial and ("appId" not in target or "workflow" not in target):
        raise CliError("a workflow target needs --workflow-app and --workflow")
    return target


def _sub_create(args: argparse.Namespace) -> int:
    api = Api(args)
    queue = resolve_queue(api, args.queue)
    body: dict[str, Any] = {"queueId": queue["id"], "target": _target(api, args)}
    if args.max_concurrency is not None:
        body["maxConcurrency"] = args.max_concurrency
    sub = api.request("POST", "/subscriptions", body=body)
    return emit(args, sub, lambda s: record(s))


def _sub_list(args: argparse.Namespace) -> int:
    api = Api(args)
    params = {"queueId": resolve_queue(api, args.queue)["id"]} if args.queue else None
    subs = api.all_pages("/subscriptions", "subscriptions", params)
    return emit(args, subs, lambda d: table(d.get("subscriptions", []), SUB_COLUMNS))


def _sub_get(args: argparse.Namespace) -> int:
    return emit(args, resolve_subscription(Api(args), args.subscription), lambda s: record(s))


def _sub_update(args: argparse.Namespace) -> int:
    api = Api(args)
    sub = resolve_subscription(api, args.subscription)
    body: dict[str, Any] = {}
    target = _target(api, args, partial=True)
    if target is not None:
        if target.get("kind") == "workflow":
            target = {**sub["target"], **target}
        body["target"] = target
    if args.max_concurrency is not None:
        body["maxConcurrency"] = args.max_concurrency
    if not body:
        raise CliError("nothing to change: give --max-concurrency or a target flag")
    updated = api.request("PATCH", f"/subscriptions/{segment(sub['id'])}", body=body)
    return emit(args, updated, lambda s: record(s))


def _sub_action(action: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        api = Api(args)
        sub = resolve_subscription(api, args.subscription)
        path = f"/subscriptions/{segment(sub['id'])}"
        if action == "delete":
            api.request("DELETE", path)
            return emit(args, {"deleted": sub["id"]}, lambda _: print(f"deleted {sub['id']}"))
        return emit(args, api.request("POST", f"{path}/{action}"), lambda s: record(s))

    return run


def _target_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="an HTTPS endpoint to POST each message to")
    parser.add_argument("--workflow-app", help="the app (name, ID or slug) of the workflow")
    parser.add_argument("--workflow", help="the workflow to start or resume")
    parser.add_argument("--mode", choices=("start", "resume"), help="default: start")
    parser.add_argument(
        "--correlation-attribute", help="resume mode: the message attribute holding the key"
    )
    parser.add_argument("--max-concurrency", type=int, help="deliveries at once (1 to 1000)")


def register(subparsers: Any) -> None:
    parent = connection_parent()
    queues = subparsers.add_parser("queues", help="EZGH Queues: queues, messages, subscriptions")
    commands = queues.add_subparsers(dest="queues_command", metavar="COMMAND", required=True)

    p = commands.add_parser("create", parents=[parent], help="create a queue")
    p.add_argument("name")
    p.add_argument("--fifo", action="store_true", help="a FIFO queue (messages need a group)")
    p.add_argument("--max-receive-count", type=int, help="deliveries before the DLQ (1-1000)")
    p.add_argument("--visibility-timeout", type=int, help="seconds (0-43200, default 30)")
    p.set_defaults(func=guarded(_create))
    p = commands.add_parser("list", parents=[parent], help="list queues")
    p.set_defaults(func=guarded(_list))
    for name, func, text in (
        ("get", _get, "show a queue"),
        ("delete", _delete, "delete a queue and its subscription"),
        ("redrive", _redrive, "move the dead-letter queue's messages back"),
    ):
        p = commands.add_parser(name, parents=[parent], help=text)
        p.add_argument("queue", help="name or ID")
        p.set_defaults(func=guarded(func))
    p = commands.add_parser("send", parents=[parent], help="send messages")
    p.add_argument("queue", help="name or ID")
    p.add_argument("--body", action="append", help="a message's text (repeat for more)")
    p.add_argument("--attribute", action="append", help="NAME=VALUE on every message")
    p.add_argument("--group-id", help="FIFO: the message group")
    p.add_argument("--dedup-id", help="FIFO: the deduplication ID (one message only)")
    p.add_argument("--messages", help="JSON list of {body, attributes?, groupId?, dedupId?}")
    p.set_defaults(func=guarded(_send))

    subs = commands.add_parser("subscriptions", help="deliver a queue to HTTPS or a workflow")
    sub_commands = subs.add_subparsers(
        dest="subscriptions_command", metavar="COMMAND", required=True
    )
    p = sub_commands.add_parser("create", parents=[parent], help="subscribe to a queue")
    p.add_argument("queue", help="name or ID")
    _target_flags(p)
    p.set_defaults(func=guarded(_sub_create))
    p = sub_commands.add_parser("list", parents=[parent], help="list subscriptions")
    p.add_argument("--queue", help="only this queue's (name or ID)")
    p.set_defaults(func=guarded(_sub_list))
    p = sub_commands.add_parser("get", parents=[parent], help="show a subscription")
    p.add_argument("subscription", help="its ID, or its queue's name or ID")
    p.set_defaults(func=guarded(_sub_get))
    p = sub_commands.add_parser("update", parents=[parent], help="change a subscription")
    p.add_argument("subscription", help="its ID, or its queue's name or ID")
    _target_flags(p)
    p.set_defaults(func=guarded(_sub_update))
    for action in ("pause", "resume", "delete"):
        p = sub_commands.add_parser(action, parents=[parent], help=f"{action} a subscription")
        p.add_argument("subscription", help="its ID, or its queue's name or ID")
        p.set_defaults(func=guarded(_sub_action(action)))
