"""Where telemetry documents and `ezgh dev` lines go.

- EMF documents: deployed (in Lambda) to stdout, the function's log, which CloudWatch reads
  as metrics; with `EZGH_TELEMETRY_DIR` (`ezgh dev`, tests) appended to `metrics.jsonl`
  there instead; elsewhere (a test importing a handler) nowhere.
- `ezgh dev` lines: appended to `lines.log` in `EZGH_TELEMETRY_DIR`, and printed on stderr
  with `EZGH_DEV_PROGRESS=1` (`ezgh dev` without `--quiet`; every execution environment
  shares the terminal).

A file is appended with one `write` per line (`O_APPEND`): lines of concurrent execution
environments do not interleave.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ENV_TELEMETRY_DIR = "EZGH_TELEMETRY_DIR"
ENV_DEV_PROGRESS = "EZGH_DEV_PROGRESS"
METRICS_FILE = "metrics.jsonl"
LINES_FILE = "lines.log"


def telemetry_dir() -> Path | None:
    value = os.environ.get(ENV_TELEMETRY_DIR)
    return Path(value) if value else None


def in_lambda() -> bool:
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_document(document: dict[str, Any]) -> None:
    """One EMF document, where this environment's metrics go (see the module's doc)."""
    text = json.dumps(document, separators=(",", ":"))
    where = telemetry_dir()
    if where is not None:
        _append(where / METRICS_FILE, text + "\n")
    elif in_lambda():
        print(text, flush=True)


def write_line(line: str) -> None:
    """One `ezgh dev` line (nothing when this is not `ezgh dev` or a test that asks)."""
    where = telemetry_dir()
    if where is not None:
        _append(where / LINES_FILE, line + "\n")
    if os.environ.get(ENV_DEV_PROGRESS) == "1":
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
