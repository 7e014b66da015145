"""JMESPath evaluation with bounds: on the size of the values it builds, on its steps and on
its time, so a user's expression fails fast with a message naming the limit instead of
taking the memory or the time of the function that runs it.

An expression builds values by multi-selects (`[a, b]`, `{a: a}`), projections, flattens,
slices and functions. Those values share structure (`[@, @]` holds its input twice, not a
copy), so building them is cheap while their JSON, which is what a node's output becomes,
doubles with every such stage: 21 stages of `[@, @]` over a 375-byte input are 12.5 MB of
JSON from a few kilobytes of Python objects. Each built value is therefore measured as the
JSON it stands for (`Sizer`: memoized by identity, so a shared part is measured once and
counted as often as it appears) and refused past `MAX_VALUE_BYTES`, before anything
serializes it. Every node of the expression tree visited is a step (functions' expression
arguments included: `map`, `sort_by`), at most `MAX_STEPS`; the clock is read every 1024
steps against `MAX_SECONDS`.

Also: the functions an expression may call (`check_functions`), checked when a graph is
committed, so an unknown name or a wrong number of arguments never waits for a job.
"""

from __future__ import annotations

import math
from typing import Any

from jmespath import functions as jp_functions
from jmespath.visitor import Options, TreeInterpreter

from ezgh_engine import clock

MAX_VALUE_BYTES = 4 * 1024 * 1024
MAX_STEPS = 250_000
MAX_SECONDS = 5.0
_CLOCK_EVERY = 1024
# The expression nodes whose result is a value they built (the rest pass values through).
_BUILDERS = frozenset(
    {
        "multi_select_list",
        "multi_select_dict",
        "projection",
        "value_projection",
        "filter_projection",
        "flatten",
        "slice",
        "function_expression",
    }
)
FUNCTIONS: dict[str, Any] = dict(jp_functions.Functions.FUNCTION_TABLE)


class LimitExceeded(Exception):
    """An evaluation went past one of its bounds; the message names the bound."""


class Sizer:
    """The size of a JSON value as text, measured once per object (by identity; the
    objects are kept alive so an identity is never reused while the measure holds)."""

    def __init__(self) -> None:
        self._sizes: dict[int, int] = {}
        self._kept: list[Any] = []

    def size(self, value: Any) -> int:
        if isinstance(value, str):
            return len(value) + 2
        if isinstance(value, bool) or value is None:
            return 5
        if isinstance(value, int):
            return max(1, math.ceil(value.bit_length() * 0.302)) + 1
        if isinstance(value, float):
            return 24
        if not isinstance(value, list | dict):
            return 8
        known = self._sizes.get(id(value))
        if known is not None:
            return known
        if isinstance(value, list):
            total = 2 + sum(self.size(item) + 1 for item in value)
        else:
            total = 2 + sum(len(k) + 4 + self.size(v) for k, v in value.items())
        self._sizes[id(value)] = total
        self._kept.append(value)
        return total


class BoundedInterpreter(TreeInterpreter):
    """jmespath's tree interpreter, counting its steps and measuring what it builds."""

    def __init__(self) -> None:
        super().__init__(Options())
        self._steps = 0
        self._deadline = clock.monotonic() + MAX_SECONDS
        self._sizer = Sizer()

    def visit(self, node: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise LimitExceeded(f"it took more than {MAX_STEPS} steps (the limit)")
        if self._steps % _CLOCK_EVERY == 0 and clock.monotonic() > self._deadline:
            raise LimitExceeded(f"it ran longer than {MAX_SECONDS:g} s (the limit)")
        result = super().visit(node, *args, **kwargs)
        if node["type"] in _BUILDERS:
            try:
                built = self._sizer.size(result)
            except RecursionError:
                raise LimitExceeded("it built a value nested too deep") from None
            if built > MAX_VALUE_BYTES:
                raise LimitExceeded(
                    f"it built a value of more than {MAX_VALUE_BYTES} bytes as JSON (the "
                    f"limit), at least {built}"
                )
        return result


def search(parsed: Any, data: Any) -> Any:
    """Evaluate a compiled expression's tree over `data` within the bounds."""
    return BoundedInterpreter().visit(parsed, data)


def _arity_error(name: str, given: int) -> str | None:
    signature = FUNCTIONS[name]["signature"]
    variadic = bool(signature) and signature[-1].get("variadic")
    if variadic and given >= len(signature):
        return None
    if not variadic and given == len(signature):
        return None
    wanted = f"at least {len(signature)}" if variadic else str(len(signature))
    return f"function {name}() takes {wanted} argument(s), got {given}"


def check_functions(parsed: Any) -> str | None:
    """What is wrong with the functions an expression tree calls (None when nothing): an
    unknown name, or a wrong number of arguments."""
    pending = [parsed]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") == "function_expression":
            name = str(node.get("value"))
            if name not in FUNCTIONS:
                known = ", ".join(sorted(FUNCTIONS))
                return f"unknown function {name}() (JMESPath has: {known})"
            problem = _arity_error(name, len(node.get("children") or ()))
            if problem:
                return problem
        pending.extend(node.get("children") or ())
    return None
