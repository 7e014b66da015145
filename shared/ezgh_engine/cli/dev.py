"""`ezgh dev`: the whole engine on this machine until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from ezgh_engine import clock


def register(subparsers: Any) -> None:
    """Add `dev [--port 8288] [--state-dir .ezgh] [--app MODULE:ATTR]...`."""
    parser = subparsers.add_parser(
        "dev",
        help="run the engine locally (embedded AWS emulator, no AWS account)",
        description="Run the engine locally: the Lambda handlers against an embedded AWS "
        "emulator, with SQS, DynamoDB stream and Scheduler event sources driven locally.",
    )
    parser.add_argument("--port", type=int, default=8288, help="HTTP API port (default 8288)")
    parser.add_argument(
        "--state-dir", default=".ezgh", help="where dev.env is written (default .ezgh)"
    )
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
    runtime = LocalRuntime(
        port=args.port, state_dir=args.state_dir, apps=args.app, echo=lambda s: print(s, flush=True)
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
    return 0
