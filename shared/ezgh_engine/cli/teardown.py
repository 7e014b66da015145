"""`ezgh ops teardown`: delete what the engine created at run time, before `cdk destroy`.

    ezgh ops teardown --stack EzghWorkflows            # list what would be deleted
    ezgh ops teardown --stack EzghWorkflows --yes      # delete it
    ezgh ops teardown --prefix NAME --deliver-function FN [--yes]   # without the stack

CloudFormation deletes only what the stack declared. The API creates more while it runs, all
named after the stack (`EZGH_STACK_PREFIX`, see `ezgh_engine.config`):

- the SQS queues of EZGH queues and their dead-letter queues, `<stack>-q-*`;
- pull apps' task queues, `<stack>-tasks-*`;
- the event source mappings of subscriptions, each on the stack's `deliver` function.

This command finds them by those names and that function, and deletes the mappings first
(so nothing polls a queue being deleted), then the queues. It touches no other stack's
resources: another stack's queues carry its own name. The tables and the payload bucket are
not touched (they are retained; see docs/deploy.md). Exit code: 0 done (or nothing to do),
1 listed only (no `--yes`), 2 could not finish.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, field
from typing import Any

from ezgh_engine.adapters import aws, sqs_queues, task_queues
from ezgh_engine.cli.common import add_yes, operator_command

# The stack outputs naming what this command needs (infra/stack.py writes them).
PREFIX_OUTPUT = "RuntimePrefix"
DELIVER_OUTPUT = "DeliverFunctionName"


@dataclass
class RuntimeResources:
    """What the engine made at run time for one stack."""

    mappings: list[str] = field(default_factory=list)  # event source mapping UUIDs
    queues: list[str] = field(default_factory=list)  # SQS queue URLs

    def describe(self) -> list[str]:
        return [f"event source mapping {m}" for m in self.mappings] + [
            f"queue {q}" for q in self.queues
        ]


def _queues_named(prefix: str) -> list[str]:
    sqs, urls, token = aws.client("sqs"), [], None
    while True:
        page = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=1000, **(token or {}))
        # QueueNamePrefix is a prefix of the name; check it again on the name itself.
        urls += [u for u in page.get("QueueUrls", []) if u.rsplit("/", 1)[-1].startswith(prefix)]
        if not page.get("NextToken"):
            return urls
        token = {"NextToken": page["NextToken"]}


def _mappings_of(function: str) -> list[str]:
    found, marker = [], None
    client = aws.client("lambda")
    while True:
        page = client.list_event_source_mappings(FunctionName=function, **(marker or {}))
        found += [m["UUID"] for m in page.get("EventSourceMappings", [])]
        if not page.get("NextMarker"):
            return found
        marker = {"Marker": page["NextMarker"]}


def find(prefix: str, deliver_function: str) -> RuntimeResources:
    """The stack's run-time queues (by name) and subscription mappings (by function)."""
    queues = _queues_named(sqs_queues.name_prefix(prefix)) + _queues_named(
        task_queues.name_prefix(prefix)
    )
    return RuntimeResources(mappings=_mappings_of(deliver_function), queues=sorted(set(queues)))


def delete(found: RuntimeResources) -> None:
    """Delete the mappings, then the queues (either may already be gone)."""
    client, sqs = aws.client("lambda"), aws.client("sqs")
    for mapping in found.mappings:
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):
            client.delete_event_source_mapping(UUID=mapping)
    for url in found.queues:
        with contextlib.suppress(sqs.exceptions.QueueDoesNotExist):
            sqs.delete_queue(QueueUrl=url)


def _names(args: argparse.Namespace) -> tuple[str, str]:
    if args.stack:
        from ezgh_engine.cli.bootstrap import stack_outputs

        outputs = stack_outputs(args.stack)
        return outputs[PREFIX_OUTPUT], outputs[DELIVER_OUTPUT]
    if not (args.prefix and args.deliver_function):
        raise ValueError("give --stack, or both --prefix and --deliver-function")
    return args.prefix, args.deliver_function


@operator_command("teardown")
def _run(args: argparse.Namespace) -> int:
    prefix, deliver_function = _names(args)
    found = find(prefix, deliver_function)
    for line in found.describe():
        print(("deleting " if args.yes else "would delete ") + line)
    if not found.describe():
        print(f"nothing the engine created at run time is left for {prefix!r}")
        return 0
    if not args.yes:
        print("run again with --yes to delete them", file=sys.stderr)
        return 1
    delete(found)
    return 0


def register(commands: Any) -> None:
    """Add `teardown` to the `ezgh ops` subcommands."""
    parser = commands.add_parser(
        "teardown",
        help="delete the queues and event source mappings the engine created at run time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", help="read the names from this CloudFormation stack")
    parser.add_argument("--prefix", help="the stack's runtime prefix (its name)")
    parser.add_argument("--deliver-function", help="the stack's deliver function's name")
    add_yes(parser, "delete")
    parser.set_defaults(func=_run)
