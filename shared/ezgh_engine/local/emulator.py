"""The embedded AWS emulator: moto's server on loopback, and the process environment for it.

The handlers build boto3 clients from the standard `AWS_ENDPOINT_URL` variable
(`ezgh_engine.adapters.aws`), so pointing that variable at moto is all it takes to run them
unchanged. moto's server (not its in-process mock) is used because the local runtime is
threaded and in-process moto is not thread-safe for SQS.

With `EZGH_LOCAL_DYNAMODB_URL` set (a loopback URL: AWS's DynamoDB Local, which the tests
start), DynamoDB and DynamoDB Streams go there instead (botocore's per-service
`AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`) and SQS, S3 and
Scheduler stay on moto. moto's DynamoDB patches below then have nothing to patch.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import logging
import os
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ezgh_engine import clock, config
from ezgh_engine.adapters import aws
from ezgh_engine.local import image, moto_expressions
from ezgh_engine.local.account import ACCOUNT_ID, NAME_PREFIX, REGION
from ezgh_engine.local.checkpoints import Checkpointer
from ezgh_engine.local.emulator_gate import KEY_HEADER, EmulatorGate, new_credentials, signed_by
from ezgh_engine.local.moto_internals import MotoInternalsMissing
from ezgh_engine.local.moto_server import MotoServer
from ezgh_engine.local.persistence import (
    JOURNAL_NAME,
    Journal,
    JournalingApp,
    Restored,
    replay,
    restored_from,
    serve_journaled,
)

log = logging.getLogger("ezgh.local.emulator")


# Set for the emulator's lifetime; the previous values come back on `stop()`. The
# credentials are the emulator's own, new at each start (`local.emulator_gate`).
_FIXED_ENV = {
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    # Powertools: no X-Ray daemon here. (The engine's EMF metrics go to a file under
    # `ezgh dev`, never to its terminal: `observability.sinks`.)
    "POWERTOOLS_TRACE_DISABLED": "1",
}
_DEFAULT_ENV = {  # only when the user has not chosen
    "POWERTOOLS_SERVICE_NAME": "ezgh",
    "POWERTOOLS_METRICS_NAMESPACE": "EzghLocal",
}
# DynamoDB Local's URL, when DynamoDB should not be moto's (tests: `-m ddblocal`).
ENV_DYNAMODB_URL = "EZGH_LOCAL_DYNAMODB_URL"
# botocore's per-service endpoint variables (service ids "DynamoDB", "DynamoDB Streams").
DYNAMODB_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
# A profile or per-service endpoint in the user's shell would send calls to real AWS.
_REMOVED_ENV_PREFIXES = ("AWS_ENDPOINT_URL_",)
_REMOVED_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")


class _StreamWakeup:
    """Wakes the stream pollers the moment moto appends a stream record.

    moto's server runs in this process, so instead of polling `GetRecords` in a tight loop
    (CPU on a 2-core CI box, latency on every step of every run) the pollers wait on this
    condition with a timeout and still call `GetRecords` as the source of truth.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.counter = 0
        self._installed = False
        # DynamoDB is not in this process (DynamoDB Local): no append to hook. Every write
        # happens in a tracked handler or API call, so the end of each one wakes the readers
        # instead (`activity_ended`), and a reader is idle once it read nothing after it.
        self.external = False

    def activity_ended(self) -> None:
        """A handler or API call ended (`pollers.Activity`): with DynamoDB elsewhere, what it
        wrote may be in the stream now."""
        if self.external:
            self.notify()

    def install(self) -> None:
        if self._installed:
            return
        try:
            from moto.dynamodb.models.table import StreamShard
        except ImportError as exc:  # moto's internals moved: see the pin in pyproject.toml
            raise MotoInternalsMissing("moto.dynamodb.models.table.StreamShard") from exc
        original: Callable[..., Any] = StreamShard.add
        wakeup = self

        def add(shard: Any, old: Any, new: Any) -> None:
            original(shard, old, new)
            wakeup.notify()

        StreamShard.add = add  # type: ignore[method-assign,assignment]
        self._installed = True

    def notify(self) -> None:
        with self._cond:
            self.counter += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float, interrupted: Callable[[], bool]) -> int:
        """Wait until the counter moves past `seen`, `interrupted()` (checked under the lock,
        so a `notify()` after setting its flag is never lost) or `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: self.counter != seen or interrupted(), timeout=timeout)
            return self.counter


stream_wakeup = _StreamWakeup()


_dynamodb_lock = threading.RLock()
_dynamodb_serialized = False


def serialize_dynamodb() -> None:
    """Make moto's DynamoDB answer one request at a time.

    DynamoDB itself makes each request, and each transaction, atomic and isolated; moto's
    backend is plain Python objects that the threaded server mutates from many threads at
    once. Without this lock two concurrent transactions can both pass an
    `attribute_not_exists` condition (two runs for one run key), and a reader can see an
    item half-written. One lock around each request restores what DynamoDB promises.

    DynamoDB Streams requests take the same lock. moto applies a transaction action by
    action, appending each one's stream record, and on a refused action rolls back
    (`lighten_dynamodb` truncates the shard); it numbers records by their position in the
    shard. A `GetRecords` served inside that window answered records about to be rolled
    back and moved its reader past them, so the reader then skipped as many committed
    records (same sequence numbers): a run's start, a step's timer, a child's end.
    """
    global _dynamodb_serialized
    if _dynamodb_serialized:
        return
    try:
        from moto.dynamodb.responses import DynamoHandler
        from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
    except ImportError as exc:  # without the lock, concurrent writes could interleave
        raise MotoInternalsMissing("moto's DynamoHandler.call_action") from exc
    for handler_class in (DynamoHandler, DynamoDBStreamsHandler):
        original: Callable[..., Any] = handler_class.call_action

        def call_action(handler: Any, _original: Callable[..., Any] = original) -> Any:
            with _dynamodb_lock:
                return _original(handler)

        handler_class.call_action = call_action  # type: ignore[method-assign]
    _dynamodb_serialized = True


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


def lighten_dynamodb() -> None:
    """Keep moto's DynamoDB linear in the data it holds.

    1. moto's `BaseModel.__new__` appends every instance to `cls.instances_tracked` (for its
       dashboard) and lets go only on a reset. Stop that for DynamoDB and its streams.
    2. `TransactWriteItems` deep-copies each table it names, every item and every stream
       record since the reset, as its rollback backup: one copy per transaction, so a run's
       steps cost time (and, with 1., memory) quadratic in its length. Back up only the items
       the transaction names and the stream's length instead, and roll back in place: the
       table and its stream shard stay the same objects, so a stream reader's iterator still
       sees later writes (after moto's own rollback it reads an orphaned shard, which holds
       the cancelled writes and none after them).
    3. Every `Query` starts from `Table.all_items()`, which sorts the whole table with
       `DynamoType` comparisons (each a `Decimal`/cast per side), then filters the partition
       and sorts the matches again: a page of 100 runs with 10,000 runs stored took 5 to 10 s.
       `_quicker_queries` drops the first sort (the matches are sorted anyway, on a total
       order) and sorts the matches on plain key values.
    4. The items answered skip moto's serializer when it would not change them
       (`_quicker_attribute_values`).
    5. An `UpdateExpression` is parsed once per text, and validated without moto's per-node
       rebuilding of its processors' maps (`local.moto_expressions`).
    6. A `Scan` deep-copied every item of the table before applying its filter, and sized
       each item twice (`_quicker_scans`): the scans of the runs table at a start from kept
       state (the leases and what repair re-arms) grew with every run ever kept.
    """
    global _dynamodb_lightened
    if _dynamodb_lightened:
        return
    try:
        import moto.dynamodb.models as ddb_models
        import moto.dynamodbstreams.models  # noqa: F401 - registers its models
        from moto.core.model_instances import model_data
        from moto.dynamodb.models.dynamo_type import DynamoType
        from moto.dynamodb.models.table import Table
    except ImportError as exc:
        raise MotoInternalsMissing("moto's DynamoDB models") from exc
    for service in ("dynamodb", "dynamodbstreams"):
        for model in model_data.get(service, {}).values():
            model.__new__ = staticmethod(_untracked_new)  # type: ignore[method-assign]
            model.instances_tracked = []  # type: ignore[attr-defined]

    class _NoTableCopy:
        """`copy` for moto's DynamoDB models module: a Table is not deep-copied."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else copy.deepcopy(value, memo)

    ddb_models.copy = _NoTableCopy()  # type: ignore[assignment]
    original: Callable[..., Any] = ddb_models.DynamoDBBackend.transact_write_items

    def transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> Any:
        saved: list[tuple[Any, Any, Any, Any]] = []  # table, hash key, range key, old item
        streams: dict[int, tuple[Any, int]] = {}
        for action in transact_items:
            if not isinstance(action, dict) or len(action) != 1:
                continue  # moto refuses it before writing anything
            op = next(iter(action.values()))
            table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            if table is None:
                continue
            key = op.get("Key") or op.get("Item") or {}
            try:
                hash_key = DynamoType(key[table.hash_key_attr])
                range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
            except (KeyError, TypeError):
                continue  # moto refuses it before writing anything
            old = table.get_item(hash_key, range_key)
            saved.append((table, hash_key, range_key, copy.deepcopy(old)))
            if table.stream_shard is not None:
                streams[id(table)] = (table.stream_shard, len(table.stream_shard.items))
        try:
            return original(backend, transact_items)
        except Exception:
            for table, hash_key, range_key, old in reversed(saved):
                if table.range_key_attr:
                    if old is None:
                        table.items.get(hash_key, {}).pop(range_key, None)
                    else:
                        table.items[hash_key][range_key] = old
                elif old is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = old
            for shard, length in streams.values():
                del shard.items[length:]
            raise

    ddb_models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign,assignment]
    _quicker_queries(Table)
    _quicker_scans()
    _quicker_attribute_values()
    moto_expressions.install()
    _dynamodb_lightened = True


