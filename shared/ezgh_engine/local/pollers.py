"""Local event source mappings: SQS queue pollers and DynamoDB stream readers.

Each poller is a daemon thread that plays the role Lambda's event source mapping plays in
AWS: it builds the same event, calls the same handler, and applies the same rules for partial
batch failures. An `Activity` tracker counts handler runs so `LocalRuntime.wait_idle()` can
tell "nothing is happening" from "something is between two steps".
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.local import events, incarnation
from ezgh_engine.local.emulator import stream_wakeup
from ezgh_engine.local.environments import EnvironmentDied

if TYPE_CHECKING:
    from ezgh_engine.local.faults import FaultPlan

log = logging.getLogger("ezgh.local.pollers")

Invoke = Callable[[dict[str, Any]], Any]


class Activity:
    """Counts work in progress and work started, shared by every poller and the API bridge."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.busy = 0
        self.started = 0  # moves whenever anything begins or ends

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        with self._lock:
            self.busy += 1
            self.started += 1
        try:
            yield
        finally:
            with self._lock:
                self.busy -= 1
                self.started += 1
            stream_wakeup.activity_ended()  # DynamoDB Local: its writes may be in the stream

    def snapshot(self) -> tuple[int, int]:
        """(busy, started) read together."""
        with self._lock:
            return self.busy, self.started


class Poller:
    """A stoppable, pausable daemon thread running `_loop`."""

    def __init__(self, name: str, activity: Activity) -> None:
        self.name = name
        self.activity = activity
        self._stop = threading.Event()
        self._running = threading.Event()  # cleared while paused (during a reset)
        self._running.set()
        self._thread: threading.Thread | None = None
        self.generation = 0  # bumped by every reset; work from an older one is dropped
        self.parked = threading.Event()  # set while waiting at the gate, paused or stopping
        self.life = incarnation.current()  # the engine's life it works for (restarts)
        # Fault injection (`local.faults`, tests only): None, and no cost, unless set.
        self.faults: FaultPlan | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded_loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.generation += 1
        self._running.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)

    def pause(self) -> None:
        """Stop taking work (a reset follows); `parked` is set once the loop is waiting."""
        self._running.clear()
        self.generation += 1
        self._wake()

    def resume(self) -> None:
        self._running.set()
        self._wake()

    @property
    def idle(self) -> bool:
        return True

    def _wake(self) -> None:
        """Cut a wait short (overridden where the loop waits on something else)."""

    def _gate(self) -> bool:
        """Block while paused; False once stopping."""
        while not self._stop.is_set():
            if self._running.is_set():
                self.parked.clear()
                return True
            self.parked.set()
            self._running.wait(0.5)
        self.parked.set()
        return False

    def _guarded_loop(self) -> None:
        with incarnation.marked(self.life):
            self._guarded()

    def _guarded(self) -> None:
        while not self._stop.is_set():
            try:
                self._loop()
            except Exception:
                # A poller must outlive any one failure (moto restarting, a reset mid-call).
                log.exception("%s crashed; restarting it", self.name)
                self._stop.wait(0.5)

    def _loop(self) -> None:
        raise NotImplementedError


# The message attribute of the local pollers' own wake-up messages (`SqsPoller.interrupt`).
WAKE_ATTRIBUTE = "ezghLocalWake"


