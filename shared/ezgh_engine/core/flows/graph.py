"""The graph of a flow: nodes and edges, parsed from the API's JSON into frozen values.

A node is `{id, moduleType, config?, label?, position?}`; an edge is
`{id?, source, sourceHandle?, target, targetHandle?}` (contract, "Flows"). Parsing only checks
shapes; `validate.check_graph` checks the rules. Comment nodes are kept as authored and
stripped (`executable`) before execution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ezgh_engine.errors import ValidationError

NODE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
COMMENT = "comment"
MAX_NODES = 200


@dataclass(frozen=True)
class Node:
    """One node of a graph."""

    id: str
    module_type: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Edge:
    """One edge: output `source_handle` of `source` into input `target_handle` of `target`."""

    id: str
    source: str
    target: str
    source_handle: str | None = None
    target_handle: str | None = None

    @property
    def key(self) -> str:
        """The key of this edge's value in the target's input (default: the source's id)."""
        return self.target_handle or self.source


@dataclass(frozen=True)
class Graph:
    """Nodes in authored order, edges in authored order."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    def node(self, node_id: str) -> Node:
        """The node with this id (KeyError when absent)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def executable(self) -> Graph:
        """This graph without its comment nodes (and any edge touching one)."""
        comments = {n.id for n in self.nodes if n.module_type == COMMENT}
        return Graph(
            nodes=tuple(n for n in self.nodes if n.id not in comments),
            edges=tuple(
                e for e in self.edges if e.source not in comments and e.target not in comments
            ),
        )


def _text(value: Any, where: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{where}: must be a non-empty string")
    return value


def _node(index: int, raw: Any) -> Node:
    if not isinstance(raw, dict):
        raise ValidationError(f"nodes[{index}]: must be an object")
    node_id = _text(raw.get("id"), f"nodes[{index}].id") or ""
    if not NODE_ID.fullmatch(node_id):
        raise ValidationError(f"node {node_id!r}: id must match {NODE_ID.pattern}")
    module_type = _text(raw.get("moduleType"), f"node {node_id}: moduleType") or ""
    config = raw.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValidationError(f"node {node_id}: config must be an object")
    return Node(id=node_id, module_type=module_type, config=config)


def _edge(index: int, raw: Any) -> Edge:
    if not isinstance(raw, dict):
        raise ValidationError(f"edges[{index}]: must be an object")
    label = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else None
    where = f"edge {label}" if label else f"edges[{index}]"
    source = _text(raw.get("source"), f"{where}: source") or ""
    target = _text(raw.get("target"), f"{where}: target") or ""
    return Edge(
        id=label or f"{source}->{target}#{index}",
        source=source,
        target=target,
        source_handle=_text(raw.get("sourceHandle"), f"{where}: sourceHandle", optional=True),
        target_handle=_text(raw.get("targetHandle"), f"{where}: targetHandle", optional=True),
    )


def parse_graph(raw: Any) -> Graph:
    """A `Graph` from `{nodes, edges}`; `ValidationError` naming the node or edge at fault."""
    if not isinstance(raw, dict):
        raise ValidationError("graph: must be an object {nodes, edges}")
    nodes, edges = raw.get("nodes"), raw.get("edges", [])
    if not isinstance(nodes, list) or not nodes:
        raise ValidationError("graph.nodes: must be a non-empty list")
    if edges is None:
        edges = []
    if not isinstance(edges, list):
        raise ValidationError("graph.edges: must be a list")
    if len(nodes) > MAX_NODES:
        raise ValidationError(f"graph.nodes: at most {MAX_NODES} nodes")
    return Graph(
        nodes=tuple(_node(i, n) for i, n in enumerate(nodes)),
        edges=tuple(_edge(i, e) for i, e in enumerate(edges)),
    )
