"""`ezgh`: dispatch to a subcommand module.

Each subcommand lives in its own module with `register(subparsers)`, which adds its parser
and sets `func` (taking the parsed arguments, answering an exit code). To add
`ezgh workflows ...` or `ezgh queues ...`, write the module and list it in `_COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules under ezgh_engine.cli, each with `register(subparsers)`.
_COMMANDS = ("dev", "bootstrap", "workflows", "queues", "ops", "flows")


def build_parser() -> argparse.ArgumentParser:
    """The parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="ezgh", description="Self-hosted EZGH Workflows and EZGH Queues."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"ezgh_engine.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ezgh` script; answers the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
