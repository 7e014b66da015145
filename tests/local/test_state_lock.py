"""`ezgh dev`'s state dir lock: one holder at a time, named to the one refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from ezgh_engine.local.state_lock import StateDirInUse, lock_state_dir


def test_a_held_state_dir_is_refused_naming_its_holder_until_released(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    held = lock_state_dir(state_dir, "ezgh dev (pid 1, port 8288)")
    with pytest.raises(StateDirInUse, match=r"in use by ezgh dev \(pid 1, port 8288\)"):
        lock_state_dir(state_dir, "ezgh dev (pid 2, port 8289)")
    held.release()
    again = lock_state_dir(state_dir, "ezgh dev (pid 2, port 8289)")
    assert (state_dir / "lock").read_text() == "ezgh dev (pid 2, port 8289)"
    again.release()
