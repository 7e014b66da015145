"""The sandbox Lambda: a flow's user-directed code (JMESPath, `http.request`), away from the
engine's secrets and tables (see `ezgh_engine.interpreter.usercode`).

No function URL: only the `flows` function's role may invoke it (`lambda:InvokeFunction`),
and its own role grants nothing but its logs. The event is the interpreter's request, the
answer its result.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine.interpreter.usercode import run


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer one request of the interpreter."""
    return run(event if isinstance(event, dict) else {})
