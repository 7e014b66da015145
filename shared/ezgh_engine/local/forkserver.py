"""The execution environments' forkserver: one fresh interpreter that imports the handlers
once, from which every environment is forked (`local.environments`).

Its imports are most of a start's work besides the engine's own (about a second of CPU:
Powertools, pydantic, boto3, the engine, botocore's models), and nothing in them depends on
the emulator: the server warms botocore's loader, not clients (`local._warm`), and each
environment applies the variables it is given (endpoint, credentials) when it starts. So
`ezgh dev` starts it first thing (`start`), and it imports on the other core while `ezgh
dev` imports, loads its state and provisions.

This module imports nothing heavy, so that its caller can start the server before it
imports anything else.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterable
from multiprocessing import forkserver
from typing import Any

from ezgh_engine.topology import TOPOLOGY

START_METHOD = "forkserver"
# `EZGH_LOCAL_ISOLATION=thread`: handlers run in the runtime's threads (to compare, bench/),
# with no environment and no forkserver.
ENV_ISOLATION = "EZGH_LOCAL_ISOLATION"
# The server's imports, first and last: the collector turned off (`_prefork`) and the
# environments' own module (a child runs its `serve`); botocore's models and the freeze of
# what the imports made (`_warm`). The handlers' modules in between.
FIRST = ("ezgh_engine.local._prefork", "ezgh_engine.local.environments")
LAST = "ezgh_engine.local._warm"

spawn_lock = threading.Lock()  # process creation (the server's, the environments'), one at a time
_context: Any = None
_preloaded: list[str] = []


def preload_list(handler_modules: Iterable[str] = ()) -> list[str]:
    """What the server imports: the default topology's handler modules and `handler_modules`."""
    defaults = {f.handler.partition(":")[0] for f in TOPOLOGY.functions}
    return [*FIRST, *sorted(defaults | set(handler_modules)), LAST]


def context(handler_modules: Iterable[str] = ()) -> Any:
    """The forkserver context, its server preloading `preload_list(handler_modules)`: a
    server started for another list is stopped (its children keep running), and the next
    environment starts a fresh one."""
    global _context
    modules = preload_list(handler_modules)
    with spawn_lock:
        if _context is None:
            _context = multiprocessing.get_context(START_METHOD)
        if _preloaded and _preloaded != modules:
            forkserver._forkserver._stop()  # type: ignore[attr-defined]
        _context.set_forkserver_preload(modules)
        _preloaded[:] = modules
    return _context


def start(handler_modules: Iterable[str] = ()) -> None:
    """Start the server now, if it is not running: it imports in the background while the
    caller goes on (the first environment waits for it)."""
    context(handler_modules)
    with spawn_lock:
        forkserver.ensure_running()


def isolated() -> bool:
    """Whether the handlers run in execution environments (the default) for this process."""
    return os.environ.get(ENV_ISOLATION) != "thread"
