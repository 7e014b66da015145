"""moto's `UpdateExpression` handling, same answers at a fraction of its CPU.

An `UpdateItem` was moto's most expensive request under `bench.throughput` (a fifth of the
runtime process's CPU: four per five-step run, each 2-3 times a `GetItem`). Per request moto
tokenizes and parses the expression twice (the handler to list its placeholders, the
backend to validate it), deep-copies the tree before each validation, and then walks it
with ten processors, each of which rebuilt its node-type map (a dict and a tuple) at every
node it visited. Here:

- **Parsed once per expression.** An expression's text gives one tree; the first parse is
  kept pickled and every later `make` of the same text answers a fresh copy (`pickle.loads`,
  a few microseconds). A text moto refuses is never kept: it is parsed, and refused, each
  time. Each caller still gets a tree of its own to mutate, as before.
- **A fresh tree copies from its pickle.** `Validator` deep-copies the tree it is given
  before processing it; for a tree straight from `make` (moto never mutates that tree: it
  validates copies) the copy is the same pickle loaded again. Any other value takes
  `copy.deepcopy`.
- **A condition lexed once per text.** `ConditionExpressionParser` splits the condition's
  text into tokens (a pure function of the text: a list of patterns built and tried per
  token) before it resolves names and values; the tokens of a text are kept, and each
  parse gets new ones, equal to what moto's lexer makes.
- **Each processor's map made once.** `DepthFirstTraverser._processing_map()` answers the
  same node types and bound methods for one processor throughout (every one in moto
  returns a literal of its own methods), so it is made once per processor instead of
  twice per node, and which processor takes a node is found once per node type (moto's
  `isinstance` against its abstract classes, per node and per processor, was a tenth of an
  `UpdateItem`).

- **Clauses counted once.** moto's `ActionCountValidator` (an expression has one SET, ADD
  or REMOVE section at most) runs at every node that is an `UpdateExpression` (most of
  them), and each run searches the node's whole subtree three times: quadratic in the
  expression, a third of a validation. The counts a node's searches would find are the
  sums of its children's, so one walk in moto's order (children first) checks every node
  as moto does and raises what moto raises at the first node moto would refuse.

- **A replay does not check again what was accepted.** Inside `replaying()` (the journal's
  replay at a start), an `UpdateItem` runs only the processors that compute the update:
  the six that can only refuse it (one section of each kind, no overlapping paths, no
  key attribute, no missing path, key types, no empty key value) passed when the request
  was first applied, on the very state the replay rebuilds, so they pass again; each is a
  whole walk of the expression, two thirds of a validation.

`tests/local/test_moto_expressions.py` holds moto's answers to the same requests.
"""

from __future__ import annotations

import contextlib
import copy
import pickle
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ezgh_engine.local.moto_internals import MotoInternalsMissing

_MAX_KEPT = 1024  # expression texts come from requests: bounded
_lock = threading.Lock()
_parsed: dict[str, bytes] = {}  # expression text -> its tree, pickled
# Trees answered by `make` and their pickle: a copy of one is that pickle loaded again.
_pristine: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
_installed = False
_originals: list[tuple[Any, str, Any]] = []  # (owner, name, moto's own) for `disabled()`
parses = 0  # moto's own parses since the start (tests)


def install() -> None:
    """Patch moto's parser, its validators' copy and its traverser (once per process)."""
    global _installed
    if _installed:
        return
    try:
        from moto.dynamodb.comparisons import ConditionExpressionParser
        from moto.dynamodb.parsing import validators
        from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
            DepthFirstTraverser,
            Node,
        )
        from moto.dynamodb.parsing.expressions import (  # type: ignore[attr-defined]
            UpdateExpressionParser,
        )
    except ImportError as exc:
        raise MotoInternalsMissing("moto.dynamodb.parsing") from exc
    counter = validators.ActionCountValidator
    if "traverse" in counter.__dict__ or "pre_processing_of_child" in counter.__dict__:
        raise MotoInternalsMissing("moto's ActionCountValidator as DepthFirstTraverser walks")
    for owner, name in (
        (UpdateExpressionParser, "make"),
        (validators, "deepcopy"),
        (DepthFirstTraverser, "nodes_to_be_processed"),
        (DepthFirstTraverser, "process"),
        (DepthFirstTraverser, "traverse_node_recursively"),
        (ConditionExpressionParser, "_lex_condition_expression"),
        (counter, "traverse"),
        (validators.UpdateExpressionValidator, "get_ast_processors"),
    ):
        _originals.append((owner, name, owner.__dict__.get(name, _INHERITED)))
    _parse_once(UpdateExpressionParser)
    _lex_once(ConditionExpressionParser)
    validators.deepcopy = _copier(Node)
    _map_once(DepthFirstTraverser, Node)
    _count_clauses_once(counter)
    _skip_refusals_in_replay(validators)
    _installed = True


