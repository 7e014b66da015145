"""boto3 clients, made once per process and per thread-safe service.

Endpoints come from the standard `AWS_ENDPOINT_URL` variables, so the same code talks to AWS
in Lambda and to moto's server under `ezgh dev` and the tests.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

import boto3
import botocore.session
from botocore.config import Config

# --- retries: one decision for every client the engine makes ------------------------------
# botocore's `standard` mode (AWS's recommended mode, the same rules in every SDK): it retries
# throttles (`ThrottlingException`, `ProvisionedThroughputExceededException`,
# `RequestLimitExceeded`, `TooManyRequestsException`, `RequestThrottled`, `SlowDown`, any 429
# the model does not name), transient errors (500/502/503/504, timeouts, dropped
# connections) and errors the service model marks retryable, with truncated exponential
# backoff and full jitter: before retry i (0-based) it sleeps rand(0, 1) x min(b x 2^i, 20 s),
# b being 1 s after a throttle and 25-50 ms after another error, raised to an
# `x-amz-retry-after` the service asks for. A retry quota (500 tokens per client, 5 a
# throttle retry, 14 another, paid back by successes) stops retrying while a service keeps
# failing, so a process does not multiply an outage's load.
#
# Not `adaptive`: on top of `standard` it rate-limits the whole client (a token bucket that a
# throttle shrinks, which may also hold back first attempts). AWS's guide ("Retry behavior",
# AWS SDKs and Tools) calls it fit for clients pooled per throttled resource only, not for
# clients that serve several: a throttle of one resource then delays the others. The
# engine's DynamoDB client serves two tables and every key, and DynamoDB throttles per
# partition: one hot run item must not slow the rest of the environment.
#
# Attempts (the first one included) by what the caller does when they run out:
# - DynamoDB, SQS, S3 and the rest: 5, i.e. up to 1+2+4+8 = 15 s of throttle backoff
#   (7.5 s expected when every attempt is throttled, about 1 s at a 50 % throttle rate), so
#   a request still fits the API's 29 s; what fails after them is left to a redelivery
#   (docs/guarantees.md, "Throttles").
# - Lambda (`Invoke` of the invoker) and Scheduler (`CreateSchedule`, `DeleteSchedule`): 3,
#   up to 3 s: their callers on the stream have a way round a throttle that outlasts them
#   (`adapters.messages`: the invocations queue instead), so the shard does not wait.
DEFAULT_MAX_ATTEMPTS = 5
MAX_ATTEMPTS = {"lambda": 3, "scheduler": 3}
_TIMEOUTS = {"connect_timeout": 5, "read_timeout": 30}


# A client made with a longer `read_timeout` (a synchronous invoke of a function that may run
# that long) tries twice at most: a retry runs the function again.
LONG_CALL_MAX_ATTEMPTS = 2


def client_config(service: str, read_timeout: int | None = None) -> Config:
    """The engine's client configuration for `service` (retries as decided above)."""
    attempts = MAX_ATTEMPTS.get(service, DEFAULT_MAX_ATTEMPTS)
    timeouts = dict(_TIMEOUTS)
    if read_timeout is not None:
        attempts, timeouts["read_timeout"] = LONG_CALL_MAX_ATTEMPTS, read_timeout
    return Config(
        # `total_max_attempts` counts the first attempt; botocore's `max_attempts` key
        # counts retries only (5 there is 6 attempts), unlike the config file's setting.
        retries={"total_max_attempts": attempts, "mode": "standard"},
        max_pool_connections=50,
        account_id_endpoint_mode="disabled",
        **timeouts,
    )


# The error codes AWS answers a throttled request with (botocore's `standard` list, which it
# retries): what is still raised after the retries is a throttle, for the caller to leave to
# a redelivery or answer `rate_limited`.
THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "EC2ThrottledException",
    }
)
# A DynamoDB transaction refused for capacity is no throttle to botocore: it answers
# `TransactionCanceledException` (not retried), the reason per item `ThrottlingError` (an
# on-demand table or index scaling) or `ProvisionedThroughputExceeded`.
TRANSACTION_THROTTLE_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})


def is_throttle(error: BaseException) -> bool:
    """Whether `error` is an AWS answer that means "too many requests, try again later"
    (after botocore's retries), a transaction cancelled for capacity included."""
    return is_throttle_answer(getattr(error, "response", None))


def is_throttle_answer(response: Any) -> bool:
    """`is_throttle` of a parsed AWS answer (a `ClientError`'s `response`)."""
    if not isinstance(response, dict):
        return False
    code = str((response.get("Error") or {}).get("Code", ""))
    if code in THROTTLE_CODES:
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = {str(r.get("Code")) for r in response.get("CancellationReasons") or ()}
    if not reasons:  # some emulators only put the reasons in the message
        message = str((response.get("Error") or {}).get("Message", ""))
        reasons = {r.strip() for r in message.partition("[")[2].rpartition("]")[0].split(",")}
    return bool(reasons & TRANSACTION_THROTTLE_REASONS) and "ConditionalCheckFailed" not in reasons


