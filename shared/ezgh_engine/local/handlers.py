"""Find the Lambda handlers named in the topology and call them as Lambda would."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.local import call_log, incarnation
from ezgh_engine.local.emulator import ACCOUNT_ID, REGION
from ezgh_engine.topology import TOPOLOGY, Function, Topology

log = logging.getLogger("ezgh.local.handlers")

Handler = Callable[[dict[str, Any], Any], Any]


class LambdaContext:
    """The parts of Lambda's context object that handlers and Powertools read."""

    def __init__(self, function: Function) -> None:
        self.function_name = f"ezgh-local-{function.key}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}"
        )
        self.memory_limit_in_mb = function.memory_mb
        self.aws_request_id = ids.new_id()
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = clock.monotonic() + function.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - clock.monotonic()) * 1000))


def import_handler(dotted: str) -> Handler:
    """Import `"package.module:function"` and return the function."""
    module_name, _, attr = dotted.partition(":")
    if not attr:
        raise ValueError(f"handler {dotted!r} is not of the form 'module:function'")
    module = importlib.import_module(module_name)
    handler = getattr(module, attr)
    if not callable(handler):
        raise TypeError(f"{dotted} is not callable")
    return handler


class Invoker:
    """Calls one function's handler with a fresh context per invocation, as Lambda does."""

    def __init__(self, function: Function, handler: Handler) -> None:
        self.function = function
        self.handler = handler
        self.life = incarnation.current()  # the engine's life it belongs to (restarts)

    def __call__(self, event: dict[str, Any]) -> Any:
        context = LambdaContext(self.function)
        started = clock.monotonic()
        try:
            # call_log: this thread's AWS requests are this function's (EZGH_AWS_CALL_LOG).
            with incarnation.marked(self.life), call_log.running(self.function.key):
                return self.handler(event, context)
        finally:
            elapsed = clock.monotonic() - started
            # Lambda would have killed it; threads cannot be killed, so say so loudly.
            if elapsed > self.function.timeout_seconds:
                log.warning(
                    "%s ran %.1fs, longer than its Lambda timeout of %ss",
                    self.function.key,
                    elapsed,
                    self.function.timeout_seconds,
                )


def resolve_all(
    overrides: Mapping[str, Handler] | None = None, topology: Topology = TOPOLOGY
) -> dict[str, Invoker]:
    """An `Invoker` per topology function; `overrides` (function key -> callable) win.

    Imported lazily, at start time, so the runtime module imports without the handlers.
    """
    overrides = overrides or {}
    invokers = {}
    for function in topology.functions:
        handler = overrides.get(function.key) or import_handler(function.handler)
        invokers[function.key] = Invoker(function, handler)
    return invokers
