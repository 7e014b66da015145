"""`ezgh ops repair`: re-arm the invocations and timers the runs table says are owed, and
give EZGH queues made by an older version the settings of this one.

    ezgh ops repair [--project-id UUID] [--older-than 300] [--yes] [--json] [--stack EzghWorkflows]

Without `--yes` it only lists what it would re-arm (a dry run), as `ezgh ops teardown` does.
What it looks for is in `ezgh_engine.service.repair`; `ezgh dev` runs the same reconciliation
on every start from a kept state dir. Exit code: 0 nothing owed (or all re-armed with
`--yes`), 1 something owed and not re-armed (a dry run), 2 could not check.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ezgh_engine.cli.common import add_yes, configure_stack, operator_command, tables_parent


@operator_command("repair")
def _repair(args: argparse.Namespace) -> int:
    from ezgh_engine.service.repair import queue_upgrades, repair

    configure_stack(args.stack)
    actions: list[Any] = [
        *repair(args.project_id, apply=args.yes, older_than_seconds=args.older_than),
        *queue_upgrades(args.project_id, apply=args.yes),
    ]
    if args.json:
        print(
            json.dumps({"applied": args.yes, "repairs": [a.to_json() for a in actions]}, indent=2)
        )
    elif not actions:
        print("nothing to repair")
    else:
        verb = "re-armed" if args.yes else "would re-arm"
        for action in actions:
            print(f"{verb} {action.summary()}")
        if not args.yes:
            print("(a dry run: --yes re-arms them)")
    return 1 if actions and not args.yes else 0


def register(commands: Any) -> None:
    """Add `repair` under `ezgh ops`."""
    parser = commands.add_parser(
        "repair",
        help="re-arm owed invocations and lost timers of active runs, and bring older queues' "
        "settings up to date (dry run without --yes)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            tables_parent(
                "only runs whose lease ended, and timers due, at least this long ago (default 300)"
            )
        ],
    )
    add_yes(parser, "re-arm")
    parser.set_defaults(func=_repair)