_querying = threading.local()
_scanning = threading.local()  # `sizes`: each scanned item's size (None: not scanning)


def _unsorted(table: Any) -> list[Any]:
    """A moto table's items, in no particular order."""
    if table.range_key_attr:
        return [item for by_range in table.items.values() for item in by_range.values()]
    return list(table.items.values())


def _item_key(item: Any, names: list[str | None]) -> tuple[Any, ...]:
    """An item's table keys as DynamoDB orders them (`_key_value`)."""
    return tuple(_key_value(item.attrs[name]) for name in names if name)


def _key_value(value: Any) -> Any:
    """A key attribute's value as DynamoDB orders it (S and B as stored, N as a number):
    the order `DynamoType` comparisons give, without their casts."""
    from decimal import Decimal

    return Decimal(value.value) if value.type == "N" else value.value


def _quicker_queries(table_class: Any) -> None:
    """moto's `Query` without its sort of the whole table (see `lighten_dynamodb`, 3.).

    Inside `Table.query`, `all_items` answers the items unsorted: query sorts what matches
    by the index's (or the table's) keys, which identify an item, so the answer is the same.
    Scans and exports still get moto's order."""
    original_query: Callable[..., Any] = table_class.query
    original_all: Callable[..., Any] = table_class.all_items

    def all_items(table: Any) -> list[Any]:
        if getattr(_scanning, "sizes", None) is not None:  # in moto's order, sorted cheaper
            keys = [table.hash_key_attr, table.range_key_attr]
            return sorted(_unsorted(table), key=lambda item: _item_key(item, keys))
        if not getattr(_querying, "active", False):
            return list(original_all(table))
        return _unsorted(table)

    def query(table: Any, *args: Any, **kwargs: Any) -> Any:
        _querying.active = True
        try:
            return original_query(table, *args, **kwargs)
        finally:
            _querying.active = False

    def sorted_items(
        table: Any, hash_key_attrs: list[str], range_key_attrs: list[Any], items: list[Any]
    ) -> list[Any]:
        names = table._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
        items.sort(key=lambda item: tuple(_key_value(item.attrs[n]) for n in names))
        return items

    table_class.all_items = all_items
    table_class.query = query
    table_class.sorted_items = sorted_items


