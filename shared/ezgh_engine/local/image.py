"""Images of the emulator's state, loaded by a start instead of a replay of the journal.

The journal (`local.persistence`) is the truth about the state, and replaying it costs a few
milliseconds a request: a start grew slower with the state (7 s of CPU to replay a modest
session). An image is moto's state for the journaled services, pickled, with the *mark* of
the journal prefix it holds: the snapshot's generation and size, the prefix's length in
bytes and a digest of the bytes ending there. A start loads the image if the journal on
disk still begins with that prefix (the same snapshot, at least that long, the same bytes
before the mark's end) and was written by the same Python and moto, then replays only the
records after the prefix (`persistence.Journal.open_after`), with the machinery a whole
replay uses.

Two moments write one, to `<state-dir>/aws/image.pickle`:

- a clean stop (`Emulator.stop`, once nothing runs): its prefix is the whole journal, so the
  next start replays nothing;
- a checkpoint while the engine runs (`Emulator.checkpoint`, `local.checkpoints`), each time
  the journal grew by `EZGH_DEV_IMAGE_BYTES` since the last image: every request to the
  emulator is held back while moto's objects are pickled (`persistence.RequestHold`), so the
  image is of exactly the prefix journaled by then; the file is written after the requests
  go on. A start after a crash (`kill -9`, a power loss) then replays the tail since it.

The image is a cache of the journal, never a second truth: one that is damaged, of another
journal or version, or whose pickling failed costs time (the replay), not state. The prefix
it names is made durable before the image is renamed into place, so a power loss can cut
the journal only after it. `ezgh dev --reset` and a compaction delete it.

As after a replay, every SQS message not deleted is visible at once: the only consumers of
the emulator's queues are the runtime's own pollers and environments, gone with the process,
so none still holds a message a receive hid. Unlike a replay, a message keeps its receive
count (a message that failed before a stop is no newer after it: its dead-letter limit
holds).

The file is unpickled, so it is trusted as the journal and `state.json` are: it lives in the
private state dir (`local.private_files`).
"""

from __future__ import annotations

import contextlib
import copyreg
import gc
import hashlib
import io
import logging
import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ezgh_engine.local import private_files

log = logging.getLogger("ezgh.local.image")

IMAGE_NAME = "image.pickle"
# Bumped when what an image holds changes shape: an older image is then not loaded.
IMAGE_FORMAT = 1
# The services whose state the journal keeps: those `persistence.snapshot_records` rebuilds,
# and X-Ray (the runs' trace segments, which a replay of the journal puts back too).
SERVICES = ("dynamodb", "sqs", "s3", "scheduler", "xray")
# Of `SERVICES`, those whose state is put back after the rest (`Later`): at the first request
# for one of them, or in the background once the engine serves. moto's X-Ray imports AWS's
# X-Ray SDK, whose recorder makes a boto3 client: a tenth of a start's CPU, for traces
# nothing of a start reads.
LATER = ("xray",)
# How much of the prefix's end its mark digests (records carry IDs and times: two journals
# that differ before a length never end alike there).
TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class JournalMark:
    """Which journal prefix an image holds: the snapshot it follows (generation, bytes),
    the prefix's length (`size`, at a record's end) and a digest of its last `TAIL_BYTES`."""

    generation: int
    snapshot_size: int
    size: int
    tail: str


@dataclass
class Loaded:
    """An image's runtime state besides moto's: as `persistence.Restored` reports a replay's."""

    requests: int
    kept: list[dict[str, Any]] = field(default_factory=list)
    services: list[str] = field(default_factory=list)  # of the journal's requests
    # What the runtime kept with the image (`Emulator.keep`): answers of that life's
    # provisioning, which the next start adopts instead of asking again.
    extras: dict[str, Any] = field(default_factory=dict)
    later: Later | None = None  # the state of `LATER`'s services, not installed yet
    offset: int = 0  # the journal's bytes the image holds: replay from there on


def journal_mark(
    journal_path: Path, generation: int, snapshot_size: int, size: int | None = None
) -> JournalMark:
    """The mark of the journal's first `size` bytes (None: all of it now on disk), read not
    parsed, after the snapshot of `generation` (`snapshot_size` bytes; 0 and 0: none)."""
    on_disk = journal_path.stat().st_size if journal_path.exists() else 0
    size = on_disk if size is None else min(size, on_disk)
    digest = hashlib.sha256()
    if size:
        with open(journal_path, "rb") as file:
            file.seek(max(0, size - TAIL_BYTES))
            digest.update(file.read(size - max(0, size - TAIL_BYTES)))
    return JournalMark(generation, snapshot_size, size, digest.hexdigest())


