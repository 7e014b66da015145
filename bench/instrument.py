"""Counting what a run costs: every AWS request (through `ezgh_engine.adapters.aws.observe`),
every Lambda invocation and its duration, every HTTP API request, every engine -> app request
and every Scheduler fire.

Who made a request decides whether, and how, it is billed:

- `function:<key>`: a Lambda handler (api, stream, invoker, ...) made it: the engine's own.
- `esm:<queue>`: the local SQS poller, playing Lambda's event source mapping. On AWS the
  mapping's ReceiveMessage and DeleteMessageBatch are billed SQS requests; only receives
  that returned messages are counted (empty polls are an idle cost, not a per-run one).
- `esm:stream`: the stream reader playing the DynamoDB stream mapping: free on AWS.
- `scheduler`: the local Scheduler firing a schedule: its SendMessage is billed by SQS, the
  firing by Scheduler; its ListSchedules/GetSchedule/DeleteSchedule are emulation only.
- anything else (the bench waiting, moto's bookkeeping) is not counted.
"""

from __future__ import annotations

import contextvars
import json
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ezgh_engine import clock as engine_clock

from bench.keys import IndexKnowledge, query_partition

# Who is making requests, and how many a handler made: context variables, so the threads a
# handler starts (`service.at_once` runs each message of a group on a thread of its own, in a
# copy of its context) are attributed to it as well.
_origin: contextvars.ContextVar[str | None] = contextvars.ContextVar("origin", default=None)
_made: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("made", default=None)


@contextmanager
def origin(name: str) -> Iterator[None]:
    """Attribute the requests this thread makes inside the block to `name`."""
    token = _origin.set(name)
    try:
        yield
    finally:
        _origin.reset(token)


def current_origin() -> str | None:
    found = _origin.get()
    if found:
        return found
    name = threading.current_thread().name
    if name.startswith("sqs:"):
        return "esm:" + name.split(":", 1)[1].split("-batch", 1)[0]
    if name.startswith("stream:"):
        return "esm:stream"
    return None


# --- DynamoDB item sizes and request units ------------------------------------------------


def _value_size(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = len(str(inner).lstrip("-").replace(".", "").lstrip("0")) or 1
        return (digits + 1) // 2 + 1
    if kind == "B":
        return len(inner) if isinstance(inner, (bytes, bytearray)) else len(str(inner)) * 3 // 4
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: v}) for v in inner)
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in inner.items())
    return len(json.dumps(inner))


def item_size(item: dict[str, Any] | None) -> int:
    """DynamoDB's size of an item in low-level format: names plus values."""
    if not item:
        return 0
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _key_of(table: str, item_or_key: dict[str, Any] | None) -> tuple[str, str, str] | None:
    if not item_or_key or "pk" not in item_or_key:
        return None
    sk = item_or_key.get("sk", {"S": ""})
    return (table, str(next(iter(item_or_key["pk"].values()))), str(next(iter(sk.values()))))


@dataclass
class DdbAccess:
    """One item (or one query) touched by a DynamoDB request; units are computed later, once
    the final item sizes are known (an UpdateItem does not say how big its item is)."""

    kind: str  # "write" | "read"
    key: tuple[str, str, str] | None
    request_size: int  # what the request itself carried (Put: the item)
    read_size: int = 0  # reads: bytes of the items answered
    transactional: bool = False
    consistent: bool = False
    query: bool = False
    # A Query or Scan with a FilterExpression: DynamoDB bills every item it read, the ones
    # the filter dropped too, which the answer does not carry. Counted at the mean size of
    # the partition's known items (`filtered_bytes`).
    filtered_out: int = 0
    partition: tuple[str, str] | None = None
    # A Query with a ProjectionExpression answers part of each item and is billed for all of
    # it: the sort keys of what it answered, to size the items by what is known of them.
    projected: list[str] = field(default_factory=list)
    # Writes: the index copies it wrote, as (index name, index partition key value)
    # (bench/keys.py). Queries: the partition read, (table or `table/index`, key value).
    index_writes: list[tuple[str, str]] = field(default_factory=list)
    read_partition: tuple[str, str] | None = None


