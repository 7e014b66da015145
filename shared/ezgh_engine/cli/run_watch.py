"""`ezgh workflows runs watch ID`, `runs get ID --follow`, `runs start ... --wait`: a run's
progress as it goes, and its outcome as the exit code.

It reads GetRun every `--interval` seconds (one request, the run with its steps) and prints
what changed since the last read: a step that started, ended, is retried or waits (a
callback's URL when the key may complete it), then the run's end. With `--json` the progress
goes to stderr and stdout holds the ended run alone, for scripts.

Exit codes: 0 completed, 3 failed, 4 timed out, 5 cancelled (`OUTCOME_EXIT`); 1 when the
CLI could not ask (an API error), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from ezgh_engine.cli.common import Api

OUTCOME_EXIT = {"completed": 0, "failed": 3, "timedOut": 4, "cancelled": 5}
ENDED = frozenset(OUTCOME_EXIT)
EXIT_HELP = "exit code: 0 completed, 3 failed, 4 timed out, 5 cancelled (1: the request failed)"
DEFAULT_INTERVAL = 1.0


def _step_line(step: dict[str, Any]) -> str:
    head = f"step {step.get('id')} {step.get('kind')} {step.get('status')}"
    if int(step.get("attempt") or 1) > 1:
        head += f" (attempt {step['attempt']})"
    if step.get("status") in ("sleeping", "retrying", "waiting") and step.get("wakeAt"):
        head += f" until {step['wakeAt']}"
    error = step.get("error") or {}
    if error:
        head += f": {error.get('name') or error.get('code')}: {error.get('message', '')}"
    if step.get("kind") == "callback" and step.get("url") and step.get("status") == "waiting":
        head += f"; POST a JSON body to {step['url']}"
    return head


def _run_line(run: dict[str, Any]) -> str:
    head = f"run {run.get('id')} {run.get('status')}"
    if run.get("status") == "failed" and run.get("error"):
        error = run["error"]
        head += f": {error.get('name') or error.get('code')}: {error.get('message', '')}"
    elif run.get("status") == "completed" and "output" in run:
        head += f": {json.dumps(run.get('output'), ensure_ascii=False)[:200]}"
    return head


class Progress:
    """What was printed of a run: prints what changed since (`see`)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._steps: dict[str, tuple[Any, ...]] = {}
        self._status: str | None = None

    def see(self, run: dict[str, Any]) -> None:
        if self._status is None:
            self._say(f"run {run.get('id')} {run.get('workflow')} {run.get('status')}")
        for step in run.get("steps") or []:
            key = (step.get("status"), step.get("attempt"), bool(step.get("url")))
            if self._steps.get(str(step.get("id"))) != key:
                self._steps[str(step.get("id"))] = key
                self._say(_step_line(step))
        status = str(run.get("status"))
        changed = self._status is not None and status != self._status
        if changed or status in ENDED:
            self._say(_run_line(run))
        self._status = status


def follow(
    api: Api,
    run_id: str,
    *,
    interval: float = DEFAULT_INTERVAL,
    say: Callable[[str], None] = print,
    first: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Print the run's progress until it ends; answer the ended run."""
    progress = Progress(say)
    run = first if first is not None else api.run(run_id)
    while True:
        progress.see(run)
        if run.get("status") in ENDED:
            return run
        time.sleep(interval)
        run = api.run(run_id)


def watched(args: argparse.Namespace, run_id: str, first: dict[str, Any] | None = None) -> int:
    """Follow the run (progress on stdout, or stderr with `--json`); its outcome's exit code."""
    as_json = getattr(args, "json", False)

    def say(line: str) -> None:
        print(line, file=sys.stderr if as_json else sys.stdout, flush=True)

    try:
        run = follow(Api(args), run_id, interval=args.interval, say=say, first=first)
    except KeyboardInterrupt:
        return 130
    if as_json:
        print(json.dumps(run, indent=2, ensure_ascii=False))
    return OUTCOME_EXIT.get(str(run.get("status")), 1)


def add_follow_flags(parser: argparse.ArgumentParser, flag: str | None, what: str) -> None:
    """`flag` (e.g. `--follow`; None: always follows) and `--interval`."""
    if flag is not None:
        parser.add_argument(flag, action="store_true", help=f"{what}; {EXIT_HELP}")
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help=f"seconds between reads of the run while following (default {DEFAULT_INTERVAL:g})",
    )