def is_prefix(mark: JournalMark, journal_path: Path, generation: int, snapshot_size: int) -> bool:
    """Whether the journal on disk (after the snapshot of `generation`, `snapshot_size`
    bytes) begins with the prefix `mark` names."""
    if (mark.generation, mark.snapshot_size) != (generation, snapshot_size):
        return False
    on_disk = journal_path.stat().st_size if journal_path.exists() else 0
    if on_disk < mark.size:
        return False
    return journal_mark(journal_path, generation, snapshot_size, mark.size) == mark


def _versions() -> dict[str, Any]:
    import moto

    return {
        "format": IMAGE_FORMAT,
        "python": list(sys.version_info[:2]),
        "moto": str(moto.__version__),
    }


# Locks and conditions in moto's objects (a queue's message lock, an S3 key's) hold nothing
# of the state: a loaded image gets new ones.
_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())
_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[_LOCK] = lambda lock: (threading.Lock, ())
_DISPATCH[_RLOCK] = lambda lock: (threading.RLock, ())
_DISPATCH[threading.Condition] = lambda condition: (threading.Condition, ())


def _limited_size_dict(attributes: dict[str, Any]) -> Any:
    """An item's attributes as moto keeps them (a `LimitedSizeDict`), rebuilt without the
    400 KB check moto's `__setitem__` makes per attribute (a sum over every attribute set
    before it: quadratic in an item's attributes, and most of an image's loading). Each
    item passed the check when it was written."""
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict

    rebuilt = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.update(rebuilt, attributes)
    return rebuilt


def _dispatch_table() -> dict[Any, Any]:
    """How an image pickles what it holds: `_DISPATCH`, and items' attributes as plain
    dicts (`_limited_size_dict`)."""
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict

    return {**_DISPATCH, LimitedSizeDict: lambda attrs: (_limited_size_dict, (dict(attrs),))}


class Later:
    """The pickled state of services an image puts back after the rest (`LATER`).

    `install()` unpickles it into moto, once, whichever thread asks first: the emulator
    asks before it serves any request for one of `services` (`Emulator`'s gate), before a
    reset or an image of its own, and the runtime once it serves everything else. Until
    then moto holds nothing of those services (nothing else reads them)."""

    def __init__(self, services: list[str], saved: bytes) -> None:
        self.services = frozenset(services)
        self._saved = saved
        self._lock = threading.Lock()
        self.pending = True

    def install(self) -> None:
        """Put the state in place (once; at once if done); a damaged one is logged and
        left out (their state, traces, is not the engine's: nothing waits on it)."""
        if not self.pending:
            return
        with self._lock:
            if not self.pending:
                return
            try:
                with _collector_paused():
                    saved = pickle.loads(self._saved)  # the private state dir: trusted
                _install(saved)
            except Exception:
                log.exception("could not put back the image's %s state", sorted(self.services))
            self.pending, self._saved = False, b""

    def discard(self) -> None:
        """Never install it (the state it belongs to is being wiped)."""
        with self._lock:
            self.pending, self._saved = False, b""

    def saved_as_is(self) -> bytes | None:
        """The pickled state still pending, for a new image (None: installed, in moto)."""
        with self._lock:
            return self._saved if self.pending else None


def _backends(services: tuple[str, ...] = SERVICES) -> dict[str, dict[str, dict[str, Any]]]:
    """moto's backends of `services`: service -> account -> region -> backend."""
    from moto.backends import get_backend

    found: dict[str, dict[str, dict[str, Any]]] = {}
    for service in services:
        if service in LATER and f"moto.{service}.models" not in sys.modules:
            # Never asked for in this process: no state, and no import of it (0.2 s for
            # X-Ray's SDK, with every request held back while a checkpoint pickles).
            found[service] = {}
            continue
        live: Any = get_backend(service)  # type: ignore[call-overload]
        found[service] = {account: dict(regions) for account, regions in live.items()}
    return found


