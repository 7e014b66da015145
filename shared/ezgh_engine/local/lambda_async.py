"""Lambda's asynchronous invocation, locally: `Invoke` with `InvocationType=Event`.

On AWS the stream starts the invoker with an asynchronous invoke, and Scheduler's timers
invoke it the same way; Lambda keeps each event in a queue of its own, runs it in one of the
function's execution environments, retries a failed run (the handler raised, its
environment died, it ran past its timeout) twice, a minute and then two minutes later, and
sends an event it gives up on (or one older than its maximum age) to the on-failure
destination as an invocation record. The topology says which functions are invoked so
(`topology.AsyncInvoke`).

Here the same, in three parts (and, for the functions called synchronously, `Invoke` with
`InvocationType=RequestResponse` runs the handler at once and answers its result):

- `AsyncInvokes` serves Lambda's `Invoke` API on a loopback port (the handlers' and the local
  Scheduler's `lambda` clients reach it through `AWS_ENDPOINT_URL_LAMBDA`): an `Event`
  invocation of a known function is answered 202 once its event is in the function's queue.
- That queue is an SQS queue in the emulator (`<prefix>-lambda-async-<key>`), so events are
  durable as the emulator's state is (`ezgh dev`'s journal), and a test skipping the engine
  clock skips the retries' waits too (`emulator.sqs_on_engine_clock`).
- `AsyncInvokePoller` takes one event at a time per environment (at most the function's
  `local_concurrency` at once) and calls the function's handler with the event itself. Fault
  injection plays what Lambda's queue may do: deliver an event twice, or late (`sqs_duplicate`,
  `sqs_late`, as for a queue).

Its own requests (the queue's send, receive, delete) are emulation: on AWS Lambda's queue is
not billed, the invocation is.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ezgh_engine import clock, ids
from ezgh_engine.adapters import aws
from ezgh_engine.local._http import BaseHandler, Server
from ezgh_engine.local.account import ACCOUNT_ID, NAME_PREFIX, REGION
from ezgh_engine.local.emulator_gate import same, signed_by
from ezgh_engine.local.environments import EnvironmentDied
from ezgh_engine.local.handlers import LambdaContext
from ezgh_engine.local.pollers import Activity, Invoke, SqsPoller
from ezgh_engine.topology import AsyncInvoke, Function, Topology

log = logging.getLogger("ezgh.local.lambda_async")

ENDPOINT_ENV = "AWS_ENDPOINT_URL_LAMBDA"  # botocore's endpoint variable for Lambda
QUEUE_INFIX = "-lambda-async-"
# Lambda's waits before the first and the second retry of a failed invocation.
RETRY_WAITS_SECONDS = (60, 120)
_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")
_ENQUEUED_AT = "ezghEnqueuedAtMs"  # engine time the event was accepted (its age)


def queue_name(function: Function) -> str:
    return f"{NAME_PREFIX}{QUEUE_INFIX}{function.key}"


def function_arn(function: Function) -> str:
    """The ARN the local runtime gives `function` (as its Lambda context says)."""
    return LambdaContext(function).invoked_function_arn


class AsyncInvokes:
    """Lambda's `Invoke` API for the topology's asynchronously invoked functions, and their
    event queues. `serve()`, then `provision()` after every emulator reset, `pollers()`
    whenever the runtime makes its pollers, `shutdown()`."""

    def __init__(self, topology: Topology) -> None:
        self.functions = [f for f in topology.functions if f.async_invoke is not None]
        # Functions called synchronously (`RequestResponse`, `topology.SyncInvoke`): the
        # call runs the function's handler at once and answers its result.
        self.sync_functions = [f for f in topology.functions if f.sync_invoke is not None]
        self._sync_invokers: Mapping[str, Invoke] = {}
        self._by_name: dict[str, Function] = {}
        for function in [*self.functions, *self.sync_functions]:
            context = LambdaContext(function)
            self._by_name[context.function_name] = function
            self._by_name[context.invoked_function_arn] = function
        self.queue_urls: dict[str, str] = {}  # function key -> its event queue
        self.on_failure_urls: dict[str, str] = {}  # function key -> its on-failure queue
        self._server: Server | None = None
        self.url = ""
        self.accepted = 0

    def serve(self) -> str:
        """Start answering `Invoke` on a free loopback port; return its URL."""
        if self._server is None:
            server = Server(("127.0.0.1", 0), _handler_class(self))
            threading.Thread(target=server.serve_forever, name="lambda-api", daemon=True).start()
            self._server = server
            self.url = f"http://127.0.0.1:{server.server_address[1]}"
        return self.url

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def provision(self, queue_urls: Mapping[str, str]) -> dict[str, str]:
        """Create each function's event queue (kept if restored); answer the handlers'
        environment: the endpoint and each function's ARN. `queue_urls`: the topology's."""
        sqs = aws.client("sqs")
        for function in self.functions:
            # Longer than the function's timeout: an event is not run twice at once.
            visibility = str(function.timeout_seconds + 60)
            self.queue_urls[function.key] = sqs.create_queue(
                QueueName=queue_name(function), Attributes={"VisibilityTimeout": visibility}
            )["QueueUrl"]
        return self._environment(queue_urls)

    def adopt(
        self, event_queue_urls: Mapping[str, str], queue_urls: Mapping[str, str]
    ) -> dict[str, str] | None:
        """As `provision`, for event queues that exist already: `event_queue_urls` are those
        an earlier `provision` made, kept with the state (`resources.adopt`); None if they
        are not this topology's."""
        if set(event_queue_urls) != {f.key for f in self.functions}:
            return None
        self.queue_urls = dict(event_queue_urls)
        return self._environment(queue_urls)

    def _environment(self, queue_urls: Mapping[str, str]) -> dict[str, str]:
        env = {ENDPOINT_ENV: self.url} if self.url else {}
        for function in self.functions:
            spec = _spec(function)
            self.on_failure_urls[function.key] = queue_urls[spec.on_failure]
            env[spec.env_var] = function_arn(function)
        for function in self.sync_functions:
            assert function.sync_invoke is not None
            env[function.sync_invoke.env_var] = function_arn(function)
        return env

    def pollers(
        self, invokers: Mapping[str, Invoke], activity: Activity
    ) -> list[AsyncInvokePoller]:
        """A poller per function, calling its handler (`invokers[key]`) with each event
        (the synchronous calls go to `invokers` too)."""
        self._sync_invokers = invokers
        return [
            AsyncInvokePoller(
                function=function,
                queue_url=self.queue_urls[function.key],
                on_failure_url=self.on_failure_urls[function.key],
                invoke=invokers[function.key],
                activity=activity,
            )
            for function in self.functions
        ]

    def accept(self, name: str, payload: bytes) -> tuple[int, dict[str, Any] | None]:
        """An `Event` invocation of `name` (a name or an ARN): (HTTP status, error body)."""
        function = self._by_name.get(name.split(":$LATEST")[0])
        if function is None or function.key not in self.queue_urls:
            return 404, _error("ResourceNotFoundException", f"Function not found: {name}")
        try:
            json.loads(payload or b"{}")
        except ValueError:
            return 400, _error("InvalidRequestContentException", "Could not parse request body")
        aws.client("sqs").send_message(
            QueueUrl=self.queue_urls[function.key],
            MessageBody=(payload or b"{}").decode(),
            MessageAttributes={
                _ENQUEUED_AT: {"DataType": "Number", "StringValue": str(clock.now_ms())}
            },
        )
        self.accepted += 1
        return 202, None

    def calls_synchronously(self, name: str) -> bool:
        """Whether `name` is a function the topology calls synchronously."""
        function = self._by_name.get(name.split(":$LATEST")[0])
        return function is not None and function.sync_invoke is not None

    def call(self, name: str, payload: bytes) -> tuple[int, bytes, dict[str, str]]:
        """A `RequestResponse` invocation of `name`: (HTTP status, body, extra headers),
        the handler's result as Lambda answers it (an error as `X-Amz-Function-Error`)."""
        function = self._by_name.get(name.split(":$LATEST")[0])
        invoke = self._sync_invokers.get(function.key) if function else None
        if function is None or function.sync_invoke is None or invoke is None:
            error = _error("ResourceNotFoundException", f"Function not found: {name}")
            return 404, json.dumps(error).encode(), {"x-amzn-ErrorType": error["__type"]}
        try:
            event = json.loads(payload or b"{}")
        except ValueError:
            error = _error("InvalidRequestContentException", "Could not parse request body")
            return 400, json.dumps(error).encode(), {"x-amzn-ErrorType": error["__type"]}
        try:
            result = invoke(event)
        except Exception as exc:  # the handler raised, timed out or its environment died
            failure = {"errorType": type(exc).__name__, "errorMessage": str(exc)[:2000]}
            return 200, json.dumps(failure).encode(), {"X-Amz-Function-Error": "Unhandled"}
        return 200, json.dumps(result).encode(), {}


