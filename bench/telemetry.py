"""The bytes a run's observability writes to CloudWatch Logs: its EMF metric documents and the
engine's JSON log lines, as a deployed function writes them (`ezgh_engine.observability`).

Deployed, both are lines of a function's log, billed per GB ingested (bench/prices.py). The
meter makes the bench's in-process handlers write them as in Lambda, and counts them:

- EMF documents: `EZGH_TELEMETRY_DIR` points the sink at a file (as `ezgh dev` does); the
  document bytes are the file's growth (a line each, as stdout gets them in Lambda).
- log lines: the engine's loggers get Powertools' JSON handler at INFO with the bound IDs
  (`observability.logs.configure` in Lambda), writing into a counter instead of stdout.

An upper bound: the local stream reader invokes the observe function per record, and each
invocation writes its own EMF document, where deployed one batching window writes one for
all its records. Not counted: Lambda's own START/END/REPORT lines (there without the
engine's observability).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from ezgh_engine.observability import logs, sinks


class _Counter:
    """A stream that keeps only the number of bytes written to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0

    def write(self, text: str) -> int:
        with self._lock:
            self.bytes += len(text.encode())
        return len(text)

    def flush(self) -> None:
        pass


class TelemetryMeter:
    """Counts the observability bytes the engine writes in this process (see the module's
    doc); `take()` answers those since the last `take()`."""

    def __init__(self, directory: Path) -> None:
        self._emf = directory / sinks.METRICS_FILE
        self._dir = directory
        self._lines = _Counter()
        self._saved: dict[str, Any] = {}
        self._taken = 0

    def __enter__(self) -> TelemetryMeter:
        from aws_lambda_powertools import Logger

        self._saved["env"] = os.environ.get(sinks.ENV_TELEMETRY_DIR)
        os.environ[sinks.ENV_TELEMETRY_DIR] = str(self._dir)
        engine = logging.getLogger(logs.ENGINE_LOGGER)
        self._saved["logger"] = (engine.level, engine.propagate, list(engine.handlers))
        source = Logger(service="bench", logger_handler=logging.StreamHandler(self._lines))
        for handler in source.handlers:
            logs.install_filter(handler)
        engine.handlers = list(source.handlers)
        engine.setLevel(logging.INFO)
        engine.propagate = False
        self._taken = self._total()
        return self

    def __exit__(self, *exc: object) -> None:
        env = self._saved.get("env")
        if env is None:
            os.environ.pop(sinks.ENV_TELEMETRY_DIR, None)
        else:
            os.environ[sinks.ENV_TELEMETRY_DIR] = env
        engine = logging.getLogger(logs.ENGINE_LOGGER)
        engine.level, engine.propagate, engine.handlers = self._saved["logger"]

    def _total(self) -> int:
        emf = self._emf.stat().st_size if self._emf.exists() else 0
        return emf + self._lines.bytes

    def take(self) -> int:
        """The bytes written since the last `take()` (or the meter's start)."""
        total = self._total()
        found, self._taken = total - self._taken, total
        return found
