"""DynamoDB update and condition expressions built from parts, with the placeholders they use.

DynamoDB refuses a request whose `ExpressionAttributeNames` or `ExpressionAttributeValues`
hold a placeholder no expression uses, or whose expressions use one that is not defined
(`ValidationException`); moto accepts both. Expressions assembled by string editing drift
into exactly that (a value left behind when a clause is dropped). `Update` builds the update,
the condition and both maps together, and `request()` checks them against each other, so
such a request cannot be written:

    Update().set("status", "retrying").remove("leaseUntil").add("version", 1)
        .where("#status = :running", running="running").request()

Clauses given as text (`set_raw`, `where`) name attributes as `#name` (the placeholder of
attribute `name`, registered on use) and values as `:key` (given as keyword arguments, or
earlier). Values are plain Python values (serialized like `ddb.to_attr`) or, with `typed`,
DynamoDB attribute values as they are sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from boto3.dynamodb.types import TypeSerializer

_ser = TypeSerializer()
_TOKEN = re.compile(r"(?<![\w#:])([#:])([A-Za-z_][A-Za-z0-9_]*)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ExpressionError(ValueError):
    """An expression uses a placeholder it does not define, or defines one it does not use,
    or one placeholder stands for two different values (a bug in the code building it)."""


def tokens(text: str) -> tuple[set[str], set[str]]:
    """The `#name` and `:value` placeholders `text` uses."""
    names: set[str] = set()
    values: set[str] = set()
    for kind, word in _TOKEN.findall(text):
        (names if kind == "#" else values).add(kind + word)
    return names, values


def check(expressions: list[str], names: dict[str, str], values: dict[str, Any]) -> None:
    """Raise `ExpressionError` unless `expressions` use exactly the placeholders defined
    (DynamoDB's own rule for one request)."""
    used_names: set[str] = set()
    used_values: set[str] = set()
    for text in expressions:
        found_names, found_values = tokens(text)
        used_names |= found_names
        used_values |= found_values
    problems = []
    for label, used, defined in (
        ("names", used_names, set(names)),
        ("values", used_values, set(values)),
    ):
        if used - defined:
            problems.append(f"{label} used but not defined: {sorted(used - defined)}")
        if defined - used:
            problems.append(f"{label} defined but not used: {sorted(defined - used)}")
    if problems:
        raise ExpressionError("; ".join(problems))


@dataclass
class Update:
    """An UpdateItem (or a transaction's Update / ConditionCheck) under construction.

    Every method answers the builder, so calls chain. `request()` answers the expression
    parameters; `copy()` a builder to extend without touching the original.
    """

    _set: list[str] = field(default_factory=list)
    _remove: list[str] = field(default_factory=list)
    _add: list[str] = field(default_factory=list)
    _conditions: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> Update:
        return Update(
            list(self._set),
            list(self._remove),
            list(self._add),
            list(self._conditions),
            dict(self.names),
            dict(self.values),
        )

    # --- placeholders ---------------------------------------------------------------------

    def name(self, attribute: str) -> str:
        """The placeholder of `attribute` (any attribute name, reserved words too)."""
        for placeholder, known in self.names.items():
            if known == attribute:
                return placeholder
        base = attribute if _WORD.match(attribute) else "a"
        placeholder, n = f"#{base}", 1
        while placeholder in self.names:
            n += 1
            placeholder = f"#{base}{n}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any, key: str = "v", *, typed: bool = False) -> str:
        """A new placeholder for `value` (`:key`, or `:key2`... when taken by another value)."""
        attr = value if typed else _ser.serialize(value)
        placeholder, n = f":{key}", 1
        while placeholder in self.values and self.values[placeholder] != attr:
            n += 1
            placeholder = f":{key}{n}"
        self.values[placeholder] = attr
        return placeholder

    def bind(self, typed: bool = False, **values: Any) -> Update:
        """Define `:key` placeholders used in clauses given as text. A key bound twice must
        stand for the same value."""
        for key, value in values.items():
            placeholder = f":{key}"
            attr = value if typed else _ser.serialize(value)
            if placeholder in self.values and self.values[placeholder] != attr:
                raise ExpressionError(f"{placeholder} bound to two values")
            self.values[placeholder] = attr
        return self

    def _text(self, clause: str, values: dict[str, Any], typed: bool) -> str:
        self.bind(typed, **values)
        names, _ = tokens(clause)
        for placeholder in names:
            attribute = placeholder[1:]
            known = self.names.get(placeholder)
            if known is not None and known != attribute:
                raise ExpressionError(f"{placeholder} already names {known!r}")
            self.names[placeholder] = attribute
        return clause

    # --- update clauses -------------------------------------------------------------------

    def set(self, attribute: str, value: Any, *, typed: bool = False) -> Update:
        """SET attribute = value."""
        key = attribute if _WORD.match(attribute) else "v"
        self._set.append(f"{self.name(attribute)} = {self.value(value, key, typed=typed)}")
        return self

    def set_raw(self, clause: str, *, typed: bool = False, **values: Any) -> Update:
        """A SET action as text, e.g. `"#order = if_not_exists(#order, :order)"`."""
        self._set.append(self._text(clause, values, typed))
        return self

    def remove(self, *attributes: str) -> Update:
        """REMOVE each attribute."""
        self._remove.extend(self.name(a) for a in attributes)
        return self

    def add(self, attribute: str, value: Any, *, typed: bool = False) -> Update:
        """ADD value to a number (or set) attribute."""
        key = attribute if _WORD.match(attribute) else "v"
        self._add.append(f"{self.name(attribute)} {self.value(value, key, typed=typed)}")
        return self

    # --- conditions -----------------------------------------------------------------------

    def where(self, clause: str, *, typed: bool = False, **values: Any) -> Update:
        """AND a condition, as text (`"#status = :running"`, running="running")."""
        self._conditions.append(self._text(clause, values, typed))
        return self

    # --- output ---------------------------------------------------------------------------

    @property
    def update_expression(self) -> str:
        parts = []
        for keyword, clauses in (("SET", self._set), ("REMOVE", self._remove), ("ADD", self._add)):
            if clauses:
                parts.append(f"{keyword} {', '.join(clauses)}")
        return " ".join(parts)

    @property
    def condition_expression(self) -> str:
        if len(self._conditions) == 1:
            return self._conditions[0]
        return " AND ".join(f"({c})" for c in self._conditions)

    def request(self, **extra: Any) -> dict[str, Any]:
        """The expression parameters (and `extra`, e.g. TableName and Key), checked:
        `ExpressionError` if any placeholder is unused or undefined."""
        expressions = {
            "UpdateExpression": self.update_expression,
            "ConditionExpression": self.condition_expression,
        }
        params: dict[str, Any] = {**extra, **{k: v for k, v in expressions.items() if v}}
        check(list(expressions.values()), self.names, self.values)
        if self.names:
            params["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            params["ExpressionAttributeValues"] = dict(self.values)
        return params


class UpdateAction(dict[str, Any]):
    """A transaction's `{"Update": {...}}` action that keeps the builder it came from, so a
    later writer can add to it (`extended`) without editing the expression text."""

    def __init__(self, builder: Update, **target: Any) -> None:
        super().__init__(Update=builder.request(**target))
        self.builder = builder
        self.target = target

    def extended(self) -> Update:
        """A copy of the builder, to add clauses to and `UpdateAction(b, **a.target)` again."""
        return self.builder.copy()
