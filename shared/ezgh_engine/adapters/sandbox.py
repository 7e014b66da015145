"""The interpreter's call to the `sandbox` function, where a flow's user-directed code runs
(`interpreter/usercode.py`): a synchronous Lambda invoke, so no URL leads there.

A request or an answer larger than Lambda's 6 MB is refused before it is sent
(`PayloadTooLarge`). A sandbox that could not answer (unconfigured, throttled, timed out,
out of memory) is `SandboxUnavailable`, retryable: the node's step tries again.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ezgh_engine.adapters import aws
from ezgh_engine.errors import EngineError, PayloadTooLarge
from ezgh_engine.topology import SANDBOX_FUNCTION

ENV_SANDBOX_FUNCTION = SANDBOX_FUNCTION.sync_invoke.env_var if SANDBOX_FUNCTION.sync_invoke else ""
MAX_REQUEST_BYTES = 6 * 1000 * 1000  # Lambda's synchronous payload limit
# Longer than the function's timeout: its own limit answers first.
READ_TIMEOUT_SECONDS = SANDBOX_FUNCTION.timeout_seconds + 15


class SandboxUnavailable(EngineError):
    """The sandbox did not answer (a retry may help)."""

    status, code = 503, "sandbox_unavailable"
    retryable = True


def call(request: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's answer to `request` (`{"ok": …}` or `{"error": {kind, message}}`)."""
    payload = json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode()
    if len(payload) > MAX_REQUEST_BYTES:
        raise PayloadTooLarge(
            f"the node's input and config are {len(payload)} bytes; the sandbox takes at most "
            f"{MAX_REQUEST_BYTES}"
        )
    function = os.environ.get(ENV_SANDBOX_FUNCTION)
    if not function:
        raise SandboxUnavailable(f"no sandbox function is configured ({ENV_SANDBOX_FUNCTION})")
    try:
        answer = aws.client("lambda", read_timeout=READ_TIMEOUT_SECONDS).invoke(
            FunctionName=function, InvocationType="RequestResponse", Payload=payload
        )
        body = answer["Payload"].read()
    except Exception as err:  # throttled, unreachable, timed out: the step retries
        raise SandboxUnavailable(f"the sandbox did not answer: {type(err).__name__}") from None
    if answer.get("FunctionError"):
        raise SandboxUnavailable(f"the sandbox failed: {body[:300]!r}")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise SandboxUnavailable("the sandbox answered something that is not an object")
    return data
