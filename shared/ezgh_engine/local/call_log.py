"""Record every AWS request an execution environment makes, tagged with its function.

With `EZGH_AWS_CALL_LOG` naming a directory, each local execution environment of function F
calls `install(F)` once at its start; from then on each boto3 request of the engine's clients
is appended as one JSON line `{"function", "service", "operation", "params"}` to
`<dir>/<F>-<pid>.jsonl` (the IAM test checks them against the template's policies).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from ezgh_engine.adapters import aws

ENV_CALL_LOG = "EZGH_AWS_CALL_LOG"

_lock = threading.Lock()
_installed: set[str] = set()


def install(function_key: str) -> None:
    """Append this process's AWS requests to the call log as `function_key` (no-op without
    `EZGH_AWS_CALL_LOG`, and when already installed for that key in this process)."""
    directory = os.environ.get(ENV_CALL_LOG)
    if not directory:
        return
    with _lock:
        if function_key in _installed:
            return
        _installed.add(function_key)
    path = Path(directory) / f"{function_key}-{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)

    def record(call: dict[str, Any]) -> None:
        line = {
            "function": function_key,
            "service": call["service"],
            "operation": call["operation"],
            "params": call["params"],
        }
        with _lock, path.open("a") as file:
            file.write(json.dumps(line, default=str) + "\n")

    aws.observe(record)
