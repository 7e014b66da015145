"""The rules a committed graph must follow; each refusal names the node or edge at fault.

- node ids unique; module types known; each node's config as its module requires, and every
  template and expression in it parses and calls only JMESPath's functions, each with its
  number of arguments;
- edges between existing nodes, from an existing output handle (a condition's edges leave by
  `true` or `false`), into a node that takes input, and at most one edge into one handle;
- exactly one trigger node, the only executable node without incoming edges;
- no cycles.

Comment nodes are checked for their config and must have no edges (they annotate the canvas).
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

from ezgh_engine import clock
from ezgh_engine.core.flows.graph import COMMENT, Edge, Graph, Node, parse_graph
from ezgh_engine.core.flows.modules import ANY_INPUT, DEFAULT_OUTPUT, MODULE_TYPES, config_error
from ezgh_engine.core.flows.templating import TemplateError, compile_expression, expressions
from ezgh_engine.core.queues import MESSAGE_KEY_RE
from ezgh_engine.errors import ValidationError

TRIGGERS = ("trigger.manual",)
_EXPRESSION_MODULES = ("transform", "condition")


def check_graph(raw: object) -> Graph:
    """The parsed graph when every rule holds; `ValidationError` naming the fault otherwise."""
    graph = parse_graph(raw)
    _check_nodes(graph)
    ids = {n.id: n for n in graph.nodes}
    for edge in graph.edges:
        _check_edge(edge, ids)
    _check_handles_used_once(graph)
    _check_trigger(graph.executable())
    _check_acyclic(graph.executable())
    return graph


def _check_nodes(graph: Graph) -> None:
    seen: set[str] = set()
    for node in graph.nodes:
        if node.id in seen:
            raise ValidationError(f"node {node.id}: duplicate node id")
        seen.add(node.id)
        module = MODULE_TYPES.get(node.module_type)
        if module is None:
            known = ", ".join(sorted(MODULE_TYPES))
            raise ValidationError(
                f"node {node.id}: unknown moduleType {node.module_type!r} (known: {known})"
            )
        problem = config_error(module, node.config) or _expression_error(node)
        if problem:
            raise ValidationError(f"node {node.id}: {problem}")


def _expression_error(node: Node) -> str | None:
    try:
        if node.module_type in _EXPRESSION_MODULES:
            compile_expression(str(node.config["expression"]))
        for expression in expressions(node.config):
            compile_expression(expression)
    except TemplateError as err:
        return str(err)
    if node.module_type == "http.request" and isinstance(node.config.get("retries"), str):
        return "config.retries must be an integer, not a template (it is read before the node runs)"
    by_key = (node.config.get("queueId") is None) != (node.config.get("key") is None)
    if node.module_type == "wait.event" and by_key:
        return "config.queueId and config.key go together (or neither, for a resumeUrl)"
    return _literal_error(node)


def _literal(value: object) -> str | None:
    """A config string that holds no template (None: a template or not a string)."""
    return value if isinstance(value, str) and "{{" not in value else None


def _literal_error(node: Node) -> str | None:
    """What a job would meet when the node runs, in a value written outright."""
    config = node.config
    if node.module_type == "http.request":
        url = _literal(config.get("url"))
        parts = urlsplit(url) if url else None
        if parts is not None and (parts.scheme not in ("http", "https") or not parts.hostname):
            return "config.url must be an absolute http(s) URL"
    if node.module_type == "delay":
        until = _literal(config.get("until"))
        try:
            if until is not None:
                clock.parse_iso(until)
        except ValueError:
            return "config.until must be an ISO 8601 time"
    if node.module_type == "wait.event":
        key = _literal(config.get("key"))
        if key is not None and not MESSAGE_KEY_RE.fullmatch(key):
            return f"config.key must match {MESSAGE_KEY_RE.pattern}"
    return None


def _check_edge(edge: Edge, ids: dict[str, Node]) -> None:
    where = f"edge {edge.id}"
    for end, node_id in (("source", edge.source), ("target", edge.target)):
        if node_id not in ids:
            raise ValidationError(f"{where}: {end} {node_id!r} is not a node of the graph")
    source, target = ids[edge.source], ids[edge.target]
    if COMMENT in (source.module_type, target.module_type):
        raise ValidationError(f"{where}: a comment node has no edges")
    outputs = MODULE_TYPES[source.module_type].outputs
    handle = edge.source_handle
    if source.module_type == "condition":
        if handle not in outputs:
            raise ValidationError(
                f"{where}: sourceHandle must be 'true' or 'false' (leaving condition "
                f"{source.id}), got {handle!r}"
            )
    elif handle not in (None, *outputs):
        raise ValidationError(
            f"{where}: node {source.id} has no output handle {handle!r} (it has {DEFAULT_OUTPUT!r})"
        )
    if ANY_INPUT not in MODULE_TYPES[target.module_type].inputs:
        raise ValidationError(f"{where}: node {target.id} ({target.module_type}) takes no input")
    if edge.source == edge.target:
        raise ValidationError(f"{where}: an edge from node {edge.source} to itself is a cycle")


def _check_handles_used_once(graph: Graph) -> None:
    counts = Counter((e.target, e.key) for e in graph.edges)
    for edge in graph.edges:
        if counts[(edge.target, edge.key)] > 1:
            raise ValidationError(
                f"edge {edge.id}: node {edge.target} already has an edge into its input "
                f"handle {edge.key!r} (two edges into one handle; set targetHandle)"
            )


def _check_trigger(graph: Graph) -> None:
    triggers = [n for n in graph.nodes if n.module_type in TRIGGERS]
    if len(triggers) != 1:
        named = ", ".join(n.id for n in triggers) or "none"
        raise ValidationError(f"graph: needs exactly one trigger node, found {named}")
    targets = {e.target for e in graph.edges}
    for node in graph.nodes:
        if node.module_type not in TRIGGERS and node.id not in targets:
            raise ValidationError(
                f"node {node.id}: has no incoming edge (every node must be reachable from "
                f"trigger {triggers[0].id})"
            )


def _check_acyclic(graph: Graph) -> None:
    """Kahn's algorithm; the nodes left over lie on (or behind) a cycle."""
    incoming = Counter(e.target for e in graph.edges)
    ready = [n.id for n in graph.nodes if incoming[n.id] == 0]
    while ready:
        node_id = ready.pop()
        for edge in graph.edges:
            if edge.source == node_id:
                incoming[edge.target] -= 1
                if incoming[edge.target] == 0:
                    ready.append(edge.target)
    stuck = [n.id for n in graph.nodes if incoming[n.id] > 0]
    if stuck:
        raise ValidationError(f"node {stuck[0]}: is on a cycle (the graph must be a DAG)")