def _quicker_scans() -> None:
    """moto's `Scan`, answering the same, without its per-item overheads (see
    `lighten_dynamodb`, 6.).

    - Each item is read as it is instead of a deep copy of it: a `Scan` runs under the
      DynamoDB lock (`serialize_dynamodb`) and moto turns what it found into plain dicts
      before the handler returns, so no write can change an item in between, and neither
      the filter nor the projection changes the items they read (a projection makes new
      ones).
    - Each item's size (for the 1 MB page) is computed once per scan, not twice.
    - The table is sorted on plain key values (`all_items` above) instead of `DynamoType`
      comparisons: the same order, which pages and their cursors rely on.
    """
    try:
        from moto.dynamodb.models import table as table_module
        from moto.dynamodb.models.dynamo_type import Item
    except ImportError as exc:
        raise MotoInternalsMissing("moto's DynamoDB table module") from exc
    original_scan: Callable[..., Any] = table_module.Table.scan
    original_size: Callable[[Any], int] = Item.size

    def scan(table: Any, *args: Any, **kwargs: Any) -> Any:
        _scanning.sizes = {}
        try:
            return original_scan(table, *args, **kwargs)
        finally:
            _scanning.sizes = None

    def size(item: Any) -> int:
        sizes: dict[int, tuple[Any, int]] | None = getattr(_scanning, "sizes", None)
        if sizes is None:
            return original_size(item)
        known = sizes.get(id(item))
        if known is None or known[0] is not item:  # (the item kept: its id stays its own)
            known = sizes[id(item)] = (item, original_size(item))
        return known[1]

    class _ScanCopy:
        """`copy` for moto's table module: an item read by a scan is not deep-copied."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            if type(value) is Item and getattr(_scanning, "sizes", None) is not None:
                return value
            return copy.deepcopy(value, memo)

    table_module.Table.scan = scan  # type: ignore[method-assign,assignment]
    Item.size = size  # type: ignore[method-assign,assignment]
    table_module.copy = _ScanCopy()  # type: ignore[assignment]


# The `AttributeValue` members moto's serializer copies as they are (strings, booleans and
# the containers of those); `B` and `BS` are base64-encoded by it, so they take its path.
_PLAIN_STRINGS = frozenset({"S", "N"})
_PLAIN_STRING_SETS = frozenset({"SS", "NS"})
_PLAIN_BOOLEANS = frozenset({"BOOL", "NULL"})


def plain_attribute_value(value: Any) -> bool:
    """Is `value` a wire-format `AttributeValue` that moto's JSON serializer would answer
    unchanged: one member, a string (`S`, `N`), a list of strings (`SS`, `NS`), a boolean
    (`BOOL`, `NULL`), or a map (`M`) or list (`L`) of such values? (No blob, no None.)"""
    if type(value) is not dict or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    if kind in _PLAIN_STRINGS:
        return type(inner) is str
    if kind in _PLAIN_BOOLEANS:
        return type(inner) is bool
    if kind in _PLAIN_STRING_SETS:
        return type(inner) is list and all(type(v) is str for v in inner)
    if kind == "M":
        return type(inner) is dict and all(
            type(k) is str and plain_attribute_value(v) for k, v in inner.items()
        )
    if kind == "L":
        return type(inner) is list and all(plain_attribute_value(v) for v in inner)
    return False


_moto_serialize_structure: Callable[..., Any] | None = None  # moto's own, for the tests


def _quicker_attribute_values() -> None:
    """Answer DynamoDB's (and its streams') items without walking them through moto's
    serializer, attribute by attribute.

    moto's JSON serializer visits each `AttributeValue` as a structure of ten members and
    looks every member up under several aliases: it took a quarter of the emulator's CPU
    under `bench.throughput`, most of it on stream records and updated items. The items
    moto answers are already in wire format (`dynamo_to_dict`), and for the plain ones
    (`plain_attribute_value`) the serializer's answer is the value itself, so those are
    copied as they are; anything else (a blob, an unexpected type) takes moto's path.
    `tests/local/test_moto_serializer.py` compares both on every shape of value.
    """
    try:
        from moto.core.serialize import JSONSerializer
    except ImportError as exc:
        raise MotoInternalsMissing("moto.core.serialize.JSONSerializer") from exc
    global _moto_serialize_structure
    original: Callable[..., Any] = JSONSerializer._serialize_type_structure
    _moto_serialize_structure = original

    def serialize_structure(
        serializer: Any, serialized: Any, value: Any, shape: Any, key: str
    ) -> None:
        if key and shape.name == "AttributeValue" and plain_attribute_value(value):
            serialized[serializer.get_serialized_name(shape, key)] = value
            return
        moto_serialize = _moto_serialize_structure  # a test may put a spy there
        (original if moto_serialize is None else moto_serialize)(
            serializer, serialized, value, shape, key
        )

    JSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign,assignment]


def _remember_method_names() -> None:
    """moto finds a request's action among its handler class's methods with
    `inspect.getmembers` on every request (a tenth of a `GetItem`'s CPU); a class's
    methods are its own from import on (the emulator's patches replace methods, never add
    them), so each class's names are listed once."""
    try:
        from moto.core import responses
    except ImportError as exc:
        raise MotoInternalsMissing("moto.core.responses.method_names_from_class") from exc
    original: Callable[[object], list[str]] = responses.method_names_from_class
    known: dict[object, list[str]] = {}

    def method_names_from_class(clazz: object) -> list[str]:
        names = known.get(clazz)
        if names is None:
            names = known[clazz] = original(clazz)
        return list(names)  # a copy: the caller's to keep

    responses.method_names_from_class = method_names_from_class


def quicker_dispatch() -> None:
    """Remember which moto backend serves which host, and each handler class's method
    names (`_remember_method_names`), instead of finding them per request.

    moto's server finds the backend of every request under one lock: a listing of moto's
    package directory (a `stat` per entry, each letting other threads take the GIL, with
    the lock held) and a regex per known service. The answer depends on the host alone,
    and hosts are few (one per service and region), so it is kept. The listing is made
    once too (the first request of each host made it again: a few per start, each tens of
    milliseconds while other threads run): moto's installed modules do not change.
    """
    global _dispatch_quickened
    if _dispatch_quickened:
        return
    try:
        from moto import backends
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    except ImportError as exc:
        raise MotoInternalsMissing("moto's DomainDispatcherApplication") from exc
    if not callable(getattr(backends, "list_of_moto_modules", None)):
        raise MotoInternalsMissing("moto.backends.list_of_moto_modules")
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    original: Callable[..., Any] = DomainDispatcherApplication.get_backend_for_host
    known: dict[str, Any] = {}

    def get_backend_for_host(dispatcher: Any, host: str | None) -> Any:
        if host is None:
            return None
        if host in known:
            return known[host]
        backend = original(dispatcher, host)
        if backend is not None and len(known) < 1024:  # hosts come from requests: bounded
            known[host] = backend
        return backend

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign,assignment]
    _remember_method_names()
    _dispatch_quickened = True


