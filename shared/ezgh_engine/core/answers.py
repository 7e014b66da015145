"""Answers of bounded size: no API answer passes Lambda's 6 MB (the contract: large values
are given as references). Pure.

An answer is measured as Lambda carries it (`core.sizes.carried_size`) and held to
`ANSWER_BYTES`, which leaves the rest of the 6 MB to Lambda's own envelope. Two tools:

- `fit_values`: the answer's values (an input, an output, a step's result) stay inline in
  the order given while they fit; the others become references (`inputRef`, `outputRef`:
  a payload path, read with GetPayload). The metadata is always whole.
- `fitting_count`: how many items of a list fit one answer (the rest is the next page's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES, carried_size, json_text

# An answer's body at most, as Lambda carries it: 6 MB less room for its envelope (status,
# headers) and a margin.
ANSWER_BYTES = LAMBDA_PAYLOAD_BYTES - 512 * 1024


def size(body: Any) -> int:
    return carried_size(json_text(body))


@dataclass(frozen=True)
class Slot:
    """A value of an answer that may be given as a reference instead: `holder[key]`, or
    `holder[ref_key] = ref` (a payload path)."""

    holder: dict[str, Any]
    key: str
    ref_key: str
    ref: str


def as_refs(slots: Sequence[Slot]) -> list[Any]:
    """Give every slot as its reference; answer the values taken out, in order."""
    taken = []
    for slot in slots:
        taken.append(slot.holder.pop(slot.key))
        slot.holder[slot.ref_key] = slot.ref
    return taken


def fit_values(body: Any, slots: Sequence[Slot], budget: int | None = None) -> None:
    """Put the slots' values back inline, in order, while `body` stays within `budget`
    (`ANSWER_BYTES`); the others stay references. `body` holds the slots' holders, every
    slot inline."""
    values = as_refs(slots)
    left = (ANSWER_BYTES if budget is None else budget) - size(body)
    for slot, value in zip(slots, values, strict=True):
        extra = size({slot.key: value}) - size({slot.ref_key: slot.ref})
        if extra <= left:
            del slot.holder[slot.ref_key]
            slot.holder[slot.key] = value
            left -= extra


def fitting_count(items: Sequence[Any], room: int) -> int:
    """How many of `items`, from the first, fit `room` bytes as members of a JSON list (at
    least one: a single item over it is its own page, held to its own limits)."""
    used = 0
    for count, item in enumerate(items):
        used += size(item) + 1
        if used > room and count:
            return count
    return len(items)
