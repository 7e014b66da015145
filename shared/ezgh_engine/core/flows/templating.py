"""JMESPath templating of node configs (no Python eval anywhere).

Expressions are evaluated over the scope `{"input": <the job's input>, "in": <the node's
input>, "trackingId": ...}`. A config string that is exactly `{{ expr }}` takes the
expression's value (any JSON); `{{ expr }}` inside a longer string is replaced by its text
(a string as is, `null` as nothing, anything else as compact JSON).
"""

from __future__ import annotations

import json
import re
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from ezgh_engine.core.flows import bounded

_EXACT = re.compile(r"^\{\{\s*(.+?)\s*\}\}$", re.DOTALL)
_INNER = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.DOTALL)


class TemplateError(ValueError):
    """An expression that does not parse or cannot be evaluated; names the expression."""


def scope(job_input: Any, node_input: Any, tracking_id: str) -> dict[str, Any]:
    """The value every expression of a node sees."""
    return {"input": job_input, "in": node_input, "trackingId": tracking_id}


def compile_expression(expression: str) -> Any:
    """The parsed expression; `TemplateError` when it does not parse or calls a function
    JMESPath does not have (or with the wrong number of arguments)."""
    try:
        compiled = jmespath.compile(expression)
    except JMESPathError as err:
        raise TemplateError(f"invalid JMESPath expression {expression!r}: {err}") from None
    problem = bounded.check_functions(compiled.parsed)
    if problem:
        raise TemplateError(f"invalid JMESPath expression {expression!r}: {problem}")
    return compiled


def evaluate(expression: str, data: Any) -> Any:
    """The value of one JMESPath expression over `data`, within the bounds of
    `core.flows.bounded` (size of what it builds, steps, time)."""
    compiled = compile_expression(expression)
    try:
        return bounded.search(compiled.parsed, data)
    except JMESPathError as err:
        raise TemplateError(f"JMESPath expression {expression!r} failed: {err}") from None
    except bounded.LimitExceeded as err:
        raise TemplateError(f"JMESPath expression {expression!r} stopped: {err}") from None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def render(value: Any, data: Any) -> Any:
    """`value` with every template in its strings replaced (dicts and lists walked)."""
    if isinstance(value, str):
        exact = _EXACT.fullmatch(value)
        if exact and "{{" not in exact.group(1):
            return evaluate(exact.group(1), data)
        return _INNER.sub(lambda m: _text(evaluate(m.group(1), data)), value)
    if isinstance(value, dict):
        return {k: render(v, data) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, data) for v in value]
    return value


def expressions(value: Any) -> list[str]:
    """Every template expression in `value` (to check at commit time that each parses)."""
    if isinstance(value, str):
        return [m.group(1) for m in _INNER.finditer(value)]
    if isinstance(value, dict):
        return [e for v in value.values() for e in expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in expressions(v)]
    return []
