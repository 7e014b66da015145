"""`ezgh`: dispatch to a subcommand module.

Each subcommand lives in its own module with `register(subparsers)`, which adds its parser
and sets `func` (taking the parsed arguments, answering an exit code). To add
`ezgh workflows ...` or `ezgh queues ...`, write the module and list it in `_COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# Modules under ezgh_engine.cli, each with `register(subparsers)`.
_COMMANDS = ("dev", "bootstrap", "workflows", "queues", "ops", "flows")


def build_parser(commands: Sequence[str] = _COMMANDS) -> argparse.ArgumentParser:
    """The parser for every subcommand (or only those of `commands`)."""
    parser = argparse.ArgumentParser(
        prog="ezgh", description="Self-hosted EZGH Workflows and EZGH Queues."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"ezgh_engine.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ezgh` script; answers the process exit code."""
    try:
        try:
            return _dispatch(argv)
        finally:  # (also after --help): here, not at exit, where it could not be caught
            sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()


def _dispatch(argv: Sequence[str] | None) -> int:
    arguments = list(argv if argv is not None else sys.argv[1:])
    # A named command needs only its own module: the others import boto3 and httpx (a
    # quarter of a second of CPU), which `ezgh dev` would otherwise spend before it starts
    # its execution environments' forkserver, the first thing it does.
    named = arguments[:1] if arguments[:1] and arguments[0] in _COMMANDS else _COMMANDS
    parser = build_parser(named)
    args = parser.parse_args(arguments)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args) or 0)


def _reader_gone() -> int:
    """Whoever read the output stopped reading (`ezgh … | head`): stop quietly, as `cat`
    does, instead of a traceback. What is still buffered for stdout goes nowhere (Python
    would try to flush it at exit and report the closed pipe again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # what a shell reports for a command a closed pipe stopped (128 + SIGPIPE)


if __name__ == "__main__":
    raise SystemExit(main())
