"""Record every AWS request per Lambda function, for checking them against the IAM policies.

When `EZGH_AWS_CALL_LOG` names a directory, each request the engine's boto3 clients make on
behalf of a function is appended as one JSON line `{"function", "service", "operation",
"params"}` to `<dir>/<function>-<pid>.jsonl`, with `params` trimmed to what names the resource
(table, index, queue, bucket and key, schedule and group, function, secret). tests/infra's IAM
test evaluates them against the synthesized template's policies.

Which function a request belongs to:

- `install(key)`: a process (or execution environment) serving one function only;
- `running(key)`: around one invocation in a thread (the local runtime's `Invoker`), so
  functions sharing a process are told apart; it wins over `install`.

Requests outside any function (the runtime provisioning moto, pollers standing in for event
source mappings, tests' own reads) are not recorded: no function's role makes them. Without
the variable nothing is observed, so the cost is zero.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ezgh_engine.adapters import aws

ENV_CALL_LOG = "EZGH_AWS_CALL_LOG"

_current: ContextVar[str | None] = ContextVar("ezgh_call_log_function", default=None)
_process_function: str | None = None
_lock = threading.Lock()
_observing: dict[str, Any] = {}  # {"dir": Path} once the observer is attached

# The parameters that name what a request acts on (what an IAM resource or condition reads).
_NAMING = (
    "TableName",
    "IndexName",
    "QueueUrl",
    "QueueName",
    "Bucket",
    "Key",
    "Prefix",
    "Name",
    "GroupName",
    "FunctionName",
    "EventSourceArn",
    "UUID",
    "SecretId",
    "RoleArn",  # sts:AssumeRole (pull workers' queue credentials)
    "StreamArn",
)


def install(function_key: str) -> None:
    """Attribute this process's requests to `function_key` (one function per process)."""
    global _process_function
    _process_function = function_key
    _ensure_observer()


@contextlib.contextmanager
def running(function_key: str) -> Iterator[None]:
    """Attribute the requests made in this context (one invocation) to `function_key`."""
    _ensure_observer()
    token = _current.set(function_key)
    try:
        yield
    finally:
        _current.reset(token)


def uninstall() -> None:
    """Stop recording and forget `install`'s function (tests)."""
    global _process_function
    _process_function = None
    with _lock:
        stop = _observing.pop("stop", None)
        _observing.clear()
    if stop is not None:
        stop()


def _ensure_observer() -> None:
    directory = os.environ.get(ENV_CALL_LOG)
    if not directory:
        return
    with _lock:
        if _observing.get("dir") == Path(directory):
            return
        if "stop" in _observing:
            _observing.pop("stop")()
        Path(directory).mkdir(parents=True, exist_ok=True)
        _observing["dir"] = Path(directory)
    stop = aws.observe(_record)
    with _lock:
        _observing["stop"] = stop


def trim(service: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of a request that name the resources it acts on."""
    kept = {k: params[k] for k in _NAMING if k in params}
    target = params.get("Target")
    if isinstance(target, dict):  # Scheduler: the role it passes and the queue it targets
        kept["Target"] = {k: target[k] for k in ("Arn", "RoleArn") if k in target}
    items = params.get("TransactItems")
    if isinstance(items, list):  # [{"Put": {"TableName": ...}}] -> [{"Put": name}]
        kept["TransactItems"] = [
            {op: body.get("TableName") for op, body in item.items() if isinstance(body, dict)}
            for item in items
        ]
    requests = params.get("RequestItems")
    if isinstance(requests, dict):  # batch calls: the tables and, for writes, the kinds
        kept["RequestItems"] = {
            table: sorted({k for r in body for k in r}) if isinstance(body, list) else []
            for table, body in requests.items()
        }
    delete = params.get("Delete")
    if service == "s3" and isinstance(delete, dict):  # DeleteObjects
        kept["Keys"] = [o.get("Key") for o in delete.get("Objects", [])]
    return kept


def _record(record: dict[str, Any]) -> None:
    function = _current.get() or _process_function
    directory = _observing.get("dir")
    if function is None or directory is None:
        return
    line = {
        "function": function,
        "service": record["service"],
        "operation": record["operation"],
        "params": trim(record["service"], record["operation"], record.get("params") or {}),
    }
    text = json.dumps(line, default=str, sort_keys=True) + "\n"
    with _lock, open(directory / f"{function}-{os.getpid()}.jsonl", "a") as out:
        out.write(text)
