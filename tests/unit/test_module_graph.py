"""The engine's module graph: no import cycles (counting imports made inside functions, which
only defer a cycle to the first call), and no function in service/ or core/ over ~60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "shared"
PACKAGE = ROOT / "ezgh_engine"
MAX_FUNCTION_LINES = 60

# Cycles not yet taken apart; a new cycle, or a listed one grown, fails the test. Empty since
# the protocol and step ops were restructured: keep it so (a module both sides need goes
# below them, e.g. core/, service/wire).
KNOWN_CYCLES: list[frozenset[str]] = []
# Functions over the limit, not yet split: name → the length they may not exceed.
KNOWN_LONG: dict[str, int] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The engine modules `module` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if module else []
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = "ezgh_engine." + ".".join([*base, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            names = [prefix, *(f"{prefix}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            inner = name.removeprefix("ezgh_engine.").removeprefix("ezgh_engine")
            if name.startswith("ezgh_engine") and inner in known and inner != module:
                out.add(inner)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_engine_has_no_new_import_cycles() -> None:
    known = _modules()
    graph = {name: _imported(name, path, known) for name, path in known.items()}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]
    unexpected = [c for c in _cycles(graph) if not any(c <= k for k in KNOWN_CYCLES)]
    assert unexpected == [], f"import cycles: {[sorted(c) for c in unexpected]}"


def test_service_and_core_functions_stay_short() -> None:
    long = {}
    for folder in ("service", "core"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    name = f"{path.relative_to(PACKAGE)}:{node.name}"
                    if lines > max(MAX_FUNCTION_LINES, KNOWN_LONG.get(name, 0)):
                        long[name] = lines
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
