"""What happened to each run's messages and run-item records, for a loss report.

The fault suite's emulator (moto) runs in the test process, so its backends can be watched
directly: every SQS send, receive, visibility change and delete of a message naming a run,
every stream record of a run item (its seq and lease fields, old and new), and which of those
records the local stream reader handed to the stream function. A run reported lost then says
whether its owed invocation was never asked for, never sent, or sent and dropped.

Test-only instrumentation: `install()` once per process, `clear()` per batch, `of(run_id)`.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any

from ezgh_engine import clock

_lock = threading.Lock()
_lines: defaultdict[str, list[str]] = defaultdict(list)
_message_runs: dict[str, str] = {}  # SQS message ID -> run ID
_installed = False
MAX_LINES = 400  # per run


def _note(run_id: str, text: str) -> None:
    with _lock:
        lines = _lines[run_id]
        if len(lines) < MAX_LINES:
            lines.append(f"{clock.iso(clock.now())} {text}")


def clear() -> None:
    with _lock:
        _lines.clear()
        _message_runs.clear()


def dump_all(path: str, label: str) -> None:
    """Append every run's history to `path` (EZGH_FAULTS_HISTORY: a loop keeps them all)."""
    with _lock:
        text = "".join(f"== {label} {r}\n" + "\n".join(ls) + "\n" for r, ls in _lines.items())
    with open(path, "a") as out:
        out.write(text)


def of(run_id: str) -> str:
    """The run's history, one event a line."""
    with _lock:
        return "\n".join(_lines.get(run_id, ()))


def _summary(body: str) -> tuple[str, str] | None:
    """(run ID, short text) of a message body naming a run, else None."""
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    if isinstance(decoded, dict) and "requestPayload" in decoded:
        decoded = {**decoded["requestPayload"], "via": "on-failure record"}
    if not isinstance(decoded, dict) or not decoded.get("runId"):
        return None
    rest = {k: v for k, v in decoded.items() if k != "runId"}
    return str(decoded["runId"]), json.dumps(rest, separators=(",", ":"))


def _queue(name: str) -> str:
    return name.rsplit("-", 1)[-1] if "lambda-async" not in name else "async:" + name[-8:]


def _run_fields(image: Any) -> str:
    if image is None:
        return "-"
    attrs = image.attrs
    values = []
    for name in ("status", "invokeSeq", "handledSeq", "leaseUntil", "epoch", "version"):
        value = attrs.get(name)
        values.append(f"{name}={value.value if value is not None else None}")
    return " ".join(values)


def install() -> None:
    """Watch moto's SQS and DynamoDB stream in this process (idempotent)."""
    global _installed
    if _installed:
        return
    from ezgh_engine.local.pollers import StreamPoller
    from moto.dynamodb.models.table import StreamShard
    from moto.sqs.models import Queue, SQSBackend

    send = SQSBackend.send_message

    def send_message(backend: Any, queue_name: str, message_body: str, *a: Any, **kw: Any) -> Any:
        message = send(backend, queue_name, message_body, *a, **kw)
        summary = _summary(message_body)
        if summary is not None:
            run_id, text = summary
            with _lock:
                _message_runs[message.id] = run_id
            delay = kw.get("delay_seconds", a[1] if len(a) > 1 else None)
            _note(run_id, f"sqs send {_queue(queue_name)} {message.id[:8]} {text} delay={delay}")
        return message

    receive = SQSBackend.receive_message

    def receive_message(backend: Any, queue_name: str, *a: Any, **kw: Any) -> Any:
        got = receive(backend, queue_name, *a, **kw)
        for message in got:
            run_id = _message_runs.get(message.id)
            if run_id:
                _note(
                    run_id,
                    f"sqs receive {_queue(queue_name)} {message.id[:8]} "
                    f"count={message.approximate_receive_count}",
                )
        return got

    change = SQSBackend.change_message_visibility

    def change_message_visibility(
        backend: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
    ) -> Any:
        queue = backend.get_queue(queue_name)
        found = [m for m in list(queue._messages) if m.had_receipt_handle(receipt_handle)]
        run_id = _message_runs.get(found[0].id) if found else None
        try:
            return change(backend, queue_name, receipt_handle, visibility_timeout)
        except Exception as exc:
            if run_id:
                _note(run_id, f"sqs visibility {found[0].id[:8]} {visibility_timeout} FAILED {exc}")
            raise
        finally:
            if run_id:
                _note(run_id, f"sqs visibility {found[0].id[:8]} {visibility_timeout}")

    delete = Queue.delete_message

    def delete_message(queue: Any, receipt_handle: str) -> Any:
        found = [m for m in list(queue._messages) if m.had_receipt_handle(receipt_handle)]
        current = found and found[0].receipt_handle == receipt_handle
        delete(queue, receipt_handle)
        run_id = _message_runs.get(found[0].id) if found else None
        if run_id:
            _note(run_id, f"sqs delete {found[0].id[:8]} {'' if current else 'STALE receipt'}")

    add_message = Queue.add_message

    def queue_add_message(queue: Any, message: Any) -> None:
        add_message(queue, message)
        run_id = _message_runs.get(message.id)
        if run_id and queue.name.endswith("-dlq"):
            _note(run_id, f"sqs MOVED TO {queue.name} {message.id[:8]}")

    add = StreamShard.add

    def stream_add(shard: Any, old: Any, new: Any) -> None:
        add(shard, old, new)
        item = new if new is not None else old
        sk = item.attrs.get("sk") if item is not None else None
        if sk is None or sk.value != "RUN":
            return
        record = shard.items[-1].record if shard.items else {}
        seq = record.get("dynamodb", {}).get("SequenceNumber", "?")
        run_id = str(item.attrs["id"].value) if "id" in item.attrs else "?"
        _note(run_id, f"stream {seq[-5:]} old[{_run_fields(old)}] new[{_run_fields(new)}]")

    process = StreamPoller._process

    def stream_process(poller: Any, records: list[dict[str, Any]], replay: bool = False) -> None:
        for record in records:
            image = record.get("dynamodb", {}).get("NewImage") or {}
            if image.get("sk", {}).get("S") == "RUN":
                run_id = image.get("id", {}).get("S", "?")
                seq = str(record.get("dynamodb", {}).get("SequenceNumber", "?"))
                _note(run_id, f"stream handed {seq[-5:]}{' (replay)' if replay else ''}")
        process(poller, records, replay)

    SQSBackend.send_message = send_message  # type: ignore[method-assign,assignment]
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign,assignment]
    SQSBackend.change_message_visibility = change_message_visibility  # type: ignore[method-assign,assignment]
    Queue.delete_message = delete_message  # type: ignore[method-assign,assignment]
    Queue.add_message = queue_add_message  # type: ignore[method-assign,assignment]
    StreamShard.add = stream_add  # type: ignore[method-assign,assignment]
    StreamPoller._process = stream_process  # type: ignore[method-assign,assignment]
    _installed = True