def _retry_cancelled_for_capacity(
    response: Any = None, attempts: int = 0, **_: Any
) -> float | None:
    """botocore's `needs-retry` hook for `TransactWriteItems`: a transaction DynamoDB
    cancelled for capacity only (every reason a throttle or `None`: nothing was written) is
    retried as `standard` retries a throttle, with the same backoff and jitter and the same
    number of attempts. Anything else is botocore's to decide (None)."""
    if response is None or attempts >= DEFAULT_MAX_ATTEMPTS:
        return None
    parsed = response[1] if isinstance(response, tuple) and len(response) > 1 else None
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("Error") or {}
    if error.get("Code") != "TransactionCanceledException":
        return None
    if not is_throttle_answer(parsed):
        return None
    from ezgh_engine import ids

    return ids.random_fraction() * min(2.0 ** (attempts - 1), 20.0)


def _count_throttle(response: Any = None, **_: Any) -> None:
    """botocore's `needs-retry` hook, first of all: count each throttled answer (the
    `Throttles` metric, `observability`), whether or not it is retried. Decides nothing."""
    parsed = response[1] if isinstance(response, tuple) and len(response) > 1 else None
    if isinstance(parsed, dict) and parsed.get("Error") and is_throttle_answer(parsed):
        from ezgh_engine.observability import metrics, names

        metrics.add(names.THROTTLES, 1)
    return None


_lock = threading.Lock()
_clients: dict[tuple[str, int | None], Any] = {}  # made by `client`, until `reset_clients`
_sessions: list[boto3.session.Session] = []  # the one every client is made from
_loaders: list[Any] = []  # botocore's data loader of this process, kept by `reset_clients`


def client(service: str, read_timeout: int | None = None) -> Any:
    """A shared boto3 client (boto3 clients are thread-safe; sessions are not: clients are
    made under a lock, each once however many threads ask at once). With `read_timeout`,
    one that waits that long for an answer and retries once at most (a synchronous Lambda
    invoke whose function may run that long)."""
    made = _clients.get((service, read_timeout))
    if made is not None:
        return made
    with _lock:
        made = _clients.get((service, read_timeout))
        if made is None:
            made = _clients[(service, read_timeout)] = _make_client(service, read_timeout)
        return made


def _session() -> boto3.session.Session:
    """The session clients are made from (under `_lock`): one, because each new session
    loads botocore's endpoint rules and default configurations again (about 50 ms of CPU a
    client, a cold start's and `ezgh dev`'s start-up's). Dropped by `reset_clients`: it
    keeps the credentials it found. Not its data loader (`new_session`)."""
    if not _sessions:
        _sessions.append(new_session())
    return _sessions[0]


def new_session() -> boto3.session.Session:
    """A boto3 session on this process's botocore data loader: the first session's, kept
    with the service models, endpoint rules and partitions it read, so that a later session
    (new credentials or endpoint: the local runtime's execution environments at their first
    call, after `reset_clients`) makes a client in about 7 ms of CPU instead of 30."""
    with _loader_lock:
        core = botocore.session.Session()
        if _loaders:
            core.register_component("data_loader", _loaders[0])
        session = boto3.session.Session(botocore_session=core)
        paths = session._loader.search_paths  # boto3 adds its own at every session
        paths[:] = list(dict.fromkeys(paths))
        _loaders[:] = [session._loader]
    return session


_loader_lock = threading.Lock()


def load_models(services: Iterable[str]) -> None:
    """Read what a client of each of `services` needs (its model, endpoint rules, the
    partitions) into this process's data loader, with no credentials, region or endpoint
    of the environment's: a process that forks others (the local runtime's forkserver)
    does it once for all of them, before it knows the endpoint they will use."""
    with _lock:
        session = _session()
        for service in services:
            session.client(
                service,
                region_name="us-east-1",
                endpoint_url="http://127.0.0.1:9",  # never called
                aws_access_key_id="unused",
                aws_secret_access_key="unused",
                config=client_config(service),
            )


def _make_client(service: str, read_timeout: int | None) -> Any:
    config = client_config(service, read_timeout)
    made = _session().client(service, config=config)
    if service == "dynamodb":
        made.meta.events.register(
            "needs-retry.dynamodb.TransactWriteItems",
            _retry_cancelled_for_capacity,
            unique_id="ezgh-retry-cancelled-for-capacity",
        )
    # First: a retry handler that answers a delay ends the round of handlers.
    made.meta.events.register_first(
        "needs-retry", _count_throttle, unique_id="ezgh-count-throttles"
    )
    _made.append(made)
    if _observers:
        _attach(made)
    if _interceptors:
        _attach_interceptor(made)
    if _responders:
        _attach_responder(made)
    return made


