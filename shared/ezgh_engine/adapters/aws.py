"""boto3 clients, made once per process and per thread-safe service.

Endpoints come from the standard `AWS_ENDPOINT_URL` variables, so the same code talks to AWS
in Lambda and to moto's server under `ezgh dev` and the tests.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "adaptive"},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=50,
    account_id_endpoint_mode="disabled",
)
_lock = threading.Lock()


@cache
def client(service: str, read_timeout: int | None = None) -> Any:
    """A shared boto3 client (boto3 clients are thread-safe; sessions are not). With
    `read_timeout`, one that waits that long for an answer and retries once at most (a
    synchronous Lambda invoke whose function may run that long)."""
    config = _CONFIG
    if read_timeout is not None:
        longer = Config(read_timeout=read_timeout, retries={"max_attempts": 2, "mode": "standard"})
        config = _CONFIG.merge(longer)
    with _lock:
        made = boto3.session.Session().client(service, config=config)
        _made.append(made)
        if _observers:
            _attach(made)
        if _interceptors:
            _attach_interceptor(made)
        return made


def reset_clients() -> None:
    """Forget cached clients (after the endpoint or credentials change)."""
    client.cache_clear()
    with _lock:
        _made.clear()
        _attached.clear()
        _intercepted.clear()


# --- request observers (bench/, diagnostics) ---------------------------------------------
# `observe(callback)` reports every request the engine's clients make, once each, after it
# answered: `callback(record)` with `service`, `operation`, `params` (the API parameters),
# `request_bytes`, `response_bytes`, `status`, `parsed` (the parsed answer) and `seconds`.
# Nothing is registered on any client while nobody observes: zero cost by default.

Observer = Callable[[dict[str, Any]], None]
_observers: list[Observer] = []
_made: list[Any] = []  # clients made by `client()` since the last reset
_attached: set[int] = set()
_CONTEXT_KEY = "ezgh_observed"


def observe(callback: Observer) -> Callable[[], None]:
    """Report every request of the engine's boto3 clients to `callback`; answer a function
    that stops it. Applies to clients made before and after this call."""
    with _lock:
        _observers.append(callback)
        for made in _made:
            _attach(made)

    def stop() -> None:
        with _lock:
            if callback in _observers:
                _observers.remove(callback)
            if not _observers:
                for made in _made:
                    _detach(made)

    return stop


def observing() -> bool:
    """Whether anyone observes requests (the local runtime then collects its execution
    environments' requests, made in other processes, and `report`s them here)."""
    return bool(_observers)


def report(record: dict[str, Any]) -> None:
    """Hand `record` (a request made elsewhere, as `observe` describes it) to the observers."""
    for callback in list(_observers):
        with contextlib.suppress(Exception):  # an observer never breaks the engine
            callback(record)


def _attach(made: Any) -> None:
    if id(made) in _attached:
        return
    _attached.add(id(made))
    events = made.meta.events
    events.register("before-parameter-build", _before_build, unique_id="ezgh-observe-build")
    events.register("before-call", _before_call, unique_id="ezgh-observe-call")
    events.register("after-call", _after_call, unique_id="ezgh-observe-after")


def _detach(made: Any) -> None:
    if id(made) not in _attached:
        return
    _attached.discard(id(made))
    events = made.meta.events
    events.unregister("before-parameter-build", unique_id="ezgh-observe-build")
    events.unregister("before-call", unique_id="ezgh-observe-call")
    events.unregister("after-call", unique_id="ezgh-observe-after")


def _body_size(body: Any) -> int:
    if body is None:
        return 0
    if isinstance(body, (bytes, bytearray, str)):
        return len(body)
    if isinstance(body, dict):  # query protocol before encoding
        return sum(len(str(k)) + len(str(v)) + 2 for k, v in body.items())
    for attribute in ("len", "__len__"):
        size = getattr(body, attribute, None)
        if isinstance(size, int):
            return size
        if callable(size):
            try:
                return int(size())
            except Exception:
                return 0
    return 0


def _before_build(params: Any, context: Any = None, **_: Any) -> None:
    if isinstance(context, dict):
        context[_CONTEXT_KEY] = {"params": dict(params or {})}


def _before_call(params: Any, context: Any = None, **_: Any) -> None:
    if isinstance(context, dict):
        from ezgh_engine import clock

        seen = context.setdefault(_CONTEXT_KEY, {})
        seen["request_bytes"] = _body_size((params or {}).get("body"))
        seen["started"] = clock.monotonic()


def _after_call(http_response: Any, parsed: Any, model: Any, context: Any = None, **_: Any) -> None:
    from ezgh_engine import clock

    seen = context.get(_CONTEXT_KEY, {}) if isinstance(context, dict) else {}
    headers = getattr(http_response, "headers", {}) or {}
    if getattr(model, "has_streaming_output", False):
        # A streamed body (S3 GetObject) is the caller's to read: `.content` would consume
        # it and leave the caller an empty stream. Its declared length instead.
        response_bytes = int(headers.get("content-length", 0) or 0)
    else:
        try:
            response_bytes = len(http_response.content or b"")
        except Exception:
            response_bytes = int(headers.get("content-length", 0) or 0)
    record = {
        "service": model.service_model.service_name,
        "operation": model.name,
        "params": seen.get("params", {}),
        "request_bytes": seen.get("request_bytes", 0),
        "response_bytes": response_bytes,
        "status": getattr(http_response, "status_code", 0),
        "parsed": parsed,
        "seconds": clock.monotonic() - seen.get("started", clock.monotonic()),
    }
    for callback in list(_observers):
        with contextlib.suppress(Exception):  # an observer never breaks the engine
            callback(record)


# --- request interceptors (fault injection, tests) ----------------------------------------
# `intercept(callback)` calls `callback(service, operation, params)` (the API parameters)
# before every request the engine's clients build; whatever it raises (a botocore `ClientError` for a throttle) is what
# the engine's call raises, and the request is not sent. botocore's own retries do not apply
# (they wrap the send, which never happens): an interceptor models a call that failed after
# them. As with `observe`, nothing is registered while nobody intercepts.

Interceptor = Callable[[str, str, dict[str, Any]], None]
_interceptors: list[Interceptor] = []
_intercepted: set[int] = set()


def intercept(callback: Interceptor) -> Callable[[], None]:
    """Call `callback` before every request of the engine's boto3 clients (before and after
    this call); answer a function that stops it."""
    with _lock:
        _interceptors.append(callback)
        for made in _made:
            _attach_interceptor(made)

    def stop() -> None:
        with _lock:
            if callback in _interceptors:
                _interceptors.remove(callback)
            if not _interceptors:
                for made in _made:
                    if id(made) in _intercepted:
                        _intercepted.discard(id(made))
                        made.meta.events.unregister(
                            "before-parameter-build", unique_id="ezgh-intercept-call"
                        )

    return stop


def _attach_interceptor(made: Any) -> None:
    if id(made) in _intercepted:
        return
    _intercepted.add(id(made))
    made.meta.events.register(
        "before-parameter-build", _intercept_call, unique_id="ezgh-intercept-call"
    )


def _intercept_call(model: Any, params: Any, **_: Any) -> None:
    service = model.service_model.service_name
    for callback in list(_interceptors):
        callback(service, model.name, params if isinstance(params, dict) else {})
