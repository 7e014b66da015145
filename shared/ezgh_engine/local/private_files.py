"""`ezgh dev`'s state dir is its user's alone: its files mode 0600, its directories 0700.

They hold the admin API key (`dev.env`, `state.json`), the token secret and the apps'
signing keys (`state.json`), and every item and message of every table and queue (the
journal and its snapshot). A file is created private (`os.open` with mode 0600, whatever the
umask) and a file an older version left wider is narrowed when it is opened again. The state
dir itself is narrowed when `ezgh dev` made it or when it holds nothing but `ezgh dev`'s own
files: a directory the user chose that holds other things (`--state-dir ~`) keeps its mode.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

FILE_MODE = 0o600
DIR_MODE = 0o700
# What `ezgh dev` keeps in a state dir (and its temporary files, `.<name>.tmp`).
STATE_ENTRIES = frozenset({"lock", "dev.env", "state.json", "aws"})

_FLAGS = {
    "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
}


def private_dir(path: Path) -> Path:
    """`path` (and its parents) made, and `path` itself mode 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def state_dir(path: Path) -> Path:
    """The state dir made (0700), or narrowed to 0700 if it holds only `ezgh dev`'s files."""
    if not path.exists():
        return private_dir(path)
    if all(
        name in STATE_ENTRIES or (name.startswith(".") and name.endswith(".tmp"))
        for name in os.listdir(path)
    ):
        os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, mode: str) -> IO[Any]:
    """`open(path, mode)` for `mode` "ab", "wb" or "w", the file mode 0600 (narrowed if it
    was wider)."""
    fd = os.open(path, _FLAGS[mode] | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def open_private_fd(path: Path, flags: int) -> int:
    """`os.open(path, flags)`, the file mode 0600 (narrowed if it was wider)."""
    fd = os.open(path, flags, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def fsync_directory(path: Path) -> None:
    """Make a rename (or a new file) in the directory `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
