"""A small language of workflows, its hypothesis strategies and its fault-free meaning.

A program is a JSON list of ops that the test app's `interp` workflow runs (tests/faults/app.py)
and `expected()` evaluates without an engine:

- `{"op": "run", "name", "fail": k, "retries": r}`: a `run` step whose body fails its first
  `k` attempts (`k <= r`, so it succeeds) -> its name.
- `{"op": "fail", "name"}`: a `run` step raising `NonRetryableError` -> `{"caught": "user"}`.
- `{"op": "value", "name"}`: a `uuid` step -> `"uuid"` (the value itself is checked to be the
  same on every replay instead).
- `{"op": "sleep", "name", "seconds"}`: -> `"slept"`.
- `{"op": "callback", "name"}`: a callback the test completes with `{"cb": name}` -> that.
- `{"op": "child", "name", "program"}`: a child run of `interp` -> the child's output.
- `{"op": "parallel", "name", "branches": [{"fail", "retries"}, ...]}`: run steps awaited
  together (branch invocations) -> their names.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Short (SQS delay), long (Scheduler then SQS), very long (Scheduler).
SLEEPS = (3, 600, 7_200, 2 * 86_400)


def expected(program: list[dict[str, Any]]) -> list[Any]:
    """What a fault-free run of `program` answers."""
    out: list[Any] = []
    for op in program:
        kind = op["op"]
        if kind == "run":
            out.append(op["name"])
        elif kind == "fail":
            out.append({"caught": "user"})
        elif kind == "value":
            out.append("uuid")
        elif kind == "sleep":
            out.append("slept")
        elif kind == "callback":
            out.append({"cb": op["name"]})
        elif kind == "child":
            out.append(expected(op["program"]))
        elif kind == "parallel":
            out.append([f"{op['name']}-{i}" for i in range(len(op["branches"]))])
        else:
            raise ValueError(f"unknown op {kind!r}")
    return out


def children(program: list[dict[str, Any]]) -> int:
    """How many child runs the program makes (nested ones included)."""
    return sum(1 + children(op["program"]) for op in program if op["op"] == "child")


def named(ops: list[dict[str, Any]], prefix: str = "s") -> list[dict[str, Any]]:
    """Give every op a unique step name (children name their own steps)."""
    program = []
    for i, op in enumerate(ops):
        op = {**op, "name": f"{prefix}{i}"}
        if op["op"] == "child":
            op["program"] = named(op["program"], prefix)
        program.append(op)
    return program


_flaky = st.integers(0, 2).flatmap(
    lambda k: st.integers(k, k + 1).map(lambda r: {"fail": k, "retries": r})
)
_run = _flaky.map(lambda f: {"op": "run", **f})
_simple = st.one_of(
    _run,
    st.just({"op": "value"}),
    st.sampled_from(SLEEPS).map(lambda s: {"op": "sleep", "seconds": s}),
)


def _child(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    inner = _op(depth + 1) if depth < 1 else _simple
    return st.lists(inner, min_size=1, max_size=3).map(lambda p: {"op": "child", "program": p})


def _op(depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        _run,
        _run,
        st.just({"op": "fail"}),
        st.just({"op": "value"}),
        st.sampled_from(SLEEPS).map(lambda s: {"op": "sleep", "seconds": s}),
        st.just({"op": "callback"}),
        st.lists(_flaky, min_size=2, max_size=3).map(lambda b: {"op": "parallel", "branches": b}),
        _child(depth),
    )


programs: st.SearchStrategy[list[dict[str, Any]]] = st.lists(_op(), min_size=1, max_size=6).map(
    named
)
