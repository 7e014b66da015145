"""The one writer of a run's steps and outcomes: typed intents (`adapters.intents`) in,
DynamoDB requests out (docs/architecture.md, "The write path: one owner").

Step ops, outcomes, waits and branches say what to write; this package alone builds the
requests (`_requests`) and owns every decision about how they are written:

- **one write or a transaction** (`_writing`). A step call's batch is written on the steps'
  own conditions (`write`: one conditional write for one item, else one transaction); an op
  under a main invocation's lease (`write_leased`) is a transaction with the lease's check,
  a branch invocation's one conditional write holding its step's branch lease; a wait's
  end, a resume, a cancel are all or nothing (`transact`). An outcome (`_outcomes.commit`)
  is never a transaction: its items are written ahead, each alone and harmless to repeat,
  and one conditional write of the run item commits it; what its new waits start is made
  by the outbox after that commit (`_launches`), never before.
- **how much at once.** At most `MAX_TRANSACTION_ITEMS` items and `MAX_TRANSACTION_BYTES`
  in one transaction, `MAX_ITEM_BYTES` in one item (DynamoDB's limits): a write past them is
  refused before anything is written (`WriteTooLarge`), and what a suspend starts is kept
  in chunks of at most `LAUNCH_CHUNK_BYTES` (any number of new waits).
- **where a value goes.** Inline in its item up to `settings().payload_inline_bytes`, else
  to the run's payloads in S3 (`inline`).
- **what is read instead of the whole run.** A wide launch's copy of the history its
  parallel steps replay from (`_history`); a run's step events kept in order for
  ListRunEvents (`_segments`).
"""

from ezgh_engine.adapters.run_writes._base import (
    CHILD_ITEM_TTL_SECONDS,
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    RETENTION_SECONDS,
    AlreadyRecorded,
    WriteTooLarge,
    inline,
)
from ezgh_engine.adapters.run_writes._history import (
    HISTORY_MIN_BRANCHES,
    history_pays,
    read_history,
    write_history,
)
from ezgh_engine.adapters.run_writes._launches import (
    BRANCH_VALUES,
    LAUNCH_CHUNK_BYTES,
    RUN_ATTEMPT_ATTR,
    branch_values,
    launch_entries,
    make_launched,
)
from ezgh_engine.adapters.run_writes._outcomes import commit, outcome_event_values
from ezgh_engine.adapters.run_writes._requests import request
from ezgh_engine.adapters.run_writes._segments import (
    EVENTS_FINAL_AFTER_MS,
    EVENTS_PREFIX,
    EVENTS_THROUGH_ATTR,
    SEGMENT_MIN_EVENTS,
    event_segments,
    events_final_through,
    keep_events,
    segment_events,
)
from ezgh_engine.adapters.run_writes._writing import transact, write, write_each, write_leased

__all__ = [
    "BRANCH_VALUES",
    "CHILD_ITEM_TTL_SECONDS",
    "EVENTS_FINAL_AFTER_MS",
    "EVENTS_PREFIX",
    "EVENTS_THROUGH_ATTR",
    "HISTORY_MIN_BRANCHES",
    "LAUNCH_CHUNK_BYTES",
    "MAX_ITEM_BYTES",
    "MAX_TRANSACTION_BYTES",
    "MAX_TRANSACTION_ITEMS",
    "RETENTION_SECONDS",
    "RUN_ATTEMPT_ATTR",
    "SEGMENT_MIN_EVENTS",
    "AlreadyRecorded",
    "WriteTooLarge",
    "branch_values",
    "commit",
    "event_segments",
    "events_final_through",
    "history_pays",
    "inline",
    "keep_events",
    "launch_entries",
    "make_launched",
    "outcome_event_values",
    "read_history",
    "request",
    "segment_events",
    "transact",
    "write",
    "write_each",
    "write_history",
    "write_leased",
]
