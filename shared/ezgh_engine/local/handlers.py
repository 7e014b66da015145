"""Find the Lambda handlers named in the topology and call them as Lambda would."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ezgh_engine import clock, ids
from ezgh_engine.local import call_log, incarnation
from ezgh_engine.local.emulator import ACCOUNT_ID, REGION
from ezgh_engine.topology import TOPOLOGY, Function, Topology


class InvokerSource(Protocol):
    """Where a function's calls go instead of this thread (`local.environments.Environments`:
    its child processes), named here so this module does not import that one, which imports
    it."""

    def invoker(self, key: str) -> Callable[[dict[str, Any]], Any]: ...


log = logging.getLogger("ezgh.local.handlers")

Handler = Callable[[dict[str, Any], Any], Any]


class LambdaContext:
    """The parts of Lambda's context object that handlers and Powertools read."""

    def __init__(self, function: Function, deadline: float | None = None) -> None:
        self.function_name = f"ezgh-local-{function.key}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}"
        )
        self.memory_limit_in_mb = function.memory_mb
        self.aws_request_id = ids.new_id()
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        # Monotonic seconds (one clock for every process on the machine): the runtime sends
        # the deadline it enforces, so what the handler is told is what it gets.
        self._deadline = (
            deadline if deadline is not None else clock.monotonic() + function.timeout_seconds
        )

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
    """Calls one function's handler in the caller's thread, with a fresh context per call.

    Only for `handler_overrides` (plain callables of the runtime's own tests, which cannot
    be sent to another process): concurrent calls share the process, and a call past its
    timeout cannot be ended, only reported. Topology handlers run in execution environments
    (`local.environments`).
    """

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
    overrides: Mapping[str, Handler] | None = None,
    topology: Topology = TOPOLOGY,
    environments: InvokerSource | None = None,
) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """A callable per topology function: `overrides` (function key -> callable) in-thread,
    the others in `environments` (child processes) or, without it, imported here and called
    in-thread.

    Imported lazily, at start time, so the runtime module imports without the handlers.
    """
    overrides = overrides or {}
    invokers: dict[str, Callable[[dict[str, Any]], Any]] = {}
    for function in topology.functions:
        override = overrides.get(function.key)
        if override is not None:
            invokers[function.key] = Invoker(function, override)
        elif environments is not None:
            invokers[function.key] = environments.invoker(function.key)
        else:
            invokers[function.key] = Invoker(function, import_handler(function.handler))
    return invokers
