"""`ezgh ops …`: operator commands.

    ezgh ops stuck-runs [--project-id UUID] [--older-than 300] [--json] [--stack EzghWorkflows]
    ezgh ops repair [--project-id UUID] [--older-than 300] [--yes] [--json] [--stack ...]
    ezgh ops verify [--stack EzghWorkflows] [--timeout 180] [--keep] [--json]
    ezgh ops runs-index [--project-id UUID] [--yes] [--json] [--stack ...]

`verify` runs a canary workflow through the API (see `ezgh_engine.cli.verify`); the others
read the engine's tables directly. Where the tables are: with `--stack`, from that CloudFormation stack's outputs (as
`ezgh bootstrap` reads them, with the operator's AWS credentials); without it, from the
environment variables the engine's handlers read (`EZGH_RUNS_TABLE`, ...; `AWS_ENDPOINT_URL`
for an emulator). `stuck-runs` without `--project-id` scans the whole runs table (see
`ezgh_engine.service.ops`). Exit code: 0 none stuck, 1 some stuck, 2 could not check.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ezgh_engine.cli.common import add_yes, configure_stack, operator_command, tables_parent


@operator_command("stuck-runs")
def _stuck_runs(args: argparse.Namespace) -> int:
    from ezgh_engine.service.ops import find_stuck_runs

    configure_stack(args.stack)
    stuck = find_stuck_runs(args.project_id, older_than_seconds=args.older_than)
    if args.json:
        print(json.dumps({"stuckRuns": [s.to_json() for s in stuck]}, indent=2))
    elif not stuck:
        print("no stuck runs")
    else:
        for s in stuck:
            print(f"{s.run_id}  {s.workflow}  {s.status}  project {s.project_id}\n    {s.why}")
    return 1 if stuck else 0


@operator_command("runs-index")
def _runs_index(args: argparse.Namespace) -> int:
    from ezgh_engine.adapters import runs_index_migration as migration

    configure_stack(args.stack)
    result = migration.backfill(args.project_id, apply=args.yes)
    summary = {"found": result.found, "moved": result.moved, "changed": result.changed}
    if args.json:
        print(json.dumps(summary, indent=2))
    elif not args.yes:
        missing = migration.indexes_missing()
        state = f"; not ACTIVE yet: {', '.join(missing)}" if missing else ""
        print(f"{result.found} run(s) to move into the narrow runs indexes{state}")
    else:
        print(f"moved {result.moved} of {result.found} run(s); {result.changed} kept changing")
    return 1 if result.changed or (result.found and not args.yes) else 0


def register(subparsers: Any) -> None:
    """Add `ezgh ops` and its commands."""
    parser = subparsers.add_parser(
        "ops", help="operator checks over the engine's tables", description=__doc__
    )
    commands = parser.add_subparsers(dest="ops_command", metavar="COMMAND", required=True)
    stuck = commands.add_parser(
        "stuck-runs",
        help="runs that are running/cancelling with nothing pending (no lease, no owed "
        "invocation, no sleeping/waiting/retrying/running step)",
        parents=[tables_parent("only runs quiet at least this long (default 300)")],
    )
    stuck.set_defaults(func=_stuck_runs)
    index = commands.add_parser(
        "runs-index",
        help="move runs written before the narrow runs indexes into them (docs/deploy.md): "
        "lists how many without --yes",
        parents=[tables_parent("not used by this command")],
    )
    add_yes(index, "move them")
    index.set_defaults(func=_runs_index)
    from ezgh_engine.cli import repair, teardown, verify
    from ezgh_engine.cli.common import connection_parent

    verify.register(commands, connection_parent())  # ezgh ops verify (cli/verify.py)
    teardown.register(commands)  # ezgh ops teardown (cli/teardown.py)
    repair.register(commands)  # ezgh ops repair (cli/repair.py)