def _spec(function: Function) -> AsyncInvoke:
    assert function.async_invoke is not None
    return function.async_invoke


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"__type": kind, "Type": "User", "message": message}


def _handler_class(invokes: AsyncInvokes) -> type[BaseHandler]:
    class _Handler(BaseHandler):
        """Lambda's `Invoke`, for the engine alone: signed with the emulator's credentials
        (`local.emulator_gate`); a malformed request is refused by `BaseHandler`."""

        def serve(self, body: bytes) -> None:
            signer = signed_by(self.headers.get("Authorization"))
            if signer is None or not same(signer[0], os.environ.get("AWS_ACCESS_KEY_ID", "")):
                message = "The security token included in the request is invalid."
                self._answer(403, _error("UnrecognizedClientException", message))
                return
            match = _PATH.match(urllib.parse.urlsplit(self.path).path)
            if match is None or self.command != "POST":
                self._answer(404, _error("UnknownOperationException", "unknown operation"))
                return
            kind = self.headers.get("X-Amz-Invocation-Type") or "RequestResponse"
            name = urllib.parse.unquote(match.group("name"))
            if kind == "RequestResponse" and invokes.calls_synchronously(name):
                self._raw(*invokes.call(name, body))
                return
            if kind != "Event":
                message = f"the local runtime invokes this function asynchronously only, not {kind}"
                self._answer(400, _error("InvalidParameterValueException", message))
                return
            try:
                status, error = invokes.accept(name, body)
            except Exception as exc:  # the emulator was reset or stopped: Lambda's 5xx
                log.warning("lambda api: could not queue an event for %s: %s", name, exc)
                status, error = 500, _error("ServiceException", str(exc))
            self._answer(status, error)

        def _raw(self, status: int, data: bytes, headers: dict[str, str]) -> None:
            pairs = [("x-amzn-RequestId", ids.new_id()), ("Content-Type", "application/json")]
            self.answer(status, pairs + list(headers.items()), data)

        def _answer(self, status: int, error: dict[str, Any] | None) -> None:
            data = json.dumps(error).encode() if error else b""
            headers = [("x-amzn-RequestId", ids.new_id())]
            if error:
                headers += [
                    ("x-amzn-ErrorType", str(error["__type"])),
                    ("Content-Type", "application/json"),
                ]
            self.answer(status, headers, data)

    return _Handler