def _install(saved: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Put an image's backends in place of moto's (just reset: empty)."""
    from moto.backends import get_backend

    for service, accounts in saved.items():
        live: Any = get_backend(service)  # type: ignore[call-overload]
        for account, regions in accounts.items():
            for region, backend in regions.items():
                live[account][region] = backend
    _register_buckets(saved.get("s3", {}))


def _register_buckets(accounts: dict[str, dict[str, Any]]) -> None:
    """moto keeps every bucket's owner in a registry beside the backends
    (`s3_backends.bucket_accounts`), filled when a bucket is made, not when one is unpickled:
    without it, the next `CreateBucket` of a bucket the image holds (the runtime provisions
    its payload bucket on every start) makes a new, empty bucket in its place."""
    from moto.s3.models import s3_backends

    for account, partitions in accounts.items():
        for partition, backend in partitions.items():
            for name in getattr(backend, "buckets", {}):
                s3_backends.bucket_accounts[name] = (partition, account)


def _release_received() -> None:
    """Make visible the SQS messages a receive hid before the stop (their consumers went
    with it), as a replay of the journal does."""
    from moto.backends import get_backend

    live: Any = get_backend("sqs")
    for regions in live.values():
        for backend in regions.values():
            for queue in backend.queues.values():
                with queue._messages_lock:
                    for message in queue._messages:
                        message.visible_at = 0.0
                    queue._pending_messages.clear()


def capture(
    mark: JournalMark,
    requests: int,
    kept: list[dict[str, Any]],
    services: list[str],
    extras: dict[str, Any] | None = None,
    later: Later | None = None,
) -> bytes:
    """The image of moto's state now, as the bytes of its file (the caller holds back every
    request to moto and every journal append: the state is the prefix `mark` names). Two
    pickles: a header (the versions and the mark, checked without unpickling moto's
    objects), then the body, in which the state of `LATER`'s services is a pickle of its own
    (`later`: the state a start has not installed yet, kept as it was)."""
    buffer = io.BytesIO()
    pickle.dump({**_versions(), "mark": asdict(mark)}, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _dispatch_table()
    deferred = tuple(s for s in LATER if s in SERVICES)
    kept_later = later.saved_as_is() if later is not None else None
    if kept_later is None:
        kept_later = _pickled(_backends(deferred))
    body = {
        "backends": _backends(tuple(s for s in SERVICES if s not in deferred)),
        "later": {"services": list(deferred), "saved": kept_later},
        "requests": requests,
        "kept": kept,
        "services": services,
        "extras": dict(extras or {}),
    }
    pickler.dump(body)
    return buffer.getvalue()


def write_temporary(path: Path, data: bytes) -> Path:
    """Write an image's bytes beside `path`, durably; answer the temporary file, which
    `install_file` renames into place."""
    temporary = _temporary(path)
    with private_files.open_private(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return temporary


def install_file(temporary: Path, path: Path, *, sync: bool = True) -> None:
    """Rename a written image into place (atomic: a crash leaves the old one or the new);
    with `sync`, make the rename durable (else the caller does: `sync_directory`)."""
    os.replace(temporary, path)
    if sync:
        sync_directory(path)


def sync_directory(path: Path) -> None:
    """Make a rename to `path` durable. Not needed for correctness (an older image, or
    none, still names a prefix of the journal, or nothing), but then the next start
    replays more."""
    private_files.fsync_directory(path.parent)


def load(path: Path, accepts: Callable[[JournalMark], bool]) -> Loaded | None:
    """Install the image at `path` into moto (just reset) if `accepts` its mark (a prefix of
    the journal on disk) and it is of this Python and moto; None, and moto as it was
    (empty), if there is none or it is not. `Loaded.offset`: where the journal's records
    the image does not hold begin."""
    if not path.exists():
        return None
    try:
        with open(path, "rb") as file:
            header = pickle.load(file)  # the private state dir: trusted as the journal is
            if not isinstance(header, dict) or _stale(header, path):
                return None
            mark = JournalMark(**header["mark"])
            if not accepts(mark):
                log.info("image %s is not of a prefix of the journal: replaying it", path)
                return None
            with _collector_paused():
                body = pickle.load(file)
            backends, requests, kept = body["backends"], int(body["requests"]), body["kept"]
            services = list(body["services"])
            extras = dict(body.get("extras") or {})
            deferred = body.get("later")
            later = Later(list(deferred["services"]), deferred["saved"]) if deferred else None
    except Exception as error:  # damaged: the journal still has it all
        log.warning("image %s could not be read (%s); replaying the journal", path, error)
        return None
    _install(backends)
    _release_received()
    return Loaded(
        requests=requests,
        kept=list(kept),
        services=services,
        extras=extras,
        later=later,
        offset=mark.size,
    )


def _pickled(value: Any) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _dispatch_table()
    pickler.dump(value)
    return buffer.getvalue()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Unpickling makes hundreds of thousands of objects, none of them garbage, and each
    allocation past a threshold has the cyclic collector walk the young ones again: three
    quarters of the load's CPU. Paused meanwhile (refcounting still frees)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _stale(header: dict[str, Any], path: Path) -> bool:
    """Whether an image's header says it is not of this Python and moto."""
    if any(header.get(key) != value for key, value in _versions().items()):
        log.info("image %s is of another version; replaying the journal", path)
        return True
    return False


def discard(path: Path) -> None:
    """Delete the image (a reset, a compaction: it no longer matches anything)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    with contextlib.suppress(FileNotFoundError):
        _temporary(path).unlink()


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")
