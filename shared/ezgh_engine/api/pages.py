"""Lists within one answer's size (`core.answers.ANSWER_BYTES`, under Lambda's 6 MB).

- `by_size`: a list the service answers whole (apps, API keys, schedules, queues,
  subscriptions, flows): the answer holds the items that fit, in the list's order, and
  `nextCursor` when more follow; `?cursor=` answers the next ones. The cursor names the last
  item shown by the key the list is ordered by, so an item added or removed meanwhile moves
  nothing else.
- `fewer`: a list the store pages with a cursor (runs, jobs, commits, failed items): when
  the page asked for does not fit, the same query is asked again for as many as fit, so the
  store's own cursor resumes right after the last one shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ezgh_engine.adapters import ddb
from ezgh_engine.core import answers
from ezgh_engine.errors import ValidationError

Item = dict[str, Any]
# Room for a list answer's other fields (its name, `nextCursor`).
_OVERHEAD = 1024


def by_size(
    name: str,
    items: list[Item],
    order_key: Callable[[Item], str],
    *,
    cursor: str | None,
    scope: str,
) -> dict[str, Any]:
    """`{name: [...], "nextCursor": …}`: `items` (in ascending `order_key`) after the cursor's,
    as many as fit one answer."""
    if cursor:
        key = ddb.decode_cursor(cursor, scope=scope)
        after = (key.get("after") or {}).get("S")
        if not isinstance(after, str):
            raise ValidationError("cursor is not valid: pass the nextCursor of this same list")
        items = [item for item in items if order_key(item) > after]
    count = answers.fitting_count(items, answers.ANSWER_BYTES - _OVERHEAD)
    following = None
    if count < len(items):
        following = ddb.encode_cursor({"after": {"S": order_key(items[count - 1])}}, scope=scope)
    return {name: items[:count], "nextCursor": following}


def fewer(
    fetch: Callable[[int], tuple[list[Item], str | None]], limit: int
) -> tuple[list[Item], str | None]:
    """The page `fetch(limit)` answers, or, when it does not fit one answer, `fetch(n)` for
    the `n` items that do (asked again: the store's cursor then resumes after them)."""
    found, following = fetch(limit)
    while True:
        count = answers.fitting_count(found, answers.ANSWER_BYTES - _OVERHEAD)
        if count >= len(found):  # (one item always fits: `fitting_count`)
            return found, following
        found, following = fetch(count)
