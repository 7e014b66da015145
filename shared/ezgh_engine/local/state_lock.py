"""One `ezgh dev` per state dir: an exclusive lock on `<state-dir>/lock`, held for life.

Two processes on one state dir would each replay the journal and then append their own
requests to it (and a second start truncates what it takes for a torn tail: the first's
append in progress), and `--reset` would delete the files under a running engine. So
`ezgh dev` takes this lock before it resets or reads anything, and refuses to start while
another process holds it. `flock` locks die with their process (a `kill -9` leaves no stale
lock) and are not inherited by the execution environments (they come from a forkserver, a
fresh interpreter, and Python's descriptors are close-on-exec).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ezgh_engine.local import private_files

LOCK_NAME = "lock"


class StateDirInUse(RuntimeError):
    """Another live process holds the state dir's lock."""


class StateLock:
    """The held lock of one state dir; `release` (or the process's end) lets it go."""

    def __init__(self, state_dir: Path, fd: int) -> None:
        self.state_dir = state_dir
        self._fd: int | None = fd

    def note(self, text: str) -> None:
        """Say in the lock file who holds it (shown to a process refused the lock)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, text.encode(), 0)

    def release(self) -> None:
        """Unlock and close (the file stays: removing it would race a process opening it)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None


def lock_state_dir(state_dir: Path, holder: str) -> StateLock:
    """Take `state_dir`'s lock (creating the dir) for this process, noting `holder` in it, or
    raise `StateDirInUse` naming the holder the lock file names."""
    private_files.state_dir(state_dir)  # made, or narrowed, to this user's alone
    path = state_dir / LOCK_NAME
    fd = private_files.open_private_fd(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise StateDirInUse(
            f"state dir {state_dir} is in use by {other}: stop that ezgh dev first, "
            "or give this one another --state-dir"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    lock = StateLock(state_dir, fd)
    lock.note(holder)
    return lock
