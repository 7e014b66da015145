#!/usr/bin/env bash
# Create .venv and install the engine, the SDK and `ezgh dev` (quick when already done);
# with --dev, the test tools and the CDK too (pytest, mypy, ruff, playwright, schemathesis,
# aws-cdk-lib: scripts/test-deps.sh asks for them).
# Prints its phases, and pip's own progress while it installs (a copy goes to .venv/install.log).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
case "${1:-}" in
  "") want=runtime ;;
  --dev) want=dev ;;
  *) echo "usage: scripts/setup.sh [--dev]" >&2; exit 2 ;;
esac
began=$SECONDS
phase() { echo "setup [$((SECONDS - began))s]: $*"; }
if [ ! -x .venv/bin/python ]; then
  phase "creating .venv with $("$PYTHON" --version 2>&1)..."
  "$PYTHON" -m venv .venv
fi
# The stamp names what was installed: "runtime", or "dev" (which includes it; an older
# setup's empty stamp installed everything).
stamp=.venv/.ezgh-installed
have="$(cat "$stamp" 2>/dev/null || echo none)"
[ -n "$have" ] || have=dev
if [ "$have" = none ] || { [ "$have" = runtime ] && [ "$want" = dev ]; } \
   || [ pyproject.toml -nt "$stamp" ] || [ sdk/pyproject.toml -nt "$stamp" ]; then
  [ "$have" = dev ] && want=dev  # an update keeps what was there
  if [ "$want" = dev ]; then
    what="the engine, the SDK, the test tools and the CDK (first time: about a minute)"
    engine='.[dev,infra]'
  else
    what="the engine, the SDK and ezgh dev (first time: about 15 s)"
    engine='.'
  fi
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
  phase "installing $what..."
  # --no-compile, then compileall on every core: pip byte-compiles what it installs one file
  # at a time, about 40 s of CPU for --dev (two thirds of it aws_cdk's generated modules),
  # the longest part of a setup from pip's cache.
  if ! pip_run install --no-compile -e ./sdk -e "$engine"; then
    echo "setup failed while installing; the log is in $log" >&2
    exit 1
  fi
  phase "byte-compiling the installed packages..."
  site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # (A file that does not compile is no failure, as under pip: Python compiles on import.)
  if ! .venv/bin/python -m compileall -q -j 0 "$site" >>"$log" 2>&1; then
    phase "some files did not byte-compile (listed in $log); going on"
  fi
  echo "$want" >"$stamp"
  phase "ready: .venv (ezgh: .venv/bin/ezgh)"
else
  phase "ready: .venv is up to date"
fi
# The project's own sources are installed editable, so pip compiled none of them: compile
# them here (quick when nothing changed), so that `ezgh dev`'s first start, and every start
# in a shell with PYTHONDONTWRITEBYTECODE set, reads bytecode instead of compiling about
# 160 modules (0.2 s and more of its start-up).
.venv/bin/python -m compileall -q -j 0 shared/ezgh_engine sdk/ezgh_workflows >/dev/null 2>&1 || true
