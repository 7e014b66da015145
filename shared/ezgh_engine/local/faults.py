"""Seeded fault injection for the local runtime (to prove that nothing is lost).

A `FaultPlan` is a seed and one probability per fault. Given to a `LocalRuntime`
(`runtime.set_faults(plan)`), it plays what AWS and a user's app may do to the engine:

| fault | where | what the engine sees |
| --- | --- | --- |
| `sqs_duplicate` | every SQS poller | a handled message is not deleted: delivered again (same MessageId), at once or `late_seconds` later |
| `sqs_late` | every SQS poller | a received message is not handled: it comes back after `late_seconds` |
| `stream_duplicate` | stream pollers | a handled batch is handed to the handler again at once |
| `stream_late` | stream pollers | ... and again `late_seconds` later, after newer records (stale images) |
| `timer_duplicate` | scheduler | a due schedule fires twice |
| `timer_late` | scheduler | a due schedule fires `late_seconds` late |
| `throttle` | boto3 (`adapters.aws.intercept`) | a DynamoDB call fails with `ProvisionedThroughputExceededException` / `ThrottlingException` after botocore's retries: the handler fails, and its message comes back as SQS or the stream mapping redelivers it |
| `throttle_burst` | boto3's HTTP seam (`adapters.aws.respond`), the functions' own processes | a burst: for a while (`BURST_SLOT_SECONDS` of engine time, counted from the plan's install, `burst_origin`), 20-50 % of one service's requests (DynamoDB, Lambda, Scheduler or SQS) are answered as AWS answers a throttled request (`aws.throttled_answer`); botocore retries them with its backoff, and what still fails after its attempts reaches the engine (a step call: 503, which the SDK resends, then answers its invocation `throttled`) |
| `idem_claim_fail` | boto3, the functions' own processes | the put that claims an Idempotency-Key is throttled: the request answers 429 before it runs |
| `idem_answer_fail` | boto3, the functions' own processes | every write of one Idempotency-Key's answer is throttled, after the request's effect (SQS took the messages, the run was written): the caller gets its answer, the claim stays unfinished |
| `idem_crash` | boto3, the functions' own processes | the function's process dies at the answer's first write, after the effect: no answer (the HTTP bridge answers 500, as API Gateway a 502), the claim stays unfinished until it is stale (60 s) |
| `app_error` | `FaultyApp` | the push app answers 500 |
| `app_hang` | `FaultyApp` | the push app hangs past the invoke timeout, then runs the invocation anyway (a main invocation: a branch's would fail its step by rule) |
| `app_drop` | `FaultyApp` | the push app closes the connection without running the invocation |
| `app_lost_answer` | `FaultyApp` | the push app runs the invocation, then closes the connection: its answer is lost |
| `kill` | `FaultyApp`'s step transport | a `run` step's body ran, then the app died: the call that records it never reaches the engine and the invocation's answer is lost |

Delays are in engine time (`ezgh_engine.clock`): a test with a `SkipClock` skips them
(together with `emulator.sqs_on_engine_clock()`, which makes moto's SQS timers follow it).

**Reproducible.** Except for the Idempotency-Key faults (keyed by the claim's random token,
see `_maybe_fail_idempotency`), a decision is a pure function of the seed, the fault, the event (an SQS
body, a stream batch's sequence numbers, a schedule, a DynamoDB operation, an invocation's
run, epoch, attempt and step, `invocation_key`, never its token, whose signature and expiry
differ on every run) with known IDs replaced by their labels (`alias()`), and how many times
that event was seen: the same seed gives the same faults to the same events. Bursts are a
function of the seed and the engine time since the plan was installed (not the wall clock's
slots). Threads may still order events differently from one run to the next, and how much
engine time a burst covers follows how fast the machine runs.

Off by default: pollers carry `faults = None` and the runtime registers no hook.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import botocore.endpoint
from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.local.asgi import DropConnection

log = logging.getLogger("ezgh.local.faults")

KINDS = (
    "sqs_duplicate",
    "sqs_late",
    "stream_duplicate",
    "stream_late",
    "timer_duplicate",
    "timer_late",
    "throttle",
    "throttle_burst",
    "idem_claim_fail",
    "idem_answer_fail",
    "idem_crash",
    "app_error",
    "app_hang",
    "app_drop",
    "app_lost_answer",
    "kill",
)
# The faults a function's own process plays (its boto3 calls): sent to each execution
# environment with every call (`local.environments`).
CHILD_KINDS = ("throttle", "throttle_burst", "idem_claim_fail", "idem_answer_fail", "idem_crash")
# Throttle bursts: engine time is cut in slots of this many seconds; `throttle_burst` is the
# chance that a slot is a burst, in which one service (drawn per slot) has this share of its
# requests throttled (drawn per slot in the range). A pure function of the seed and the
# engine time, so every process (they share the engine clock) sees the same bursts.
BURST_SLOT_SECONDS = 20.0
BURST_RATES = (0.2, 0.5)
BURST_SERVICES = ("dynamodb", "lambda", "scheduler", "sqs")
# Idempotency-Key records whose operations the idempotency faults strike: the ones whose
# effects a resend after a crash must find again (runs started, messages sent). Creates of
# named resources (apps, queues, subscriptions) are left out: see docs/guarantees.md.
# How a function's process ends for `idem_crash` (the runtime counts the fault by it).
CRASH_EXIT_CODE = 70
IDEM_OPERATIONS = ("POST /runs#", "/messages#")
_THROTTLES = ("ProvisionedThroughputExceededException", "ThrottlingException")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class FaultPlan:
    """A seed and the probability of each fault (0: never). See the module's doc."""

    seed: int = 0
    sqs_duplicate: float = 0.0
    sqs_late: float = 0.0
    stream_duplicate: float = 0.0
    stream_late: float = 0.0
    timer_duplicate: float = 0.0
    timer_late: float = 0.0
    throttle: float = 0.0
    throttle_burst: float = 0.0
    idem_claim_fail: float = 0.0
    idem_answer_fail: float = 0.0
    idem_crash: float = 0.0
    app_error: float = 0.0
    app_hang: float = 0.0
    app_drop: float = 0.0
    app_lost_answer: float = 0.0
    kill: float = 0.0
    late_seconds: float = 45.0  # engine seconds
    # The functions' AWS clients wait this share of botocore's retry backoff (a campaign that
    # shortens the invoke timeout from 300 s to 6 s scales the backoff the same, 0.02, or a
    # step whose end a throttle holds for seconds overruns a limit no deployment has).
    backoff_scale: float = 1.0
    hang_seconds: float = 3.0  # real seconds; set above the engine's invoke timeout
    # Engine time (epoch seconds) at which burst slots start counting: when the plan was
    # installed, so the same seed draws the same bursts at the same moments of a campaign,
    # whatever the wall clock (slots of absolute time drew others on every run). Sent to
    # the functions' processes with the plan.
    burst_origin: float | None = None
    injected: Counter[str] = field(default_factory=Counter, init=False, repr=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._labels: dict[str, str] = {}
        self._active = True
        self._stream_later: list[tuple[datetime, str, list[dict[str, Any]]]] = []
        self._timer_due: dict[Any, datetime] = {}
        self._killed: set[str] = set()  # invocation tokens whose app "died"
        # (run ID, step ID) -> how many of the step's ends an app death lost: each lets the
        # step run once more (at least once), which a check of "ran once" must allow.
        self.lost_ends: Counter[tuple[str, str]] = Counter()
        self._stop_throttle: Callable[[], None] | None = None
        self._stop_bursts: Callable[[], None] | None = None
        self._backoff_saved: Any = None
        self._failing_answers: set[str] = set()  # claim tokens whose answer never stores
        # True in a function's execution environment: `idem_crash` ends the process there.
        self.may_exit = False

    # --- decisions ------------------------------------------------------------------------

    @classmethod
    def everything(cls, seed: int, p: float = 0.05, **overrides: Any) -> FaultPlan:
        """Every fault at probability `p` (overrides win)."""
        return cls(seed=seed, **{**{kind: p for kind in KINDS}, **overrides})

    def alias(self, raw: str, label: str) -> None:
        """Write `label` for `raw` (a run ID) in event keys, so decisions do not depend on
        IDs minted at random."""
        with self._lock:
            self._labels[raw] = label

    def label(self, text: str) -> str:
        return _UUID.sub(lambda m: self._labels.get(m.group(0), "?"), text)

    def decide(self, kind: str, key: str, probability: float | None = None) -> bool:
        """Whether `kind` strikes this occurrence of event `key` (and count it if so), with
        `kind`'s probability or `probability`."""
        if probability is None:
            probability = float(getattr(self, kind))
        if probability <= 0 or not self._active:
            return False
        event = f"{kind}|{self.label(key)}"
        with self._lock:
            self._seen[event] += 1
            nth = self._seen[event]
        digest = hashlib.sha256(f"{self.seed}|{event}|{nth}".encode()).digest()
        strikes = int.from_bytes(digest[:8], "big") / 2**64 < probability
        if strikes:
            with self._lock:
                self.injected[kind] += 1
            log.debug("fault %s on %s (#%d)", kind, key[:120], nth)
        return strikes

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No fault strikes inside the block (a test reading the state it checks)."""
        previous, self._active = self._active, False
        try:
            yield
        finally:
            self._active = previous

    def report(self) -> dict[str, int]:
        """Faults injected so far, by kind (every kind, zeros included), and the throttled
        answers of bursts by service (`throttle_burst:<service>`)."""
        with self._lock:
            by_service = {
                f"throttle_burst:{service}": self.injected[f"throttle_burst:{service}"]
                for service in BURST_SERVICES
            }
            return {**{kind: self.injected[kind] for kind in KINDS}, **by_service}

    def pending_due(self) -> list[datetime]:
        """Engine times at which something this plan held back becomes due."""
        with self._lock:
            return [when for when, _, _ in self._stream_later] + list(self._timer_due.values())

    def _later(self) -> datetime:
        return clock.now() + timedelta(seconds=self.late_seconds)

    # --- SQS pollers ----------------------------------------------------------------------

    def sqs_received(self, queue_url: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Messages to handle now; the others are made visible again `late_seconds` later."""
        keep = []
        for message in messages:
            if self.decide("sqs_late", message.get("Body", "")):
                self._hold(queue_url, message, self.late_seconds)
            else:
                keep.append(message)
        return keep

    def sqs_handled(self, queue_url: str, done: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Handled messages to delete; the others stay, to be delivered again (at once, or
        late when `sqs_late` strikes too)."""
        delete = []
        for message in done:
            if self.decide("sqs_duplicate", message.get("Body", "")):
                late = self.decide("sqs_late", "again|" + message.get("Body", ""))
                self._hold(queue_url, message, self.late_seconds if late else 0)
            else:
                delete.append(message)
        return delete

    @staticmethod
    def _hold(queue_url: str, message: dict[str, Any], seconds: float) -> None:
        try:
            aws.client("sqs").change_message_visibility(
                QueueUrl=queue_url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=max(0, int(seconds)),
            )
        except Exception as error:  # the message comes back after its visibility timeout
            log.debug("faults: could not hold a message: %s", error)

    # --- stream pollers -------------------------------------------------------------------

    def stream_handled(self, poller: str, records: list[dict[str, Any]]) -> bool:
        """A batch was handled: True to hand it to the handler again now. A late copy may
        be kept for `stream_due`."""
        key = ",".join(str(r.get("dynamodb", {}).get("SequenceNumber")) for r in records)
        if self.decide("stream_late", key):
            with self._lock:
                self._stream_later.append((self._later(), poller, records))
        return self.decide("stream_duplicate", key)

    def stream_due(self, poller: str) -> list[list[dict[str, Any]]]:
        """Late copies due now for `poller` (delivered after newer records)."""
        now = clock.now()
        with self._lock:
            due = [r for when, name, r in self._stream_later if name == poller and when <= now]
            self._stream_later = [
                item for item in self._stream_later if not (item[1] == poller and item[0] <= now)
            ]
        return due

    # --- scheduler ------------------------------------------------------------------------

    def timer_may_fire(self, key: Any, now: datetime) -> bool:
        """False while a due schedule is held back (it fires `late_seconds` late)."""
        with self._lock:
            held = self._timer_due.get(key)
        if held is None:
            if not self.decide("timer_late", repr(key)):
                return True
            with self._lock:
                self._timer_due[key] = held = now + timedelta(seconds=self.late_seconds)
        if now < held:
            return False
        with self._lock:
            self._timer_due.pop(key, None)
        return True

    def timer_fires_twice(self, key: Any) -> bool:
        return self.decide("timer_duplicate", repr(key))

    # --- DynamoDB throttling --------------------------------------------------------------

    def install(self) -> None:
        """Throttle DynamoDB calls of the engine's clients, fail its Idempotency-Key
        records, and (in a function's process) answer requests as throttled in a burst
        (idempotent)."""
        kinds = [k for k in CHILD_KINDS if k != "throttle_burst"]
        wanted = any(float(getattr(self, kind)) > 0 for kind in kinds)
        if self._stop_throttle is None and wanted:
            self._stop_throttle = aws.intercept(self._maybe_throttle)
        if self._stop_bursts is None and self.throttle_burst > 0:
            if self.burst_origin is None:
                self.burst_origin = clock.now().timestamp()
            self._stop_bursts = aws.respond(self._maybe_throttle_burst)
        if self.may_exit and self.backoff_scale != 1 and self._backoff_saved is None:
            self._backoff_saved = botocore.endpoint.time
            botocore.endpoint.time = _ScaledSleep(self.backoff_scale)

    def child_state(self) -> dict[str, float] | None:
        """The probabilities a function's process plays (None: none), for its plan, and its
        clients' backoff scale."""
        state = {kind: float(getattr(self, kind)) for kind in CHILD_KINDS}
        if not any(state.values()):
            return None
        if self.burst_origin is not None:
            state["burst_origin"] = self.burst_origin
        return {**state, "backoff_scale": self.backoff_scale} if self.backoff_scale != 1 else state

    def uninstall(self) -> None:
        if self._stop_throttle is not None:
            self._stop_throttle()
            self._stop_throttle = None
        if self._stop_bursts is not None:
            self._stop_bursts()
            self._stop_bursts = None
        if self._backoff_saved is not None:
            botocore.endpoint.time = self._backoff_saved
            self._backoff_saved = None

    # --- throttle bursts ------------------------------------------------------------------

    def burst_at(self, moment: datetime) -> tuple[str, float] | None:
        """The burst at engine time `moment`: (service, share of its requests throttled),
        or None."""
        if self.throttle_burst <= 0:
            return None
        slot = int((moment.timestamp() - (self.burst_origin or 0.0)) // BURST_SLOT_SECONDS)
        digest = hashlib.sha256(f"{self.seed}|burst|{slot}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 >= self.throttle_burst:
            return None
        low, high = BURST_RATES
        rate = low + (high - low) * int.from_bytes(digest[9:17], "big") / 2**64
        return BURST_SERVICES[digest[8] % len(BURST_SERVICES)], rate

    def _maybe_throttle_burst(self, service: str, operation: str, request: Any) -> Any:
        """In a burst of `service`, answer this request throttled with the burst's share.
        Only in a function's process (`may_exit`): the runtime's own pollers stand for
        AWS's event source mappings and Scheduler, which meet throttles of their own."""
        if not self.may_exit or not self._active:
            return None
        burst = self.burst_at(clock.now())
        if burst is None or burst[0] != service:
            return None
        key = f"{service}|{operation}"
        if not self.decide("throttle_burst", key, probability=burst[1]):
            return None
        with self._lock:
            self.injected[f"throttle_burst:{service}"] += 1
            nth = self._seen[f"throttle_burst|{self.label(key)}"]
        return aws.throttled_answer(service, operation, request, nth=nth)

    def _maybe_throttle(self, service: str, operation: str, params: dict[str, Any]) -> None:
        if service != "dynamodb":
            return
        self._maybe_fail_idempotency(operation, params)
        table = str(params.get("TableName", ""))
        if not self.decide("throttle", f"{operation}|{table}"):
            return
        raise _throttled(operation, self._seen[f"throttle|{operation}|{table}"])

    def _maybe_fail_idempotency(self, operation: str, params: dict[str, Any]) -> None:
        """The Idempotency-Key faults: a claim's put, an answer's write (`finish`: it sets
        the status; a release does not), or the process dying at that write."""
        key = params.get("Item") if operation == "PutItem" else params.get("Key")
        pk = str(((key or {}).get("pk") or {}).get("S", ""))
        if not pk.startswith("IDEM#") or not any(op in pk for op in IDEM_OPERATIONS):
            return
        # Keyed by the claim's token too (random): a function's process that died for
        # `idem_crash` is replaced by a fresh one whose counts start again, and a decision
        # keyed by the record alone would then strike every resend the same way.
        values = params.get("ExpressionAttributeValues") or {}
        if operation == "PutItem":
            token = str(((key or {}).get("claimToken") or {}).get("S", ""))
        else:
            token = str(values.get(":t", {}).get("S", ""))
        # (without its dashes: `label` would make any UUID it does not know "?")
        event = f"{self.label(pk.rsplit('#', 1)[0])}|{token.replace('-', '')}"
        if operation == "PutItem" and self.decide("idem_claim_fail", event):
            raise _throttled(operation, 0)
        finishing = operation == "UpdateItem" and "#st = :s" in str(params.get("UpdateExpression"))
        if not finishing:
            return
        with self._lock:
            failing = token in self._failing_answers
        if failing or self.decide("idem_answer_fail", event):
            with self._lock:
                self._failing_answers.add(token)
            raise _throttled(operation, 1)
        if self.decide("idem_crash", event):
            log.warning("faults: the function dies before storing an answer (%s)", event)
            if self.may_exit:
                logging.shutdown()
                os._exit(CRASH_EXIT_CODE)  # the process is gone: no answer, no release
            raise FunctionDied(f"died before storing the answer of {event}")

    # --- the push app ---------------------------------------------------------------------

    def wrap_transport(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """A `PushApp` transport factory whose invocations may die after a step's body ran:
        the `complete`/`fail` of a `run` step is not sent, and the app's answer is lost."""
        plan = self

        def factory(api: Any, deployment_id: str | None) -> Any:
            return _KillableTransport(inner(api, deployment_id), plan, str(api.token))

        return factory

    def killed(self, token: str) -> bool:
        with self._lock:
            return token in self._killed

    def _kill(self, token: str, losing_end_of: str | None = None) -> None:
        with self._lock:
            self._killed.add(token)
            if losing_end_of is not None:
                self.lost_ends[(_run_of(token), losing_end_of)] += 1


def _claims_of(token: str) -> dict[str, Any]:
    """An invocation token's claims, unverified (the plan only labels)."""
    payload = token.partition(".")[0]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return {}
    return claims if isinstance(claims, dict) else {}


def _run_of(token: str) -> str:
    """The run an invocation token is for."""
    return str(_claims_of(token).get("r", ""))


def invocation_key(token: str) -> str:
    """What names an invocation in a fault's event: its run (labelled by `alias`), epoch,
    attempt and branch step, read from its token. Not the token itself: it carries a
    signature and an expiry time, different on every run of one seed, so decisions keyed by
    it were not reproducible."""
    claims = _claims_of(token)
    if not claims:
        return "?"
    return f"{claims.get('r')}|e{claims.get('e')}|a{claims.get('a')}|{claims.get('s') or ''}"


class _ScaledSleep:
    """Stands for the `time` module in `botocore.endpoint`, whose one use of it is the sleep
    before a retry: that sleep scaled (`FaultPlan.backoff_scale`)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds * self.scale)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class FunctionDied(BaseException):
    """`idem_crash` outside an execution environment: the function's process died (a
    BaseException, so no handler's `except Exception` carries on after it)."""


def _throttled(operation: str, nth: int) -> ClientError:
    """DynamoDB's answer to a throttled call (after botocore's retries)."""
    return ClientError(
        {
            "Error": {
                "Code": _THROTTLES[nth % 2],
                "Message": "Rate of requests exceeds the allowed throughput.",
            },
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        operation,
    )


class _AppDied(Exception):
    """The app's process died (fault injection): nothing after this reaches the engine."""


class _KillableTransport:
    def __init__(self, inner: Any, plan: FaultPlan, token: str) -> None:
        self._inner = inner
        self._plan = plan
        self._token = token

    async def send(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._plan.killed(self._token):
            raise _AppDied("the app died")
        for op in ops:
            ends = op.get("op") in ("complete", "fail")
            event = f"{invocation_key(self._token)}|{op.get('stepId')}"
            if ends and self._plan.decide("kill", event):
                self._plan._kill(self._token, losing_end_of=str(op.get("stepId")))
                raise _AppDied(f"the app died before recording {op.get('stepId')}")
        result: list[dict[str, Any]] = await self._inner.send(ops)
        return result

    async def aclose(self) -> None:
        await self._inner.aclose()


class FaultyApp:
    """A push app (ASGI) behind a `FaultPlan`: 500s, hangs, dropped connections, lost answers
    and deaths between a step's side effect and its recording (`kill`; build the inner app
    with `transport_factory=plan.wrap_transport(http_transport_factory)`)."""

    def __init__(self, inner: Any, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan

    @property
    def signing_key(self) -> str | None:
        return self.inner.signing_key

    @signing_key.setter
    def signing_key(self, value: str | None) -> None:
        self.inner.signing_key = value

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.inner(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        if not isinstance(request, dict) or request.get("type") != "invoke":
            await self.inner(scope, _replay(body), send)
            return
        token = str((request.get("api") or {}).get("token", ""))
        key = invocation_key(token)
        plan = self.plan
        if plan.decide("app_drop", key):
            raise DropConnection()
        if plan.decide("app_error", key):
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"injected failure"})
            return
        # A branch invocation (one parallel step) is not hung: the lease take started its
        # step, so an answer past the invoke timeout fails that step `step_timed_out` by the
        # protocol's rule (docs/protocol.md section 11), an outcome the fault-free program
        # does not have. A main invocation's hang is a failed delivery, retried.
        if not request.get("branch") and plan.decide("app_hang", key):
            await asyncio.sleep(plan.hang_seconds)  # the engine gave up; we carry on
        lose_answer = plan.decide("app_lost_answer", key)
        answer: list[Any] = []

        async def keep(message: Any) -> None:
            answer.append(message)

        await self.inner(scope, _replay(body), keep)
        if lose_answer or plan.killed(token):
            raise DropConnection()
        for message in answer:
            await send(message)


def _replay(body: bytes) -> Callable[[], Awaitable[dict[str, Any]]]:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never: the client stays connected
        return {"type": "http.disconnect"}

    return receive