_INHERITED = object()  # an attribute moto's class inherits: `disabled()` deletes ours


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """moto's own code while inside (tests compare both answers; not thread-safe)."""
    patched = [(owner, name, owner.__dict__[name]) for owner, name, _ in _originals]
    for owner, name, original in _originals:
        if original is _INHERITED:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    try:
        yield
    finally:
        for owner, name, replacement in patched:
            setattr(owner, name, replacement)


def _parse_once(parser_class: Any) -> None:
    original: Callable[[str], Any] = parser_class.make  # bound to the class

    def make(cls: Any, expression_str: str) -> Any:
        if cls is not parser_class or type(expression_str) is not str:
            return original.__func__(cls, expression_str)  # type: ignore[attr-defined]
        blob = _parsed.get(expression_str)
        if blob is None:
            global parses
            tree = original(expression_str)  # raises for a text moto refuses: not kept
            parses += 1
            blob = pickle.dumps(tree, pickle.HIGHEST_PROTOCOL)
            with _lock:
                if len(_parsed) < _MAX_KEPT:
                    _parsed[expression_str] = blob
        tree = pickle.loads(blob)
        with _lock:
            _pristine[tree] = blob
        return tree

    parser_class.make = classmethod(make)


_lexed: dict[str, tuple[Any, ...]] = {}  # condition text -> its tokens
lexes = 0  # moto's own lexings since the start (tests)


def _lex_once(parser_class: Any) -> None:
    original: Callable[[Any], Any] = parser_class._lex_condition_expression

    def lex(parser: Any) -> Any:
        text = parser.condition_expression
        tokens = _lexed.get(text) if type(text) is str else None
        if tokens is None:
            global lexes
            made = original(parser)  # raises for a text moto cannot lex: not kept
            lexes += 1
            tokens = tuple(made)
            if type(text) is str and all(t.children == [] for t in tokens):
                with _lock:
                    if len(_lexed) < _MAX_KEPT:
                        _lexed[text] = tokens
            return made
        # What moto's lexer makes: each token new, with a list of children of its own.
        return deque(t._replace(children=[]) for t in tokens)

    parser_class._lex_condition_expression = lex


def _copier(node_class: type) -> Callable[..., Any]:
    def deepcopy(value: Any, memo: Any = None) -> Any:
        if memo is None and isinstance(value, node_class):
            with _lock:
                blob = _pristine.get(value)
            if blob is not None:
                return pickle.loads(blob)
        return copy.deepcopy(value, memo)

    return deepcopy


_node_types: set[type] = set()  # the concrete types found to be moto `Node`s


