"""`ezgh dev`'s state dir is its user's alone: `dev.env`, `state.json`, the lock, the journal,
its snapshot and a damaged tail set aside are mode 0600, the state dir and `aws/` 0700, even
under a permissive umask, and files an older version left 0644 are narrowed when opened again.
A directory the user chose that holds other files keeps its mode. (`ezgh dev` itself, end to
end: tests/e2e/test_dev_secrets.py.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from ezgh_engine.local.persistence import DevState, Journal, write_atomically
from ezgh_engine.local.state_lock import lock_state_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_new_state_dir_and_its_files_are_private(tmp_path: Path) -> None:
    state = tmp_path / "fresh" / ".ezgh"
    lock = lock_state_dir(state, "test")
    try:
        write_atomically(state / "dev.env", "EZGH_API_KEY=secret\n")
        DevState(state).save(apiKey="secret", tokenSecret="s")
        journal = Journal(state / "aws" / "journal.log", sync=False)
        journal.open()
        journal.append({"t": "checkpoint"})
        journal.compact([{"t": "mappings", "mappings": []}])
        journal.close()
    finally:
        lock.release()
    assert mode(state) == 0o700 and mode(state / "aws") == 0o700
    for name in ("dev.env", "state.json", "lock", "aws/journal.log", "aws/snapshot.log"):
        assert mode(state / name) == 0o600, name


def test_files_an_older_version_left_open_are_narrowed(tmp_path: Path) -> None:
    state = tmp_path / ".ezgh"
    (state / "aws").mkdir(parents=True, mode=0o755)
    for name in ("dev.env", "state.json", "lock", "aws/journal.log"):
        (state / name).write_text("")
        os.chmod(state / name, 0o644)
    os.chmod(state, 0o755)
    lock = lock_state_dir(state, "test")
    try:
        (state / "state.json").write_text("{}")
        DevState(state).save(apiKey="k")
        write_atomically(state / "dev.env", "x\n")
        journal = Journal(state / "aws" / "journal.log", sync=False)
        journal.open()
        journal.close()
    finally:
        lock.release()
    assert mode(state) == 0o700 and mode(state / "aws") == 0o700
    for name in ("dev.env", "state.json", "lock", "aws/journal.log"):
        assert mode(state / name) == 0o600, name


def test_a_damaged_tail_set_aside_is_private(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "aws" / "journal.log", sync=False)
    journal.open()
    journal.append({"t": "checkpoint", "n": 1})
    journal.append({"t": "checkpoint", "n": 2})
    journal.close()
    raw = bytearray((tmp_path / "aws" / "journal.log").read_bytes())
    raw[10] ^= 0xFF  # damage the first record: the second is kept aside
    (tmp_path / "aws" / "journal.log").write_bytes(bytes(raw))
    Journal(tmp_path / "aws" / "journal.log", sync=False).open()
    (aside,) = (tmp_path / "aws").glob("journal.log.damaged-*")
    assert mode(aside) == 0o600


def test_a_chosen_directory_with_other_files_keeps_its_mode(tmp_path: Path) -> None:
    chosen = tmp_path / "project"
    chosen.mkdir(mode=0o755)
    os.chmod(chosen, 0o755)
    (chosen / "README.md").write_text("mine")
    lock = lock_state_dir(chosen, "test")
    try:
        write_atomically(chosen / "dev.env", "x\n")
    finally:
        lock.release()
    assert mode(chosen) == 0o755
    assert mode(chosen / "dev.env") == 0o600 and mode(chosen / "lock") == 0o600
