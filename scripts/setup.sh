#!/usr/bin/env bash
# Create .venv and install the engine, the SDK and the test tools (quick when already done).
# Prints its phases, and pip's own progress while it installs (a copy goes to .venv/install.log).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
began=$SECONDS
phase() { echo "setup [$((SECONDS - began))s]: $*"; }
if [ ! -x .venv/bin/python ]; then
  phase "creating .venv with $("$PYTHON" --version 2>&1)..."
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.ezgh-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ sdk/pyproject.toml -nt "$stamp" ]; then
  log=.venv/install.log
  : >"$log"
  # pip's progress bars need a terminal: on one, pip writes to it directly (and the log
  # keeps only this script's lines); elsewhere (CI, a pipe) its lines go to both.
  pip_run() {
    if [ -t 1 ]; then
      echo "+ pip $*" >>"$log"
      .venv/bin/python -m pip "$@" --progress-bar on
    else
      .venv/bin/python -m pip "$@" --progress-bar off 2>&1 | tee -a "$log"
    fi
  }
  phase "upgrading pip..."
  if ! pip_run install --upgrade pip; then
    echo "setup failed while upgrading pip; the log is in $log" >&2
    exit 1
  fi
  phase "installing the engine, the SDK and the dev tools (first time: about a minute)..."
  # --no-compile, then compileall on every core: pip byte-compiles what it installs one file
  # at a time, about 40 s of CPU (two thirds of it aws_cdk's generated modules), the longest
  # part of a setup from pip's cache.
  if ! pip_run install --no-compile -e ./sdk -e '.[dev,infra]'; then
    echo "setup failed while installing; the log is in $log" >&2
    exit 1
  fi
  phase "byte-compiling the installed packages..."
  site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # (A file that does not compile is no failure, as under pip: Python compiles on import.)
  if ! .venv/bin/python -m compileall -q -j 0 "$site" >>"$log" 2>&1; then
    phase "some files did not byte-compile (listed in $log); going on"
  fi
  touch "$stamp"
  phase "ready: .venv (ezgh: .venv/bin/ezgh)"
else
  phase "ready: .venv is up to date"
fi
