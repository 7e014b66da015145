"""`ezgh dev`: the whole engine on this machine until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from ezgh_engine import clock


def register(subparsers: Any) -> None:
    """Add `dev [--port 8288] [--state-dir .ezgh] [--reset] [--app MODULE:ATTR]...`."""
    parser = subparsers.add_parser(
        "dev",
        help="run the engine locally (embedded AWS emulator, no AWS account)",
        description="Run the engine locally: the Lambda handlers against an embedded AWS "
        "emulator, with SQS, DynamoDB stream and Scheduler event sources driven locally.",
    )
    parser.add_argument("--port", type=int, default=8288, help="HTTP API port (default 8288)")
    parser.add_argument(
        "--state-dir",
        default=".ezgh",
        help="where the engine keeps its state and writes dev.env (default .ezgh): "
        "organization, key, apps, runs, queues, schedules and payloads survive a restart",
    )
    parser.add_argument(
        "--reset", action="store_true", help="start empty: delete the state kept in --state-dir"
    )
    # Tests: engine time from a `SkipClock.share()` file, so a test skips a sleep's days.
    parser.add_argument("--clock-file", help=argparse.SUPPRESS)
    parser.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="serve this PushApp, register and sync it (repeatable; EzFlow's interpreter "
        "app ezgh-flows is the topology's flows function, always registered)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def reset_state(state_dir: Path) -> None:
    """Delete what `ezgh dev` keeps in `state_dir` (the journal and its snapshot, state.json,
    dev.env); other files there stay."""
    from ezgh_engine.local.persistence import JOURNAL_NAME, SNAPSHOT_NAME, STATE_NAME

    aws_dir = state_dir / "aws"
    for path in (aws_dir / SNAPSHOT_NAME, aws_dir / JOURNAL_NAME):
        path.unlink(missing_ok=True)  # the snapshot first: a journal alone is still whole
    for path in (state_dir / STATE_NAME, state_dir / "dev.env"):
        path.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    """Start the runtime, print its environment, and wait for a signal to stop it."""
    from ezgh_engine.api.routes_console import sign_in_link
    from ezgh_engine.local.runtime import LocalRuntime

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # moto and werkzeug log every request at INFO.
    for noisy in ("werkzeug", "botocore", "urllib3", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    stopping = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    began = clock.monotonic()
    if args.reset:
        reset_state(Path(args.state_dir))
    engine_clock = clock.SharedOffsetClock(args.clock_file) if args.clock_file else None
    runtime = LocalRuntime(
        port=args.port,
        state_dir=args.state_dir,
        apps=args.app,
        clock=engine_clock,
        echo=lambda s: print(s, flush=True),
        persist=True,
    )
    try:
        runtime.start()
        runtime.host_flows()
    except Exception as error:
        print(f"ezgh dev: could not start: {error}", flush=True)
        return 1
    try:
        for name, value in runtime.env.items():
            print(f"{name}={value}", flush=True)
        print(
            f"ezgh dev: console (signed in): {sign_in_link(runtime.api_url, runtime.api_key, runtime.org_id, runtime.project_id)}",
            flush=True,
        )
        print(
            f"ezgh dev: ready in {clock.monotonic() - began:.1f}s on {runtime.api_url} "
            f"(env in {runtime.state_dir / 'dev.env'}); Ctrl-C stops",
            flush=True,
        )
        while not stopping.wait(1.0):
            pass
    finally:
        print("ezgh dev: stopping", flush=True)
        runtime.stop()
        # Nothing is left to free that the exit does not free: keep the interpreter's
        # teardown from walking the runtime's heap (moto's state, botocore's models) in its
        # final garbage collections, seconds of CPU per stop.
        gc.freeze()
    return 0