class AsyncInvokePoller(SqsPoller):
    """Runs one function's asynchronous events from its queue, as Lambda's event queue does:
    the event itself is the handler's event; an error is retried after `RETRY_WAITS_SECONDS`
    up to the function's `retry_attempts`, then (or once the event is older than its maximum
    age) it goes to the on-failure queue as an invocation record."""

    def __init__(
        self,
        *,
        function: Function,
        queue_url: str,
        on_failure_url: str,
        invoke: Invoke,
        activity: Activity,
    ) -> None:
        name = f"async:{function.key}"  # not `sqs:`: the bench bills none of its requests
        super().__init__(
            name=name,
            queue_url=queue_url,
            queue_arn="",
            invoke=invoke,
            activity=activity,
            batch_size=1,
            max_concurrency=function.local_concurrency,
        )
        self.function = function
        self.spec = _spec(function)
        self.on_failure_url = on_failure_url
        self.failed = 0  # invocations that raised (tests)
        self.given_up = 0  # events sent to the on-failure queue (tests)

    @property
    def idle(self) -> bool:
        """No event waiting to run now (one waiting for its retry is a delayed message: the
        fault harness skips the clock to it, `emulator.sqs_next_due_ms`)."""
        visible = _visible_in_moto(self.queue_url)
        if visible is not None:
            return visible == 0
        try:
            attributes = aws.client("sqs").get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
        except Exception:  # a reset in progress: the runtime waits for it anyway
            return True
        return int(attributes.get("ApproximateNumberOfMessages", 0)) == 0

    def _run_marked(self, messages: list[dict[str, Any]], tracker: Any) -> None:
        try:
            if self.faults is not None:  # some delivered late: they come back later
                messages = self.faults.sqs_received(self.queue_url, messages)
            for message in messages:
                self._deliver(message)
        finally:
            tracker.__exit__(None, None, None)
            self._slots.release()

    def _deliver(self, message: dict[str, Any]) -> None:
        attempt = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        event = json.loads(message.get("Body") or "{}")
        if not isinstance(event, dict) or not event:
            self._drop(message)  # `interrupt()`'s wake-up before a reset, or nothing
            return
        if self._age_ms(message) > self.spec.max_event_age_seconds * 1000:
            self._give_up(message, event, "EventAgeExceeded", attempt - 1, None)
            return
        try:
            self.invoke(event)
        except Exception as exc:
            if self._stop.is_set() and isinstance(exc, EnvironmentDied):
                # The stop killed its environment mid-call: the next start delivers it again.
                log.info("%s: an event was cut off by the stop; it will be retried", self.name)
                return
            self.failed += 1
            if attempt > self.spec.retry_attempts:
                log.warning("%s: attempt %d failed; giving the event up", self.name, attempt)
                self._give_up(message, event, "RetriesExhausted", attempt, exc)
                return
            wait = RETRY_WAITS_SECONDS[min(attempt, len(RETRY_WAITS_SECONDS)) - 1]
            log.warning("%s: attempt %d failed (%s); again in %d s", self.name, attempt, exc, wait)
            aws.client("sqs").change_message_visibility(
                QueueUrl=self.queue_url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=wait,
            )
            return
        done = [message]
        if self.faults is not None:  # delivered again (at once, or late): not deleted
            done = self.faults.sqs_handled(self.queue_url, done)
        if done:
            self._drop(message)

    @staticmethod
    def _age_ms(message: dict[str, Any]) -> int:
        attribute = message.get("MessageAttributes", {}).get(_ENQUEUED_AT, {})
        try:
            return clock.now_ms() - int(attribute.get("StringValue", ""))
        except ValueError:
            return 0

    def _give_up(
        self,
        message: dict[str, Any],
        event: dict[str, Any],
        condition: str,
        attempts: int,
        error: Exception | None,
    ) -> None:
        """Send Lambda's invocation record to the on-failure queue, then drop the event."""
        record = invocation_record(self.function, message, event, condition, attempts, error)
        aws.client("sqs").send_message(QueueUrl=self.on_failure_url, MessageBody=json.dumps(record))
        self.given_up += 1
        self._drop(message)

    def _drop(self, message: dict[str, Any]) -> None:
        aws.client("sqs").delete_message(
            QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
        )