def ddb_accesses(operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> list[DdbAccess]:
    table = params.get("TableName", "")
    if operation == "PutItem":
        return [
            DdbAccess("write", _key_of(table, params.get("Item")), item_size(params.get("Item")))
        ]
    if operation in ("UpdateItem", "DeleteItem"):
        size = item_size(params.get("Key")) + item_size(params.get("ExpressionAttributeValues"))
        return [DdbAccess("write", _key_of(table, params.get("Key")), size)]
    if operation == "GetItem":
        size = item_size(parsed.get("Item"))
        return [
            DdbAccess(
                "read",
                _key_of(table, params.get("Key")),
                0,
                read_size=size,
                consistent=bool(params.get("ConsistentRead")),
            )
        ]
    if operation in ("Query", "Scan"):
        items = parsed.get("Items", [])
        size = sum(item_size(i) for i in items)
        dropped = int(parsed.get("ScannedCount", len(items))) - len(items)
        pk = (params.get("ExpressionAttributeValues") or {}).get(":pk", {}).get("S")
        projected = [
            str(next(iter(i["sk"].values())))
            for i in items
            if "ProjectionExpression" in params and "sk" in i
        ]
        return [
            DdbAccess(
                "read",
                None,
                0,
                read_size=size,
                query=True,
                consistent=bool(params.get("ConsistentRead")),
                filtered_out=max(0, dropped) if "FilterExpression" in params else 0,
                partition=(table, pk) if pk else None,
                projected=projected if pk else [],
                read_partition=query_partition(params) if operation == "Query" else None,
            )
        ]
    if operation == "TransactWriteItems":
        found = []
        for action in params.get("TransactItems", []):
            ((kind, body),) = action.items()
            name = body.get("TableName", "")
            if kind == "Put":
                found.append(
                    DdbAccess(
                        "write",
                        _key_of(name, body.get("Item")),
                        item_size(body.get("Item")),
                        transactional=True,
                    )
                )
            else:  # Update, Delete, ConditionCheck: a ConditionCheck consumes WRUs too
                size = item_size(body.get("Key")) + item_size(body.get("ExpressionAttributeValues"))
                found.append(
                    DdbAccess("write", _key_of(name, body.get("Key")), size, transactional=True)
                )
        return found
    if operation == "TransactGetItems":
        answers = parsed.get("Responses", [])
        found = []
        for i, action in enumerate(params.get("TransactItems", [])):
            body = action.get("Get", {})
            size = item_size(answers[i].get("Item")) if i < len(answers) else 0
            found.append(
                DdbAccess(
                    "read",
                    _key_of(body.get("TableName", ""), body.get("Key")),
                    0,
                    read_size=size,
                    transactional=True,
                    consistent=True,
                )
            )
        return found
    if operation == "BatchWriteItem":
        found = []
        for name, writes in params.get("RequestItems", {}).items():
            for write in writes:
                item = write.get("PutRequest", {}).get("Item") or write.get(
                    "DeleteRequest", {}
                ).get("Key")
                found.append(DdbAccess("write", _key_of(name, item), item_size(item)))
        return found
    if operation == "BatchGetItem":
        found = []
        for name, items in parsed.get("Responses", {}).items():
            found.extend(
                DdbAccess("read", _key_of(name, i), 0, read_size=item_size(i), consistent=True)
                for i in items
            )
        return found
    return []


def index_writes(
    knowledge: IndexKnowledge, operation: str, params: dict[str, Any], ok: bool
) -> list[list[tuple[str, str]]]:
    """The index copies each access of `ddb_accesses` wrote (reads and refused writes:
    none), learning what the writes change on the way."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        kind = operation.removesuffix("Item")
        table = str(params.get("TableName", ""))
        key = _key_of(table, params.get("Item") if kind == "Put" else params.get("Key"))
        return [knowledge.write(table, kind, key, params) if ok else []]
    if operation == "TransactWriteItems":
        found = []
        for action in params.get("TransactItems", []):
            ((kind, body),) = action.items()
            table = str(body.get("TableName", ""))
            key = _key_of(table, body.get("Item") if kind == "Put" else body.get("Key"))
            live = ok and kind in ("Put", "Update", "Delete")
            found.append(knowledge.write(table, kind, key, body) if live else [])
        return found
    if operation == "BatchWriteItem":
        found = []
        for table, writes in params.get("RequestItems", {}).items():
            for write in writes:
                if "PutRequest" in write:
                    body = write["PutRequest"]
                    found.append(knowledge.write(table, "Put", _key_of(table, body["Item"]), body))
                else:
                    key = _key_of(table, write.get("DeleteRequest", {}).get("Key"))
                    found.append(knowledge.write(table, "Delete", key, {}))
        return found
    return []


def _units(size: int, unit: int) -> int:
    return max(1, -(-size // unit))


# The size assumed of an item a filter dropped whose partition the bench knows nothing of.
UNKNOWN_ITEM_BYTES = 300


def filtered_bytes(access: DdbAccess, sizes: dict[tuple[str, str, str], int]) -> int:
    """What the items a Query's filter dropped weighed (billed, not answered): their number
    times the mean known size of their partition's items."""
    if not access.filtered_out:
        return 0
    known = [n for (table, pk, _), n in sizes.items() if (table, pk) == access.partition]
    mean = sum(known) / len(known) if known else UNKNOWN_ITEM_BYTES
    return int(access.filtered_out * mean)


def read_bytes(access: DdbAccess, sizes: dict[tuple[str, str, str], int]) -> int:
    """The bytes a read is billed for: the items answered (whole, when a projection answered
    part of them), and those a filter dropped."""
    answered = access.read_size
    if access.projected and access.partition is not None:
        table, pk = access.partition
        whole = sum(sizes.get((table, pk, sk), 0) for sk in access.projected)
        answered = max(answered, whole)
    return answered + filtered_bytes(access, sizes)


def index_units(access: DdbAccess, sizes: dict[tuple[str, str, str], int]) -> float:
    """The write units of the index copies a write made: each copy the size of what its
    index projects, the whole item for `ALL` (bench/keys.py), else at most 1 KB: one unit.
    Not transactional: DynamoDB updates an index outside the transaction's double price."""
    from bench.keys import projected, table_of
    from bench.prices import DYNAMODB_WRU_BYTES

    if not access.index_writes or access.key is None:
        return 0.0
    definition = table_of(access.key[0])
    indexes = {i.name: i for i in definition.indexes} if definition else {}
    size = max(access.request_size, sizes.get(access.key, 0))
    units = 0.0
    for name, _ in access.index_writes:
        index = indexes.get(name)
        whole = index is None or projected(index) is None
        units += _units(size, DYNAMODB_WRU_BYTES) if whole else 1
    return units


def request_units(
    accesses: list[DdbAccess], sizes: dict[tuple[str, str, str], int]
) -> tuple[float, float]:
    """(WRU, RRU) of one request's accesses, sizing items by what is known of them."""
    from bench.prices import DYNAMODB_RRU_BYTES, DYNAMODB_WRU_BYTES

    wru = rru = 0.0
    for access in accesses:
        factor = 2 if access.transactional else 1
        if access.kind == "write":
            size = max(access.request_size, sizes.get(access.key, 0) if access.key else 0)
            wru += factor * _units(size, DYNAMODB_WRU_BYTES)
        else:
            units = _units(read_bytes(access, sizes), DYNAMODB_RRU_BYTES)
            if access.transactional:
                rru += 2 * units
            else:
                rru += units if access.consistent else units / 2
    return wru, rru


# --- the recorder -------------------------------------------------------------------------


@dataclass
class AwsCall:
    origin: str
    service: str
    operation: str
    request_bytes: int
    response_bytes: int
    phase: str
    accesses: list[DdbAccess] = field(default_factory=list)
    messages: int = 0  # SQS receives: how many messages it returned
    seconds: float = 0.0
    # The engine code that made it: `service.module.function > adapters.module.function`
    # (the outermost service frame and the innermost adapter frame), for breakdowns.
    site: str = ""


@dataclass
class Invocation:
    function: str
    seconds: float
    phase: str
    path: str = ""
    request_bytes: int = 0
    aws_calls: int = 0  # AWS requests this invocation made itself
    # CPU time of the handler's thread (`time.thread_time`): the part of `seconds` a Lambda
    # environment with less than one vCPU would stretch (moto's own work is in other threads).
    cpu_seconds: float = 0.0
    # When it began, on the engine clock (epoch seconds): what a mapping's batching window
    # gathers together deployed (bench/cost.py `batched_requests`).
    at: float = 0.0
    response_bytes: int = 0  # the answer's body (an HTTP handler's): what the caller read


@dataclass
class AppRequest:
    kind: str
    request_bytes: int
    response_bytes: int
    seconds: float
    phase: str


class Recorder:
    """Collects what the engine does while `active`; `phase` labels what comes next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = False
        self.phase = "run"
        self.sizes: dict[tuple[str, str, str], int] = {}
        self.index = IndexKnowledge()  # the index keys items carry (kept across clears)
        self.clear()

    def clear(self, *, keep_sizes: bool = False) -> None:
        """Forget what was seen (`keep_sizes`: but not the item sizes learned)."""
        with self._lock:
            sizes = self.sizes if keep_sizes else {}
            self.calls: list[AwsCall] = []
            self.invocations: list[Invocation] = []
            self.app_requests: list[AppRequest] = []
            self.scheduler_fires: Counter[str] = Counter()
            self.sizes = sizes  # last known item sizes

    # -- feeds ------------------------------------------------------------------------------

    def on_aws(self, record: dict[str, Any]) -> None:
        where = current_origin()
        if where is not None and where.startswith("function:"):
            made = _made.get()
            if made is not None:
                made[0] += 1
        service, operation = record["service"], record["operation"]
        parsed = record.get("parsed") or {}
        params = record.get("params") or {}
        hits: list[list[tuple[str, str]]] = []
        if service == "dynamodb":
            self._learn_sizes(operation, params, parsed)
            with self._lock:
                ok = int(record.get("status") or 200) < 300
                hits = index_writes(self.index, operation, params, ok)
        if not self.active or where is None:
            return
        empty_poll = operation == "ReceiveMessage" and not parsed.get("Messages")
        if where.startswith("esm:") and where != "esm:stream" and empty_poll:
            return  # an idle cost of the mapping, not a cost of this run
        call = AwsCall(
            origin=where,
            service=service,
            operation=operation,
            request_bytes=int(record.get("request_bytes") or 0),
            response_bytes=int(record.get("response_bytes") or 0),
            phase=self.phase,
            seconds=float(record.get("seconds") or 0.0),
            site=_engine_site(),
        )
        if service == "dynamodb":
            call.accesses = ddb_accesses(operation, params, parsed)
            writes = [a for a in call.accesses if a.kind == "write"]
            for access, written in zip(writes, hits, strict=False):
                access.index_writes = written
        if service == "sqs" and operation == "ReceiveMessage":
            call.messages = len(parsed.get("Messages", []))
        with self._lock:
            self.calls.append(call)

    def _learn_sizes(self, operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        table = params.get("TableName", "")
        found: list[dict[str, Any]] = []
        if operation == "PutItem":
            found.append(params.get("Item") or {})
        elif operation == "GetItem":
            found.append(parsed.get("Item") or {})
        elif operation in ("Query", "Scan"):
            found.extend(parsed.get("Items", []))
        elif operation == "UpdateItem":
            found.append(parsed.get("Attributes") or {})
        with self._lock:
            for item in found:
                key = _key_of(table, item)
                if key is not None and "sk" in item:
                    self.sizes[key] = max(self.sizes.get(key, 0), item_size(item))

    def learn_table(self, table: str, items: list[dict[str, Any]]) -> None:
        """Final sizes from a scan (the bench reads the tables after each run)."""
        with self._lock:
            for item in items:
                key = _key_of(table, item)
                if key is not None:
                    self.sizes[key] = max(self.sizes.get(key, 0), item_size(item))
                    self.index.learn_item(table, item)

    def wrap_handler(self, key: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def timed(event: dict[str, Any], context: Any) -> Any:
            began = engine_clock.now().timestamp()
            started = time.perf_counter()
            cpu_started = time.thread_time()
            path = str(event.get("rawPath") or "") if isinstance(event, dict) else ""
            body = event.get("body") if isinstance(event, dict) else None
            made = [0]
            token = _made.set(made)
            answered = {"bytes": 0}
            with origin(f"function:{key}"):
                try:
                    answer = handler(event, context)
                    if isinstance(answer, dict) and isinstance(answer.get("body"), str):
                        answered["bytes"] = len(answer["body"])
                    return answer
                finally:
                    _made.reset(token)
                    if self.active:
                        seconds = time.perf_counter() - started
                        cpu = time.thread_time() - cpu_started
                        with self._lock:
                            self.invocations.append(
                                Invocation(
                                    key,
                                    seconds,
                                    self.phase,
                                    path,
                                    len(body or ""),
                                    made[0],
                                    cpu,
                                    began,
                                    answered["bytes"],
                                )
                            )

        return timed

    def fired(self, name: str) -> None:
        if self.active:
            with self._lock:
                self.scheduler_fires[self.phase] += 1

    def app_request(
        self, kind: str, request_bytes: int, response_bytes: int, seconds: float
    ) -> None:
        if self.active:
            with self._lock:
                self.app_requests.append(
                    AppRequest(kind, request_bytes, response_bytes, seconds, self.phase)
                )

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> tuple[list[AwsCall], list[Invocation], list[AppRequest], Counter[str]]:
        with self._lock:
            return (
                list(self.calls),
                list(self.invocations),
                list(self.app_requests),
                Counter(self.scheduler_fires),
            )


# The invoke request of a branch invocation names its step (`"branch": {"stepId": ...}`);
# a recorded parallel step shows `"branch": true` instead.
_BRANCH_REQUEST = re.compile(rb'"branch":\s*\{')


class CountingApp:
    """An ASGI push app wrapper counting engine -> app requests, their bytes and time."""

    def __init__(self, inner: Any, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder

    @property
    def signing_key(self) -> str | None:
        return self.inner.signing_key

    @signing_key.setter
    def signing_key(self, value: str | None) -> None:
        self.inner.signing_key = value

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        started = time.perf_counter()
        sizes = {"in": 0, "out": 0}
        kind = {"type": "?"}

        async def counted_receive() -> Any:
            message = await receive()
            body = message.get("body", b"") or b""
            sizes["in"] += len(body)
            if kind["type"] == "?" and body:
                head = body[:400].decode(errors="replace")
                kind["type"] = (
                    "invoke" if '"invoke"' in head else ("sync" if '"sync"' in head else "other")
                )
            if kind["type"] == "invoke" and _BRANCH_REQUEST.search(body):
                kind["type"] = "branch"  # a parallel step's own invocation
            return message

        async def counted_send(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.body":
                sizes["out"] += len(message.get("body", b"") or b"")
            await send(message)

        try:
            await self.inner(scope, counted_receive, counted_send)
        finally:
            self.recorder.app_request(
                kind["type"], sizes["in"], sizes["out"], time.perf_counter() - started
            )


_ENGINE_FRAME = re.compile(r"ezgh_engine/(service|adapters|api|functions)/(.+)\.py$")


def _engine_site() -> str:
    """Which engine code is making the request this thread makes now: the outermost and
    the innermost service (or api) frame and the innermost adapter frame, as
    `module.function`, joined by ` > `."""
    frame: FrameType | None = sys._getframe(1)
    services: list[str] = []
    adapter = ""
    while frame is not None:
        found = _ENGINE_FRAME.search(frame.f_code.co_filename.replace("\\", "/"))
        if found:
            name = f"{found[2].replace('/', '.')}.{frame.f_code.co_name}"
            if found[1] == "adapters":
                if found[2] != "aws":  # the observing hook itself
                    adapter = adapter or name
            else:
                services.append(name)
        frame = frame.f_back
    chain = [services[-1], services[0]] if len(services) > 1 else services
    return " > ".join([*dict.fromkeys(chain), *([adapter] if adapter else [])])


def by_service(calls: list[AwsCall]) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for call in calls:
        found[call.service][call.operation] += 1
    return found
