"""Images of the emulator's state taken while `ezgh dev` runs (checkpoints), off the
request path.

A clean stop writes an image of the whole journal (`local.image`); after a crash there is
none, and a start replayed everything journaled since the last clean stop (or since the
beginning). So while the engine runs, each time the journal grew by `EZGH_DEV_IMAGE_BYTES`
since the last image, `JournalingApp` calls `due()`, and this thread takes an image of the
prefix journaled by then (`Emulator.checkpoint`): a start after a crash loads it and replays
only the records after it. Driven by the journal's growth, not by a timer: an idle engine
takes none, a busy one bounds the tail a crash leaves to replay.

A checkpoint that fails (a pickle error, a full disk) is logged and costs only time: the
older image (or none) stays, the journal is untouched, and the next one is due after as much
growth again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("ezgh.local.checkpoints")


class Checkpointer:
    """A thread that calls `take` each time `due()` was called since its last call (calls
    meanwhile fold into one)."""

    def __init__(self, take: Callable[[], object]) -> None:
        self._take = take
        self._due = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="image-checkpoints", daemon=True)
        self.taken = 0  # calls of `take` made (whatever they answered)

    def start(self) -> None:
        self._thread.start()

    def due(self) -> None:
        """An image is due (cheap: called under the journal's lock)."""
        self._due.set()

    def stop(self) -> None:
        """End the thread, after the checkpoint in progress if one is."""
        self._stopping = True
        self._due.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._due.wait()
            if self._stopping:
                return
            self._due.clear()
            try:
                self._take()
            except Exception:  # the journal still has it all: the next start replays more
                log.warning("could not take an image of the state", exc_info=True)
            self.taken += 1