def lighten_sqs() -> None:
    """Check a received message's retention without all of its queue's attributes.

    moto's `ReceiveMessage` checks each message it hands out against the queue's retention
    period through `get_queue_attributes`, which builds every attribute of the queue three
    times, each count walking every message: quadratic in the queue's length, on the
    invocations queue's eight concurrent receives. The period alone answers the same.
    """
    global _sqs_lightened
    if _sqs_lightened:
        return
    try:
        from moto.sqs import models as sqs_models
    except ImportError as exc:
        raise MotoInternalsMissing("moto.sqs.models") from exc
    backend_class = sqs_models.SQSBackend
    original: Callable[..., Any] = backend_class.is_message_valid_based_on_retention_period

    def is_message_valid_based_on_retention_period(
        backend: Any, queue_name: str, message: Any
    ) -> bool:
        period = getattr(backend.get_queue(queue_name), "message_retention_period", None)
        if type(period) is not int:  # not what moto keeps: let moto answer (or refuse)
            return bool(original(backend, queue_name, message))
        return bool(period + message.sent_timestamp / 1000 > sqs_models.unix_time())

    setattr(  # noqa: B010 - a method of moto's, replaced
        backend_class,
        "is_message_valid_based_on_retention_period",
        is_message_valid_based_on_retention_period,
    )
    _sqs_lightened = True


def serialize_sqs_queues() -> None:
    """Make each queue's message list change under its own lock, as moto's sends already do.

    moto's server answers requests from many threads. A send appends to a queue's message
    list under the queue's lock (`Queue._messages_lock`), but a delete rebuilt the list
    without the lock (it walked the list, kept every other message and then stored the new
    list), and a receive moving a message to the dead-letter queue removed it without the
    lock too. So two deletes of one queue that overlapped lost whatever was sent between
    the end of one's walk and the other's store: the later store put back a list made
    before the send, while SQS had answered the send with its MessageId. (A removal during
    a walk also made the walk skip the message after it.) The engine's event and
    invocation messages were then gone without a trace: no receive, no DLQ, nothing due.
    `DeleteMessage`(`Batch`) and `ReceiveMessage` now hold the queue's lock while they
    change its list (a long poll's wait still lets it go, as moto's own wait does)."""
    global _sqs_serialized
    if _sqs_serialized:
        return
    try:
        from moto.sqs.models import Queue, SQSBackend
    except ImportError as exc:
        raise MotoInternalsMissing("moto.sqs.models") from exc
    if "self._messages_lock = " not in inspect.getsource(Queue.__init__):
        raise MotoInternalsMissing("moto's Queue._messages_lock")
    delete: Callable[..., Any] = Queue.delete_message
    receive: Callable[..., Any] = SQSBackend.receive_message

    def delete_message(queue: Any, receipt_handle: str) -> None:
        with queue._messages_lock:
            delete(queue, receipt_handle)

    def receive_message(backend: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        with backend.get_queue(queue_name)._messages_lock:
            return receive(backend, queue_name, *args, **kwargs)

    Queue.delete_message = delete_message  # type: ignore[method-assign,assignment]
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign,assignment]
    _sqs_serialized = True


