"""The same sequential workflow on DBOS Transact with SQLite, for the latency ratio.

DBOS is optional (`pip install -e '.[bench]'`); without it `run()` answers why it was skipped.
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import time
from pathlib import Path
from typing import Any


def run(steps: int) -> tuple[list[float] | None, str]:
    """Per-step gaps (seconds) of one DBOS run of `steps` steps, or (None, why not)."""
    try:
        from dbos import DBOS
    except ImportError as exc:
        return None, f"dbos is not installed ({exc}); pip install -e '.[bench]'"
    stamps: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ezgh-bench-dbos-") as folder:
        database = Path(folder) / "dbos.sqlite"
        config: Any = {
            "name": "ezgh-bench",
            "system_database_url": f"sqlite:///{database}",
            "run_admin_server": False,
            "log_level": "WARNING",
        }
        try:
            DBOS(config=config)

            @DBOS.step()
            def step(i: int) -> dict[str, int]:
                stamps.append(time.perf_counter())
                return {"i": i}

            @DBOS.workflow()
            def sequence(n: int) -> dict[str, int]:
                done = 0
                for i in range(n):
                    done += 1 if step(i)["i"] == i else 0
                return {"steps": done}

            DBOS.launch()
            answer = sequence(steps)
            if answer != {"steps": steps}:
                return None, f"DBOS run answered {answer}"
        except Exception as exc:
            return None, f"DBOS failed: {exc!r}"
        finally:
            try:
                DBOS.destroy(destroy_registry=True)
            except Exception as exc:
                logging.getLogger(__name__).debug("DBOS.destroy: %r", exc)
    return [b - a for a, b in itertools.pairwise(stamps)], ""
