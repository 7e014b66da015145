"""The journal's group commit: no answer before its record is durable, and concurrent
writers share one sync."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from ezgh_engine.local.group_commit import GroupCommit
from ezgh_engine.local.persistence import Journal, read_records


class _Disk:
    """Records handed to the "OS" and the ones a sync made durable (a sync covers what was
    handed over before it started)."""

    def __init__(self) -> None:
        self.handed: list[int] = []
        self.durable = 0
        self.syncs = 0
        self.gate: threading.Event | None = None  # a sync waits on it (when set)
        self.fail = False

    def sync(self) -> None:
        covered = len(self.handed)
        if self.gate is not None:
            self.gate.wait()
        if self.fail:
            raise OSError("EIO")
        self.syncs += 1
        self.durable = max(self.durable, covered)


def test_a_sync_covers_every_record_written_before_it() -> None:
    disk = _Disk()
    commits = GroupCommit(disk.sync)
    disk.handed.append(1)
    first = commits.written(10)
    disk.handed.append(2)
    second = commits.written(10)
    commits.wait_durable(second)
    commits.wait_durable(first)  # already durable: no second sync
    assert (disk.syncs, disk.durable) == (1, 2)
    disk.handed.append(3)
    commits.wait_durable(commits.written(5))
    assert (disk.syncs, disk.durable) == (2, 3)


def test_a_failed_sync_raises_and_the_next_wait_syncs_again() -> None:
    disk = _Disk()
    commits = GroupCommit(disk.sync)
    disk.handed.append(1)
    position = commits.written(10)
    disk.fail = True
    with pytest.raises(OSError):
        commits.wait_durable(position)
    disk.fail = False
    commits.wait_durable(position)
    assert (disk.syncs, disk.durable) == (1, 1)


def test_writers_during_a_sync_wait_for_the_next_one_and_share_it() -> None:
    """One writer's sync is under way (held on a gate); seven more write and wait. None of
    them may return on that sync (it started before their records were written); once it
    ends, one sync makes all seven durable."""
    disk = _Disk()
    disk.gate = threading.Event()
    sync_started = threading.Event()
    commits = GroupCommit(disk.sync)
    progress = threading.Condition()
    counts = {"waiting": 0, "returned": 0}

    class _Counting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            with progress:
                counts["waiting"] += 1
                progress.notify_all()
            return super().wait(timeout)

    commits._cond = _Counting()
    first_sync = disk.sync

    def sync() -> None:
        sync_started.set()
        first_sync()

    commits._sync = sync
    seen: dict[int, int] = {}  # record -> records durable when its writer's wait returned
    lock = threading.Lock()  # the emulator's: one record written at a time

    def write() -> None:
        with lock:
            disk.handed.append(0)
            mine = len(disk.handed)
            position = commits.written(100)
        commits.wait_durable(position)
        seen[mine] = disk.durable
        with progress:
            counts["returned"] += 1
            progress.notify_all()

    first = threading.Thread(target=write)
    first.start()
    sync_started.wait()
    others = [threading.Thread(target=write) for _ in range(7)]
    for thread in others:
        thread.start()
    with progress:  # each of the seven is waiting (or, wrongly, already returned)
        progress.wait_for(lambda: counts["waiting"] + counts["returned"] >= 7)
    disk.gate.set()
    for thread in [first, *others]:
        thread.join()
    assert all(durable >= mine for mine, durable in seen.items()), seen
    assert (disk.durable, disk.syncs) == (8, 2)  # a sync each would be 8


def test_a_journal_answers_positions_to_wait_for_and_keeps_the_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.log")
    journal.open()
    positions = [journal.append({"n": n}, wait=False) for n in range(5)]
    assert all(p is not None for p in positions)
    journal.wait_durable(positions[-1])
    assert journal.commits.syncs == 1  # one for the five
    journal.wait_durable(positions[0])
    assert journal.commits.syncs == 1
    assert journal.append({"n": 5}, sync=False, wait=False) is None  # nothing to wait for
    journal.close()
    records = read_records(tmp_path / "journal.log")[0]
    assert [r["n"] for r in records] == list(range(6))