def _map_once(traverser_class: Any, node_class: type) -> None:
    def processing_map(traverser: Any) -> dict[type, Any]:
        made = traverser.__dict__.get("_ezgh_map")
        if made is None:
            made = traverser.__dict__["_ezgh_map"] = traverser._processing_map()
        return made

    def nodes_to_be_processed(traverser: Any) -> tuple[type, ...]:
        kinds = traverser.__dict__.get("_ezgh_kinds")
        if kinds is None:
            kinds = traverser.__dict__["_ezgh_kinds"] = tuple(processing_map(traverser))
        return kinds

    def process(traverser: Any, node: Any) -> Any:
        for class_key, processor in processing_map(traverser).items():
            if isinstance(node, class_key):
                return processor(node)
        return None

    def processor_for(traverser: Any, kind: type) -> Any:
        """The processor `process` would pick for a node of type `kind` (None: none)."""
        known = traverser.__dict__.get("_ezgh_by_type")
        if known is None:
            known = traverser.__dict__["_ezgh_by_type"] = {}
        if kind not in known:
            known[kind] = next(
                (p for k, p in processing_map(traverser).items() if issubclass(kind, k)), None
            )
        return known[kind]

    def traverse_node_recursively(traverser: Any, node: Any, child_id: int = -1) -> Any:
        # moto's, with `isinstance` against its ABCs answered once per node type.
        if type(node) in _node_types or isinstance(node, node_class):
            _node_types.add(type(node))
            parent_node = node.parent
            if node.children is not None:
                for i, child_node in enumerate(node.children):
                    traverser.pre_processing_of_child(node, i)
                    traverser.traverse_node_recursively(child_node, i)
            processor = processor_for(traverser, type(node))
            if processor is not None:
                node = processor(node)
                node.parent = parent_node
                if parent_node:
                    parent_node.children[child_id] = node
        return node

    traverser_class.nodes_to_be_processed = nodes_to_be_processed
    traverser_class.process = process
    traverser_class.traverse_node_recursively = traverse_node_recursively


def _count_clauses_once(counter_class: Any) -> None:
    """`ActionCountValidator.traverse`, linear: what moto's walk checks, in its order."""
    from moto.dynamodb.exceptions import TooManyClauses
    from moto.dynamodb.parsing import ast_nodes as typed

    ast_nodes: Any = typed
    # moto's `verify_action_counts`, in its order: ADD, REMOVE, SET.
    kinds = (
        (ast_nodes.UpdateExpressionAddClause, "ADD"),
        (ast_nodes.UpdateExpressionRemoveClause, "REMOVE"),
        (ast_nodes.UpdateExpressionSetClause, "SET"),
    )
    # `Node.find_clauses` takes a child of the kind searched for (its exact type) and looks
    # into the others that are expressions or functions.
    searched = (ast_nodes.Expression, ast_nodes.UpdateExpressionFunction)
    node_class, checked = ast_nodes.Node, ast_nodes.UpdateExpression

    def counts(node: Any) -> tuple[int, ...]:
        """What `node.find_clauses([kind])` finds, for each kind (checking every node under
        `node` first, as moto's walk does, and `node` itself)."""
        found = [0] * len(kinds)
        for child in node.children or ():
            if not isinstance(child, node_class):
                continue
            below = counts(child)  # (checks the child's subtree, in moto's order)
            looked_into = isinstance(child, searched)
            for i, (kind, _) in enumerate(kinds):
                if type(child) is kind:
                    found[i] += 1
                elif looked_into:
                    found[i] += below[i]
        if isinstance(node, checked):
            for (_, name), count in zip(kinds, found, strict=True):
                if count > 1:
                    raise TooManyClauses(name)
        return tuple(found)

    def traverse(validator: Any, node: Any) -> Any:
        if isinstance(node, node_class):
            counts(node)
        return node

    counter_class.traverse = traverse


_replay = threading.local()  # `replaying()`: this thread applies journaled requests


@contextlib.contextmanager
def replaying() -> Iterator[None]:
    """While inside, this thread's `UpdateItem`s skip moto's checks that can only refuse
    (for a replay of requests moto accepted on the same state: see the module's doc)."""
    _replay.on = True
    try:
        yield
    finally:
        _replay.on = False


def _skip_refusals_in_replay(validators: Any) -> None:
    refusing = tuple(
        getattr(validators, name)
        for name in (
            "ActionCountValidator",
            "OverlappingPathsValidator",
            "UpdateHashRangeKeyValidator",
            "NoneExistingPathChecker",
            "TypeMismatchValidator",
            "EmptyStringKeyValueValidator",
        )
    )
    validator_class = validators.UpdateExpressionValidator
    original: Callable[[Any], list[Any]] = validator_class.get_ast_processors

    def get_ast_processors(validator: Any) -> list[Any]:
        processors = original(validator)
        if getattr(_replay, "on", False):
            return [p for p in processors if type(p) not in refusing]
        return processors

    validator_class.get_ast_processors = get_ast_processors