def share_botocore_loader() -> None:
    """moto lists a service's regions (when it first makes the service's backends: at an
    image's load, at the first request) through a botocore session of its own, which reads
    botocore's endpoint rules (1.2 MB of JSON, tens of milliseconds) again. It gets one on
    the engine's data loader instead (`aws.new_session`), which has them already."""
    global _loader_shared
    if _loader_shared:
        return
    try:
        from moto.core.base_backend import AccountSpecificBackend
    except ImportError as exc:
        raise MotoInternalsMissing("moto.core.base_backend") from exc
    if not callable(getattr(AccountSpecificBackend, "get_session", None)):
        raise MotoInternalsMissing("moto's AccountSpecificBackend.get_session")
    session = aws.new_session()
    AccountSpecificBackend.get_session = classmethod(lambda cls: session)  # type: ignore[method-assign,assignment]
    _share_moto_loader()
    _loader_shared = True


def _share_moto_loader() -> None:
    """moto reads each service's model (at its first request) through a new loader of its
    own, which lists botocore's ~400 service directories again (about 20 ms of CPU a
    service, four or five in a start). One loader, made once, answers every service: the
    same files, read the same way (with moto's extras), its listing cached."""
    try:
        from moto.core import loaders, utils
    except ImportError as exc:
        raise MotoInternalsMissing("moto.core.loaders") from exc
    if not callable(getattr(utils, "create_loader", None)):
        raise MotoInternalsMissing("moto.core.utils.create_loader")
    shared = loaders.create_loader()
    utils.create_loader = lambda: shared


_loader_shared = False
_sqs_serialized = False
_dynamodb_lightened = False
_dispatch_quickened = False
_sqs_lightened = False
_running: set[int] = set()  # emulators started and not stopped in this process


# moto's stream shard iterators kept (`bound_stream_iterators`): those already read from
# (a reader moved on to the next one its read handed out; a recent one may be read again,
# as AWS allows), and all of them, beyond which the oldest go whether read or not.
STREAM_ITERATORS_READ_KEPT = 1_000
STREAM_ITERATORS_KEPT = 10_000
_stream_iterators_bounded = False


def bound_stream_iterators() -> None:
    """Keep moto's stream shard iterators bounded without taking one a reader holds, and
    answer an iterator moto no longer holds as AWS answers an expired one.

    moto stores every iterator it hands out (each `GetRecords` hands out the next) and never
    lets one go: a dev server polling for hours would grow without bound. Pruned by age
    (the 200 newest of all streams), the iterator a reader held while it handled a long
    batch went as other readers polled meanwhile (the runs table's two readers, a gather of
    1,000 branches), and moto answered that reader's next read with a 500 (`KeyError`).
    Now an iterator goes once `STREAM_ITERATORS_READ_KEPT` newer ones were read after it
    was read; one never read (a reader's next) only past `STREAM_ITERATORS_KEPT` in all. An
    unknown iterator answers `ExpiredIteratorException`, as AWS answers one past its 15
    minutes, and the reader gets a new one after the last record it handled
    (`pollers.StreamPoller`), as an event source mapping does.
    """
    global _stream_iterators_bounded
    if _stream_iterators_bounded:
        return
    try:
        from moto.core.exceptions import JsonRESTError
        from moto.dynamodbstreams.models import DynamoDBStreamsBackend
    except ImportError as exc:
        raise MotoInternalsMissing("moto's DynamoDBStreamsBackend.get_records") from exc

    def get_records(backend: Any, iterator_arn: str, limit: int) -> dict[str, Any]:
        iterators: dict[str, Any] = backend.shard_iterators
        iterator = iterators.get(iterator_arn)
        if iterator is None:
            raise JsonRESTError(
                "ExpiredIteratorException",
                "Iterator expired. The iterator was created more than 15 minutes ago, "
                "or the emulator no longer holds it.",
            )
        answer: dict[str, Any] = iterator.get(limit)
        read = _read_stream_iterators(backend)
        read.pop(iterator_arn, None)
        read[iterator_arn] = None  # an ordered set: the oldest read first
        _prune_stream_iterators(iterators, read)
        return answer

    original: Callable[..., Any] = DynamoDBStreamsBackend.get_shard_iterator

    def get_shard_iterator(backend: Any, *args: Any, **kwargs: Any) -> Any:
        iterator = original(backend, *args, **kwargs)
        _prune_stream_iterators(backend.shard_iterators, _read_stream_iterators(backend))
        return iterator

    DynamoDBStreamsBackend.get_records = get_records  # type: ignore[method-assign,assignment]
    DynamoDBStreamsBackend.get_shard_iterator = get_shard_iterator  # type: ignore[method-assign,assignment]
    _stream_iterators_bounded = True


def _read_stream_iterators(backend: Any) -> dict[str, None]:
    """The iterators of `backend` read from, the oldest read first (an ordered set)."""
    read: dict[str, None] = backend.__dict__.setdefault("ezgh_read_iterators", {})
    return read


