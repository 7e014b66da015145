"""What a suspend starts, started by the outbox once the suspend has committed.

A suspend's new waits that set other machinery going (a parallel step's branch invocation, a
child run, a message waiter `send` finds) are not written with it: its commit (one
conditional write of the run item) names them (`lastOut.l`, kept in chunk items written
ahead: `adapters.run_writes.commit`), and the stream, seeing that commit, starts them
here. So a suspend that never commits starts nothing, and one that does is as wide as it
likes: no transaction holds it.

A parallel step gets no item here: its branch message carries the step's launch values and
the run attempt, and the message's claim creates the item (`steps_store.take_branch_lease`),
so a duplicate message (a stream record delivered again sends them all again) runs nothing
twice. Until claimed, the step exists only in the launch: readers of the run show it
`waiting` from the launch the run item names (`runs_store.get_run`), and the next outcome
of the run writes it as a `waiting` item before its commit replaces that name
(`run_writes.commit`). A child run's or message waiter's items are made here, each
only-if-new. A launch that meets an ended run starts nothing; one that raced the run's end
is cleaned up as the end's own leftovers are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from ezgh_engine.adapters import messages, run_writes, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.core.models import ENDED_STATUSES, Run
from ezgh_engine.service import waits

log = logging.getLogger(__name__)


def launched_by(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    """The launch a run item's write commits (its outcome's event ID), if it is new with
    this write: a suspend that started waits."""
    mark = new.get("lastOut")
    if not isinstance(mark, dict) or not mark.get("l"):
        return None
    before = (old or {}).get("lastOut")
    if isinstance(before, dict) and before.get("i") == mark.get("i"):
        return None  # the same commit seen again (another write of the run item)
    return str(mark["l"])


def launch(run_id: str, launch_id: str, *, only: Collection[str] | None = None) -> int:
    """Start what a committed suspend's launch starts, in the order the workflow asked for
    it; answer how many waits were started. A parallel step gets its branch message, which
    carries the step's values and this run attempt (its claim makes the step's item); a
    child run or a message waiter gets its items, each only if new. `only`: the parallel
    steps to send again (repair: those with no item yet), and nothing else. Nothing for a
    run that ended, or that a RetryRun moved to another attempt, since."""
    attempt, entries = run_writes.launch_entries(run_id, launch_id)
    run = runs_store.get_run(run_id, with_steps=False)
    if not entries or run is None or run.ended or run.attempt != attempt:
        return 0
    if only is None:
        _with_history(run_id, launch_id, entries)
    started = 0
    for entry in entries:
        branch = run_writes.branch_values(entry)
        if branch is None:
            if only is None:
                started += run_writes.make_launched([entry])
            continue
        step_id, values = branch
        if only is None or step_id in only:
            messages.send_branch(run_id, step_id, attempt=attempt, values=values)
            started += 1
    # The run may have ended while these were written, after its cleanup read its steps:
    # then they are its leftovers too (either that cleanup or this one sees each).
    after = runs_store.get_run(run_id, with_steps=False)
    if after is None or after.status in ENDED_STATUSES:
        waits.cancel_leftovers(run_id)
    log.debug("run %s: launch %s started %d of %d waits", run_id, launch_id, started, len(entries))
    return started


def _with_history(run_id: str, launch_id: str, entries: list[list[dict[str, Any]]]) -> None:
    """A wide launch's parallel steps replay from a copy of the history before it, not from
    the whole run (their siblings too): when the copy costs less than what it saves
    (`run_writes.history_pays`), it is written now and each parallel step names it."""
    branches = [entry[0] for entry in entries if entry and entry[0].get("branch") is True]
    if len(branches) < run_writes.HISTORY_MIN_BRANCHES:
        return
    history = runs_store.step_values(run_id)
    size = sum(len(json.dumps(v, separators=(",", ":"))) for v in history)
    if not run_writes.history_pays(len(branches), size):
        return
    chunks = run_writes.write_history(run_id, launch_id, history)
    for step in branches:
        step["hist"], step["histChunks"] = launch_id, chunks


def missing(run: Run) -> tuple[str, frozenset[str]] | None:
    """The launch the run's last outcome committed when some of its waits have no item
    (a parallel step no branch message claimed yet, or a child run or message waiter the
    stream never made: its batch was given up on), with the parallel steps among them;
    else None. `ezgh ops repair` starts it again: the branch messages of those steps, and
    whatever else is missing (what exists is left as it is)."""
    mark = run.last_outcome
    if not isinstance(mark, dict) or not mark.get("l") or run.ended:
        return None
    attempt, entries = run_writes.launch_entries(run.id, str(mark["l"]))
    if attempt != run.attempt:
        return None
    stored = {items.STEP_PREFIX + step.id for step in run.steps if step.launched is None}
    unmade = [entry for entry in entries if entry and str(entry[0].get("sk")) not in stored]
    if not unmade:
        return None
    branches = frozenset(b[0] for b in map(run_writes.branch_values, unmade) if b is not None)
    return str(mark["l"]), branches