def _visible_in_moto(queue_url: str) -> int | None:
    """The visible messages of a queue of this process's moto (`idle` is asked every few
    milliseconds while the runtime or a test waits: no request for it), or None if moto's
    internals are not at hand."""
    try:
        from moto.sqs.models import sqs_backends

        queue = sqs_backends[ACCOUNT_ID][REGION].queues.get(queue_url.rsplit("/", 1)[-1])
        if queue is None:
            return None
        return int(queue.approximate_number_of_messages)
    except Exception:
        return None


def invocation_record(
    function: Function,
    message: Mapping[str, Any],
    event: dict[str, Any],
    condition: str,
    attempts: int,
    error: Exception | None,
) -> dict[str, Any]:
    """The record Lambda sends an asynchronous invocation's on-failure destination."""
    failed = error is not None
    return {
        "version": "1.0",
        "timestamp": clock.iso(clock.now()),
        "requestContext": {
            "requestId": str(message.get("MessageId", "")),
            "functionArn": f"{function_arn(function)}:$LATEST",
            "condition": condition,
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": {
            "statusCode": 200 if failed else 0,
            "executedVersion": "$LATEST",
            **({"functionError": "Unhandled"} if failed else {}),
        },
        "responsePayload": (
            {"errorMessage": str(error)[:1000], "errorType": type(error).__name__}
            if failed
            else None
        ),
    }