class SqsPoller(Poller):
    """Long-polls a queue and calls `invoke` with Lambda SQS events, a few batches at once."""

    def __init__(
        self,
        *,
        name: str,
        queue_url: str,
        queue_arn: str,
        invoke: Invoke,
        activity: Activity,
        batch_size: int = 10,
        max_concurrency: int = 4,
        wait_seconds: int = 1,
    ) -> None:
        super().__init__(name, activity)
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.invoke = invoke
        self.batch_size = max(1, min(batch_size, 10))  # ReceiveMessage caps at 10
        self.wait_seconds = wait_seconds
        self._slots = threading.Semaphore(max_concurrency)
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix=f"{name}-batch")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):  # only to end a long poll sooner
            self.interrupt()
        super().stop(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def interrupt(self) -> None:
        """End a long poll in progress now (before a reset), instead of at its timeout.

        Sent after `pause()`, so whoever receives the message drops it; the reset wipes it.
        """
        if not self.parked.is_set():
            aws.client("sqs").send_message(
                QueueUrl=self.queue_url,
                MessageBody="{}",
                MessageAttributes={WAKE_ATTRIBUTE: {"DataType": "String", "StringValue": "1"}},
            )

    def _loop(self) -> None:
        sqs = aws.client("sqs")
        while self._gate():
            if not self._slots.acquire(timeout=0.5):
                continue
            generation = self.generation
            try:
                answer = sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=self.batch_size,
                    WaitTimeSeconds=self.wait_seconds,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
            except Exception as error:
                self._slots.release()
                if self._running.is_set():
                    log.warning("%s: receive failed: %s", self.name, error)
                self._stop.wait(0.5)
                sqs = aws.client("sqs")  # the endpoint may have been reset
                continue
            messages = self._without_wakes(answer.get("Messages", []))
            # Received across a reset: those messages belong to a state that is gone.
            stale = generation != self.generation or not self._running.is_set()
            if not messages or stale or self._stop.is_set():
                self._slots.release()
                continue
            tracker = self.activity.track()
            tracker.__enter__()  # counted as busy before the batch leaves this thread
            try:
                self._pool.submit(self._run_batch, messages, tracker)
            except RuntimeError:  # stopping: the pool is shut; the messages come back later
                tracker.__exit__(None, None, None)
                self._slots.release()

    def _without_wakes(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Delete the wake-ups `interrupt` sent (they are the poller's own, never a
        handler's: one kept in the state dir across a stop would reach the handler after
        the restart as a message that is none of ours); the others."""
        wakes = [m for m in messages if WAKE_ATTRIBUTE in m.get("MessageAttributes", {})]
        if wakes:
            with contextlib.suppress(Exception):  # a wake left over is deleted next time
                self._delete(wakes)
        return [m for m in messages if m not in wakes]

    def _run_batch(self, messages: list[dict[str, Any]], tracker: Any) -> None:
        with incarnation.marked(self.life):
            self._run_marked(messages, tracker)

    def _run_marked(self, messages: list[dict[str, Any]], tracker: Any) -> None:
        try:
            if self.faults is not None:  # some delivered late: they come back later
                messages = self.faults.sqs_received(self.queue_url, messages)
                if not messages:
                    return
            event = {"Records": [events.sqs_record(m, self.queue_arn) for m in messages]}
            try:
                result = self.invoke(event)
            except Exception as error:
                # As in Lambda: nothing is deleted, the batch comes back after the visibility
                # timeout (and goes to the dead-letter queue after maxReceiveCount).
                if self._stop.is_set() and isinstance(error, EnvironmentDied):
                    # The stop killed its environment mid-call: the next start runs it again.
                    log.info("%s: a batch was cut off by the stop; it will be retried", self.name)
                    return
                log.exception(
                    "%s: handler raised; %d message(s) will be retried", self.name, len(messages)
                )
                return
            failed = events.failed_in_batch(result, [m["MessageId"] for m in messages])
            done = [m for m in messages if m["MessageId"] not in failed]
            if done and self.faults is not None:  # some delivered again: not deleted
                done = self.faults.sqs_handled(self.queue_url, done)
            if done:
                self._delete(done)
        finally:
            tracker.__exit__(None, None, None)
            self._slots.release()

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        answer = aws.client("sqs").delete_message_batch(
            QueueUrl=self.queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )
        for failure in answer.get("Failed", []):
            log.warning("%s: delete failed: %s", self.name, failure)


class StreamPoller(Poller):
    """Reads a DynamoDB stream shard by shard and calls `invoke` with Lambda stream events.

    A batch whose handler raises or reports `batchItemFailures` is retried from the first
    failed record after a backoff, at most `max_attempts` times; then those records are
    skipped with an error log, like a mapping with a bounded retry policy.

    Its place in a shard is the sequence number of the last record it handled (or skipped),
    never an iterator: an iterator expires (AWS: 15 minutes after it is issued; moto: when
    the emulator drops it) or fails, and the reader then gets a new one right after that
    record (`AFTER_SEQUENCE_NUMBER`), so no record is lost or handed on twice.
    """

    def __init__(
        self,
        *,
        name: str,
        stream_arn: str,
        invoke: Invoke,
        activity: Activity,
        batch_size: int = 100,
        max_attempts: int = 5,
        backoff_seconds: float = 0.2,
        idle_wait_seconds: float = 1.0,
        accepts: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        super().__init__(name, activity)
        self.stream_arn = stream_arn
        # The mapping's event filter (topology `StreamSource.matches`): records it refuses
        # never reach the handler, as in AWS.
        self.accepts = accepts or (lambda record: True)
        self.invoke = invoke
        self.batch_size = max(1, min(batch_size, 1000))
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.idle_wait_seconds = idle_wait_seconds
        self._iterators: dict[str, str] = {}  # shard id -> next iterator
        # shard id -> the sequence number of the last record handled (the checkpoint a new
        # iterator starts after, and a restarted engine resumes from, as an event source
        # mapping keeps its position); a shard not named is read from its oldest record.
        self._handled: dict[str, str] = {}
        self._resume_from: dict[str, str] = {}
        self._closed: set[str] = set()
        self._known_generation = -1
        self._caught_up_at: int | None = None  # wakeup counter read before an empty read
        self._processing = False
        self._polls = 0

    def checkpoint(self) -> dict[str, str]:
        """Where a successor should resume: per shard, the sequence number of the last
        record handled (a shard not named: nothing handled, read it from its start)."""
        return dict(self._handled)

    def resume_from(self, checkpoint: dict[str, str]) -> None:
        """Before `start()`: per shard, read on after the sequence number `checkpoint`
        names (another poller's, or a journal's) instead of from the start."""
        self._resume_from = dict(checkpoint)

    def set_stream(self, stream_arn: str) -> None:
        """Follow a new stream (after a reset the table, and so its stream, is new)."""
        self.stream_arn = stream_arn
        self._known_generation = -1

    @property
    def idle(self) -> bool:
        """True when the last read found nothing and nothing was written since."""
        return (
            not self._processing
            and self._caught_up_at is not None
            and self._caught_up_at == stream_wakeup.counter
        )

    def _wake(self) -> None:
        stream_wakeup.notify()

    def _discover(self, streams: Any) -> None:
        """Start reading shards not seen before: after the last record handled, if any."""
        description = streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for shard in description.get("Shards", []):
            shard_id = shard["ShardId"]
            if shard_id in self._iterators or shard_id in self._closed:
                continue
            self._iterators[shard_id] = self._iterator_at_place(streams, shard_id)

    def _iterator_at_place(self, streams: Any, shard_id: str) -> str:
        """A new iterator right after the last record handled in the shard, or at its
        oldest record when none was (or when that record is past the shard's trim point:
        what is gone cannot be read)."""
        handled = self._handled.get(shard_id)
        if handled is not None:
            try:
                return str(
                    streams.get_shard_iterator(
                        StreamArn=self.stream_arn,
                        ShardId=shard_id,
                        ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                        SequenceNumber=handled,
                    )["ShardIterator"]
                )
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code")
                if code not in ("TrimmedDataAccessException", "ValidationException"):
                    raise  # a throttle, an endpoint down: the next try mints it again
                if code == "ValidationException":  # not a record of this shard: at least once
                    log.warning("%s: cannot resume shard %s: %s", self.name, shard_id, error)
        return str(
            streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )

    def _loop(self) -> None:
        streams = aws.client("dynamodbstreams")
        last_discovery = 0.0
        # Restarted after a failure (`_guarded`): the iterators may be what failed (one
        # expired, or the endpoint was reset); new ones start from the places handled.
        self._iterators.clear()
        while self._gate():
            if self._known_generation != self.generation:
                self._iterators.clear()
                self._closed.clear()
                self._handled = self._resume_from
                self._resume_from = {}
                self._caught_up_at = None
                self._known_generation = self.generation
                streams = aws.client("dynamodbstreams")
                last_discovery = 0.0
            if not self._iterators or clock.monotonic() - last_discovery > 5.0:
                self._discover(streams)  # new shards appear as old ones close
                last_discovery = clock.monotonic()
            seen = stream_wakeup.counter
            generation = self.generation
            got_any = False
            if self.faults is not None:  # batches delivered again, late (fault injection)
                for late in self.faults.stream_due(self.name):
                    got_any = True
                    self._process(late, replay=True)
            for shard_id, iterator in list(self._iterators.items()):
                answer = self._get_records(streams, shard_id, iterator)
                next_iterator = answer.get("NextShardIterator")
                if next_iterator:
                    self._iterators[shard_id] = next_iterator
                else:
                    self._iterators.pop(shard_id, None)
                    self._closed.add(shard_id)
                read = answer.get("Records", [])
                records = [r for r in read if self.accepts(r)]
                if records and generation == self.generation:
                    got_any = True
                    self._process(records)
                if self._retired() or generation != self.generation:
                    break  # the checkpoint stays before what was not handled
                if read:  # handled, or refused by the filter, or given up on
                    self._handled[shard_id] = read[-1]["dynamodb"]["SequenceNumber"]
            self._polls += 1
            if not got_any:
                self._caught_up_at = seen
                stream_wakeup.wait(
                    seen,
                    self.idle_wait_seconds,
                    lambda: self._stop.is_set() or not self._running.is_set(),
                )

    def _retired(self) -> bool:
        """Stopping, or its engine's life ended (`restart_engine`): it must neither retry
        nor move its checkpoint. Its handlers' calls fail at once then (the dead engine's
        environments are gone), so retrying would soon give up on the batch and move the
        checkpoint past records its successor, resuming from that checkpoint, then never
        reads: an owed invocation or a timer never sent."""
        return self._stop.is_set() or self.life != incarnation.current()

    def _get_records(self, streams: Any, shard_id: str, iterator: str) -> dict[str, Any]:
        """GetRecords. An expired iterator (`ExpiredIteratorException`) is replaced by a new
        one right after the last record handled, as an event source mapping does. When the
        iterator points before the oldest record the shard still holds
        (`TrimmedDataAccessException`), read on from the oldest one: what is gone cannot be
        read. DynamoDB trims after 24 hours; DynamoDB Local as soon as a cancelled
        transaction used the shard's first sequence numbers, so without it the reader of a
        new table stalls for good."""
        try:
            return dict(streams.get_records(ShardIterator=iterator, Limit=self.batch_size))
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code not in ("ExpiredIteratorException", "TrimmedDataAccessException"):
                raise
        if code == "ExpiredIteratorException":
            log.info(
                "%s: shard %s: iterator expired; reading on from its place", self.name, shard_id
            )
            again = self._iterator_at_place(streams, shard_id)
        else:
            log.info(
                "%s: shard %s trimmed before its iterator; reading from its oldest record",
                self.name,
                shard_id,
            )
            again = streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        return dict(streams.get_records(ShardIterator=again, Limit=self.batch_size))

    def _process(self, records: list[dict[str, Any]], replay: bool = False) -> None:
        self._processing = True
        try:
            shaped = [events.stream_record(r, self.stream_arn) for r in records]
            start, attempts = 0, 0
            generation = self.generation
            while start < len(shaped) and not self._retired():
                if generation != self.generation:
                    return
                batch = shaped[start:]
                failed: list[str] | None
                with self.activity.track():
                    try:
                        failed = events.failed_ids(self.invoke({"Records": batch}))
                    except Exception:
                        log.exception("%s: handler raised", self.name)
                        failed = [batch[0]["dynamodb"]["SequenceNumber"]]
                if not failed:
                    faults = None if replay or start else self.faults
                    if faults is not None and faults.stream_handled(self.name, records):
                        self._process(records, replay=True)  # delivered twice
                    return
                sequence = [r["dynamodb"]["SequenceNumber"] for r in shaped]
                first = min((sequence.index(s) for s in failed if s in sequence), default=start)
                if first > start:
                    attempts = 0  # progress: the retry budget is per record
                start = max(first, start)
                attempts += 1
                if attempts >= self.max_attempts:
                    log.error(
                        "%s: giving up on %d record(s) from sequence %s after %d tries",
                        self.name,
                        len(shaped) - start,
                        sequence[start],
                        attempts,
                    )
                    return
                self._stop.wait(self.backoff_seconds * 2 ** (attempts - 1))
        finally:
            self._processing = False