def reset_clients() -> None:
    """Forget cached clients (after the endpoint or credentials change)."""
    with _lock:
        _clients.clear()
        _sessions.clear()
        _made.clear()
        _attached.clear()
        _intercepted.clear()
        _answered.clear()


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


# --- answers in AWS's place (fault injection, tests) --------------------------------------
# `respond(callback)` calls `callback(service, operation, request)` with each HTTP request the
# engine's clients are about to send (every attempt, retries included: botocore's
# `before-send`). An `AWSResponse` it answers is taken as the service's answer and the request
# is not sent: botocore parses it, and its retries apply as to a real answer (a throttle is
# retried with backoff, then raised). None: the request goes out. `throttled_answer` makes
# the answer AWS gives a throttled request. Nothing is registered while nobody responds.

Responder = Callable[[str, str, Any], Any]
_responders: list[Responder] = []
_answered: set[int] = set()


def respond(callback: Responder) -> Callable[[], None]:
    """Let `callback` answer requests of the engine's boto3 clients (before and after this
    call) in AWS's place; answer a function that stops it."""
    with _lock:
        _responders.append(callback)
        for made in _made:
            _attach_responder(made)

    def stop() -> None:
        with _lock:
            if callback in _responders:
                _responders.remove(callback)
            if not _responders:
                for made in _made:
                    if id(made) in _answered:
                        _answered.discard(id(made))
                        made.meta.events.unregister("before-send", unique_id="ezgh-respond")

    return stop


def _attach_responder(made: Any) -> None:
    if id(made) in _answered:
        return
    _answered.add(id(made))
    made.meta.events.register_first("before-send", _answer_request, unique_id="ezgh-respond")


# Where an answered request points: botocore still calls every `before-send` handler, and an
# in-process moto's (tests) would carry the request out; it leaves this host alone.
_ANSWERED_URL = "http://answered.invalid/"


def _answer_request(request: Any, event_name: str = "", **_: Any) -> Any:
    parts = event_name.split(".")  # before-send.<service id>.<operation>
    service, operation = (parts[1], parts[2]) if len(parts) >= 3 else ("", "")
    for callback in list(_responders):
        answer = callback(service, operation, request)
        if answer is not None:
            request.url = _ANSWERED_URL
            return answer
    return None


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


def throttled_answer(service: str, operation: str, request: Any = None, nth: int = 0) -> Any:
    """The answer AWS gives a throttled request of `service` (a botocore service ID:
    `dynamodb`, `sqs`, `lambda`, `scheduler`, `s3`), as its protocol carries it. A throttled
    `TransactWriteItems` answers either way DynamoDB does (`nth` alternates): the whole call
    throttled, or the transaction cancelled with a `ThrottlingError` reason per item."""
    from botocore.awsrequest import AWSResponse

    headers: dict[str, str] = {"x-amzn-RequestId": "ezgh-throttled"}
    status, body = 400, b""
    if service == "dynamodb":
        headers["Content-Type"] = "application/x-amz-json-1.0"
        shape = "com.amazonaws.dynamodb.v20120810#"
        if operation == "TransactWriteItems" and nth % 2:
            items = _transact_items(request)
            reason = {
                "Code": "ThrottlingError",
                "Message": "Throughput exceeds the current capacity",
            }
            error = {
                "__type": shape + "TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for specific "
                f"reasons [{', '.join(['ThrottlingError'] * items)}]",
                "CancellationReasons": [reason] * items,
            }
        else:
            code = ("ProvisionedThroughputExceededException", "ThrottlingException")[nth % 2]
            error = {
                "__type": shape + code,
                "message": "Rate of requests exceeds the allowed throughput.",
            }
        body = json.dumps(error).encode()
    elif service == "sqs":
        headers["Content-Type"] = "application/x-amz-json-1.0"
        headers["x-amzn-query-error"] = "RequestThrottled;Sender"
        body = json.dumps(
            {"__type": "com.amazonaws.sqs#RequestThrottled", "message": "Rate exceeded."}
        ).encode()
    elif service in ("lambda", "scheduler"):
        status = 429
        headers["Content-Type"] = "application/json"
        code = "TooManyRequestsException" if service == "lambda" else "ThrottlingException"
        headers["x-amzn-ErrorType"] = f"{code}:"
        body = json.dumps({"message": "Rate exceeded", "Type": "User"}).encode()
    elif service == "s3":
        status = 503
        headers["Content-Type"] = "application/xml"
        body = (
            b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>"
        )
    else:
        raise ValueError(f"no throttled answer for {service!r}")
    url = getattr(request, "url", "") or ""
    return AWSResponse(url, status, headers, _Body(body))


def _transact_items(request: Any) -> int:
    try:
        return max(1, len(json.loads(request.body or b"{}").get("TransactItems") or ()))
    except (ValueError, AttributeError, TypeError):
        return 1