def _prune_stream_iterators(iterators: dict[str, Any], read: dict[str, None]) -> None:
    """Drop the oldest read iterators past `STREAM_ITERATORS_READ_KEPT`, then the oldest of
    all past `STREAM_ITERATORS_KEPT` (in insertion order: the order moto issued them)."""
    while len(read) > STREAM_ITERATORS_READ_KEPT:
        oldest = next(iter(read))
        del read[oldest]
        iterators.pop(oldest, None)
    excess = len(iterators) - STREAM_ITERATORS_KEPT
    if excess > 0:
        for arn in list(itertools.islice(iterators, excess)):
            del iterators[arn]
            read.pop(arn, None)


class Emulator:
    """moto's server on 127.0.0.1 (`local.moto_server`) and the environment that points
    boto3 at it."""

    def __init__(self, port: int = 0, state_dir: Path | None = None) -> None:
        """`state_dir`: keep moto's state there (a journal, `local.persistence`) and restore
        it on `start()`; None keeps it in memory only."""
        self._port = port
        self._server: Any = None
        self.state_dir = state_dir
        self.journaling: JournalingApp | None = None
        self.restored = Restored()
        self._restored_whole = False  # the state dir's state is all in moto: `stop` saves it
        # Kept with the image of a clean stop (`keep`), and what the image loaded at this
        # start had so kept (empty after a replay or a reset): see `local.image.Loaded`.
        self._kept: dict[str, Any] = {}
        self.adoptable: dict[str, Any] = {}
        self._later: image.Later | None = None  # the image's state installed after the rest
        self._checkpoints: Checkpointer | None = None  # images while running, once serving
        self.checkpoints_taken = 0  # images written while running (`checkpoint`)
        self._saved_env: dict[str, str | None] = {}
        self.endpoint_url = ""
        self.dynamodb_url = ""  # DynamoDB Local's, or "" for moto's DynamoDB
        # What the gate lets in (`local.emulator_gate`): the engine's processes get them.
        self.access_key_id = self._secret_access_key = ""

    def start(self, before_restore: Callable[[], None] | None = None) -> str:
        """Start the server on a free loopback port, point the process at it, restore the
        state dir's state; return its URL. `before_restore` runs once the process points at
        the server, before the restore (work to overlap with it)."""
        self.access_key_id, self._secret_access_key = new_credentials()  # this start's own
        self._kept, self.adoptable = {}, {}
        journal: Journal | None = None
        if self.state_dir is not None:
            if os.environ.get(ENV_DYNAMODB_URL):
                raise ValueError(
                    f"a state dir keeps moto's DynamoDB only; unset {ENV_DYNAMODB_URL} to use one"
                )
            journal = Journal(self.state_dir / JOURNAL_NAME)
        # moto's server logs every request through werkzeug at INFO: noise in tests and dev.
        werkzeug = logging.getLogger("werkzeug")
        if werkzeug.level == logging.NOTSET:
            werkzeug.setLevel(logging.WARNING)
        server: Any
        gate = self._gate
        if journal is None:
            server = MotoServer("127.0.0.1", self._port, gate=gate)
        else:
            server, self.journaling = serve_journaled("127.0.0.1", self._port, journal, gate)
        server.start()
        host, port = server.get_host_and_port()
        self._server = server
        self.endpoint_url = f"http://{host}:{port}"
        # moto keeps its state in module globals, shared by every server in the process: a
        # second emulator would see the first one's tables. Start from nothing.
        if _running:
            log.warning("another local emulator is running in this process; its state is wiped")
        _running.add(id(self))
        self._post_reset()
        stream_wakeup.install()
        serialize_dynamodb()
        lighten_dynamodb()
        bound_stream_iterators()
        quicker_dispatch()
        lighten_sqs()
        serialize_sqs_queues()
        share_botocore_loader()
        env: dict[str, str | None] = {
            **_FIXED_ENV,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self._secret_access_key,
            "AWS_SESSION_TOKEN": None,  # not the user's (it would name their real session)
        }
        for name in _DEFAULT_ENV:
            env.setdefault(name, os.environ.get(name) or _DEFAULT_ENV[name])
        for name in list(os.environ):
            if name.startswith(_REMOVED_ENV_PREFIXES) or name in _REMOVED_ENV:
                env[name] = None
        self.dynamodb_url = loopback_url(os.environ.get(ENV_DYNAMODB_URL, ""))
        if self.dynamodb_url:
            env.update(dict.fromkeys(DYNAMODB_ENDPOINT_ENV, self.dynamodb_url))
        stream_wakeup.external = bool(self.dynamodb_url)
        self.apply_env(env)
        if self.dynamodb_url:
            self._wipe_dynamodb_local()  # tables a previous runtime left in the same instance
        if before_restore is not None:
            before_restore()
        if self.journaling is not None:  # (in process: no client of the server's is used)
            self._restore(self.journaling)
        log.debug("moto server on %s", self.endpoint_url)
        return self.endpoint_url

    def _restore(self, journaling: JournalingApp) -> None:
        """moto's state as the state dir keeps it: the newest image whose prefix the
        journal still begins with (`local.image`), then a replay of the records after that
        prefix; else a replay of the whole journal (and the snapshot before it)."""
        began = clock.monotonic()
        journal = journaling.journal
        try:
            loaded = image.load(journal.path.with_name(image.IMAGE_NAME), journal.holds_prefix)
        except Exception:  # installed in part, perhaps: moto from nothing, then the replay
            log.warning("could not install the image of the state", exc_info=True)
            self._post_reset()
            loaded = None
        if loaded is not None:
            tail = journal.open_after(loaded.offset)
            self.adoptable = dict(loaded.extras)
            self._later = loaded.later
            if loaded.later is not None and _requests_of(tail, loaded.later.services):
                loaded.later.install()  # under what the tail adds to it, as a replay has it
            restored = restored_from(loaded.kept, loaded.requests, loaded.services)
            self.restored = replay(journaling.app, tail, into=restored)
            journaling.imaged_at = loaded.offset
            journaling.image_size = _size(journal.path.with_name(image.IMAGE_NAME))
            how = f"an image and the {len(tail)} record(s) journaled after it"
        else:
            self.restored = replay(journaling.app, journal.open())
            how = f"a replay of {journal.path} ({self.restored.refused} refused)"
        for record in self.restored.kept:  # for the next snapshot
            journaling.remember(record)
        self._restored_whole = True  # what `stop` may make an image of
        if not self.restored.empty:
            log.info(
                "restored %d request(s) in %.2fs from %s",
                self.restored.requests,
                clock.monotonic() - began,
                how,
            )

    def _image_of_now(self, journaling: JournalingApp) -> tuple[bytes, image.JournalMark] | None:
        """The image of moto's state as the journal's prefix written so far has it (the
        caller holds the journal's lock and holds back every request), or None when the
        journal holds requests of a service the image does not keep."""
        journal = journaling.journal
        services = sorted(self.restored.services | journal.services_written)
        others = [s for s in services if s not in image.SERVICES]
        if others:  # the image would lose their state: the next start replays
            log.info("no image of the state: the journal has requests of %s", others)
            return None
        kept = list(journaling.checkpoints.values())
        if journaling.mappings is not None:
            kept.append(journaling.mappings)
        requests = self.restored.requests + journal.changes_written
        mark = journal.mark(journal.size)
        data = image.capture(mark, requests, kept, services, self._kept, self._later)
        return data, mark

    def _save_image(self, journaling: JournalingApp) -> None:
        """The image of a clean stop (nothing runs any more), for the next start: only when
        every service the journal holds requests of is one the image keeps."""
        path = journaling.journal.path.with_name(image.IMAGE_NAME)
        began = clock.monotonic()
        try:
            with journaling.lock:
                journaling.journal.sync_now()  # the prefix it names is durable first
                taken = self._image_of_now(journaling)
                if taken is None:
                    image.discard(path)
                    return
                data, _ = taken
                image.install_file(image.write_temporary(path, data), path)
        except Exception:  # the journal has it all: the next start replays it
            log.warning("could not write the image of this stop to %s", path, exc_info=True)
            image.discard(path)
            return
        log.info(
            "saved the state's image (%d bytes) in %.2fs", len(data), clock.monotonic() - began
        )

    def checkpoint(self, *, if_due: bool = False) -> bool:
        """Write an image of the state while the engine runs (`local.checkpoints`): every
        request held back while moto's objects are pickled, so the image is of exactly the
        journal's prefix written by then; the file written once they go on. A start after
        a crash loads it and replays only what was journaled after. False (logged) when no
        image was written: the older one, or none, stays. `if_due`: only if the journal
        grew enough since the last image (`JournalingApp.image_growth`: the requests that
        asked for this one while the last was being taken did not)."""
        journaling = self.journaling
        if journaling is None or not self._restored_whole:
            return False
        journal = journaling.journal
        path = journal.path.with_name(image.IMAGE_NAME)
        began = clock.monotonic()
        try:
            with journaling.hold.closed():
                closed = clock.monotonic()
                with journaling.lock:
                    if if_due and not journaling.image_is_due():
                        return False
                    journaling.imaged_at = journal.size  # a failure waits for as much growth
                    epoch, position = journal.epoch, journal.position
                    taken = self._image_of_now(journaling)
                held = clock.monotonic() - closed
            if taken is None:
                return False
            data, mark = taken
            journal.wait_durable(position)  # the prefix it names is durable first
            temporary = image.write_temporary(path, data)
            with journaling.lock:  # not of a journal a reset or compaction replaced meanwhile
                if journal.epoch != epoch or self.journaling is not journaling:
                    temporary.unlink(missing_ok=True)
                    return False
                image.install_file(temporary, path, sync=False)
                journaling.image_size = len(data)
            image.sync_directory(path)
        except Exception:  # the journal has it all; an older image still names a prefix
            log.warning("could not take an image of the running state", exc_info=True)
            return False
        self.checkpoints_taken += 1
        log.info(
            "image of the journal's first %d bytes (%d bytes) in %.2fs, requests held %.3fs",
            mark.size,
            len(data),
            clock.monotonic() - began,
            held,
        )
        return True

    def restore_later(self) -> None:
        """Put back, in the background, the state the image holds of the services it
        restores last (`image.LATER`); a request for one of them waits for it meanwhile.
        From now on, take images while running as the journal grows (`checkpoint`): not
        during the start, whose CPU they would share. The runtime calls this once it serves
        everything else."""
        later = self._later
        if later is not None and later.pending:
            threading.Thread(target=later.install, name="image-later", daemon=True).start()
        journaling = self.journaling
        if journaling is not None and self._checkpoints is None and journaling.image_bytes:
            self._checkpoints = Checkpointer(lambda: self.checkpoint(if_due=True))
            self._checkpoints.start()
            with journaling.lock:
                journaling.image_due = self._checkpoints.due
                if journaling.image_is_due():
                    self._checkpoints.due()

    def keep(self, name: str, value: Any) -> None:
        """Keep `value` (picklable) with the images of this life (its checkpoints, its
        clean stop's), for the next start from one of them (`adoptable`): facts about the
        state it holds that what is journaled after it does not undo."""
        self._kept[name] = value

    def apply_env(self, env: Mapping[str, str | None]) -> None:
        """Set (or, for None, remove) variables, remembering the old values for `stop()`."""
        aws_changed = False
        for name, value in env.items():
            if name not in self._saved_env:
                self._saved_env[name] = os.environ.get(name)
            aws_changed |= name.startswith("AWS_") and os.environ.get(name) != value
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if aws_changed:  # building clients is slow (S3's model alone is ~0.2 s): keep them
            aws.reset_clients()
        config.reset_settings()

    def reset(self) -> None:
        """Wipe every resource and item in moto, and the engine's tables in DynamoDB Local
        (the caller provisions again), and the journal with them."""
        if self._later is not None:  # of the state wiped now
            self._later.discard()
            self._later = None
        if self.journaling is not None:
            with self.journaling.lock:
                self.journaling.clear()
                self._post_reset()
            self.restored = Restored()
        else:
            self._post_reset()
        self._kept, self.adoptable = {}, {}  # of the state just wiped
        if self.dynamodb_url:
            self._wipe_dynamodb_local()
        # Same endpoint, same credentials: the cached boto3 clients stay valid.
        config.reset_settings()

    def _gate(self, app: Any) -> EmulatorGate:
        return EmulatorGate(_RestoresLater(app, lambda: self._later), self.access_key_id)

    def _post_reset(self) -> None:
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/reset",
            method="POST",
            headers={KEY_HEADER: self.access_key_id},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()

    def _wipe_dynamodb_local(self) -> None:
        """Delete the local runtime's tables (`resources.NAME_PREFIX`) from DynamoDB Local:
        in memory a delete is immediate, and a new table comes with a new stream."""
        ddb = aws.client("dynamodb")
        for page in ddb.get_paginator("list_tables").paginate():
            for name in page.get("TableNames", []):
                if name.startswith(f"{NAME_PREFIX}-"):
                    ddb.delete_table(TableName=name)

    def stop(self) -> None:
        """Stop the server and give the process its environment back."""
        if self._server is not None:
            self._server.stop()
            self._server = None
            _running.discard(id(self))
        if self._checkpoints is not None:  # (none from now on: the stop writes the last)
            self._checkpoints.stop()
            self._checkpoints = None
        if self.journaling is not None:
            self.journaling.image_due = None
            if self._restored_whole:
                self._save_image(self.journaling)
            self._restored_whole = False
            self._later = None
            self.journaling.journal.close()
            self.journaling = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        stream_wakeup.external = False
        aws.reset_clients()
        config.reset_settings()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _requests_of(records: list[dict[str, Any]], services: frozenset[str]) -> bool:
    """Whether any of `records` is a request to one of `services`."""
    return any(r.get("t") == "http" and r.get("s") in services for r in records)


