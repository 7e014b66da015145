#!/usr/bin/env bash
# Create .venv and install the engine, the SDK and the test tools (quick when already done).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.ezgh-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ sdk/pyproject.toml -nt "$stamp" ]; then
  echo "setting up .venv (first time: about a minute)..."
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install --upgrade pip \
         && .venv/bin/python -m pip install -e ./sdk -e '.[dev,infra]'; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "setup failed; the whole log is in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
