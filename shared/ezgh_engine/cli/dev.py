"""`ezgh dev`: the whole engine on this machine until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from ezgh_engine import clock
from ezgh_engine.observability import sinks, traces

TELEMETRY_DIR = "telemetry"


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
        help="serve this PushApp, register and sync it (repeatable; EzFlow's interpreter, "
        "the topology's flows function, is always served: the engine's own app, no project's)",
    )
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print no line per run start, invocation, step end, wait and run end (they are "
        "still written to STATE_DIR/telemetry/lines.log, with the EMF metrics beside them)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def show_runs(state_dir: Path, *, quiet: bool) -> None:
    """What `ezgh dev` shows of its runs (the handlers read these variables, which travel
    with every call to the execution environments): a line per fact on the terminal
    (unless `quiet`), lines and EMF documents under `STATE_DIR/telemetry`, and every run's
    trace (the emulator's X-Ray). A value the user set is kept."""
    os.environ.setdefault(sinks.ENV_TELEMETRY_DIR, str((state_dir / TELEMETRY_DIR).resolve()))
    os.environ.setdefault(traces.ENV_SAMPLE_RATE, "1")
    os.environ[sinks.ENV_DEV_PROGRESS] = "0" if quiet else "1"


def reset_state(state_dir: Path) -> None:
    """Delete what `ezgh dev` keeps in `state_dir` (the image of its last stop, the journal
    and its snapshot, state.json, dev.env); other files there stay."""
    from ezgh_engine.local.image import IMAGE_NAME
    from ezgh_engine.local.persistence import JOURNAL_NAME, SNAPSHOT_NAME, STATE_NAME

    aws_dir = state_dir / "aws"
    for path in (aws_dir / IMAGE_NAME, aws_dir / SNAPSHOT_NAME, aws_dir / JOURNAL_NAME):
        path.unlink(missing_ok=True)  # the snapshot first: a journal alone is still whole
    for path in (state_dir / STATE_NAME, state_dir / "dev.env"):
        path.unlink(missing_ok=True)
    for name in (sinks.LINES_FILE, sinks.METRICS_FILE):
        (state_dir / TELEMETRY_DIR / name).unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    """Lock the state dir (one `ezgh dev` per state dir), start the runtime, print its
    environment, and wait for a signal to stop it."""
    # Until the runtime serves: the start imports and unpickles hundreds of thousands of
    # objects and makes almost no garbage, while the cyclic collector walked the young ones
    # every few hundred allocations (about a seventh of the start's CPU).
    gc.disable()
    from ezgh_engine.local import forkserver
    from ezgh_engine.local.state_lock import StateDirInUse, lock_state_dir

    state_dir = Path(args.state_dir)
    try:  # before anything reads or resets the state dir
        lock = lock_state_dir(state_dir, f"ezgh dev (pid {os.getpid()}, port {args.port})")
    except StateDirInUse as error:
        print(f"ezgh dev: could not start: {error}", flush=True)
        return 1
    if forkserver.isolated():
        # The execution environments' imports (a second of CPU) on the other core, while
        # this process imports the runtime and loads the state.
        forkserver.start()
    try:
        code = _serve(args, state_dir)
    finally:
        lock.release()
    _exit_now(code)


def _exit_now(code: int) -> NoReturn:
    """End the process without waiting for step bodies of the served apps still running.

    The interpreter would wait for them (`asyncio.to_thread` runs a step's function on an
    executor thread it joins at exit), so a Ctrl-C waited for the longest step, forever for
    a stuck one. The engine has stopped, so their ends could not be recorded any more: such
    a step runs again at the next start, as after a crash. What the engine keeps is on disk
    already (every journaled request was fsync'd before it was answered).
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _start_error(error: Exception, port: int) -> str:
    """What a failed start says: a port in use by name, anything else as it is."""
    if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
        return f"port {port} is in use (another ezgh dev?): choose another with --port"
    return str(error)


def _serve(args: argparse.Namespace, state_dir: Path) -> int:
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
        reset_state(state_dir)
    show_runs(state_dir, quiet=args.quiet)
    engine_clock = clock.SharedOffsetClock(args.clock_file) if args.clock_file else None
    runtime = LocalRuntime(
        port=args.port,
        state_dir=state_dir,
        apps=args.app,
        clock=engine_clock,
        echo=lambda s: print(s, flush=True),
        persist=True,
    )
    try:
        runtime.start()
        runtime.host_flows()
    except Exception as error:
        print(f"ezgh dev: could not start: {_start_error(error, args.port)}", flush=True)
        return 1
    finally:
        gc.enable()  # off since `run` began
    try:
        # (Powertools' resolver comes with it: not before the engine serves.)
        from ezgh_engine.api.routes_console import sign_in_link

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
        print("ezgh dev: stopped", flush=True)
    return 0