class _RestoresLater:
    """WSGI middleware (behind the gate): a request for a service whose state the image
    puts back last (`image.Later`) puts it back first, if the background has not yet."""

    def __init__(self, app: Any, later: Callable[[], image.Later | None]) -> None:
        self.app = app
        self._later = later

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        later = self._later()
        if later is not None and later.pending:
            signer = signed_by(environ.get("HTTP_AUTHORIZATION"))
            if signer is None or signer[1] in later.services:
                later.install()
        return self.app(environ, start_response)


def loopback_url(url: str) -> str:
    """`url` ("" stays "") if it is an http(s) URL of a loopback host, else ValueError: the
    local runtime never sends its data anywhere else."""
    if not url:
        return ""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or parsed.hostname not in (
        "127.0.0.1",
        "localhost",
        "::1",
    ):
        raise ValueError(f"{ENV_DYNAMODB_URL} must be a loopback http URL, not {url!r}")
    return url.rstrip("/")


_sqs_clock_saved: Any = None


def sqs_on_engine_clock(enabled: bool = True) -> None:
    """Make moto's SQS delays and visibility timeouts follow `ezgh_engine.clock` (tests).

    moto times them by the wall clock, so a test that skips time with a `SkipClock` still
    waits for real for a delayed message, a held one or a visibility timeout. With this on,
    skipping the engine clock skips those too (the fault suite relies on it to see redelivered
    messages without sleeping). Off by default; `enabled=False` puts moto's clock back.
    """
    global _sqs_clock_saved
    from moto.sqs import models

    if enabled and _sqs_clock_saved is None:
        from ezgh_engine import clock

        _sqs_clock_saved = models.unix_time_millis

        def engine_millis(dt: Any = None) -> float:
            if dt is not None:
                return float(_sqs_clock_saved(dt))
            return clock.now().timestamp() * 1000.0

        models.unix_time_millis = engine_millis
    elif not enabled and _sqs_clock_saved is not None:
        models.unix_time_millis = _sqs_clock_saved
        _sqs_clock_saved = None


def sqs_next_due_ms() -> float | None:
    """The earliest time (ms, moto's clock) a delayed or in-flight message of any queue in
    the emulator becomes visible, or None (for tests that skip time to it)."""
    from moto.sqs.models import sqs_backends

    now = sqs_clock_ms()
    due: list[float] = []
    for queue in list(sqs_backends[ACCOUNT_ID][REGION].queues.values()):
        for message in list(queue._messages):
            for when in (message.visible_at, message.delayed_until):
                if when and when > now:
                    due.append(float(when))
    return min(due) if due else None


def sqs_clock_ms() -> float:
    """moto SQS's notion of now, in ms."""
    from moto.sqs import models

    return float(models.unix_time_millis())
