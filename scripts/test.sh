#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, API on moto and DynamoDB Local, end to end,
# infra synth and IAM, the console in Chromium, the fault campaign).
#
# Without arguments (the README's command, CI's .ci/run): three pytest-xdist workers
# (`EZGH_TEST_WORKERS`, default 3; 0 for one process), each running whole groups (a module, or
# the tests sharing a runtime: tests/e2e per backend, tests/console), longest first (see
# tests/conftest.py), then tests/infra/test_iam_calls.py on its own,
# checking the AWS requests the e2e suite recorded in the first phase against the
# synthesized IAM policies.
# With arguments, one plain pytest run of them, e.g. `bash scripts/test.sh -m "not e2e"` or
# `bash scripts/test.sh tests/faults --runs 200` (a longer fault campaign).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test-deps.sh  # .venv with the test tools (setup.sh --dev), DynamoDB Local, ...
# Let Python write bytecode (an environment may set PYTHONDONTWRITEBYTECODE): pytest then keeps
# the modules it rewrites for assertions (the test modules, and every module of the pytest
# plugins' packages: schemathesis, hypothesis, anyio, about 360) for the next process (the
# other worker, the IAM phase, the runs with arguments), instead of each rewriting them again:
# 5 s of CPU a process.
unset PYTHONDONTWRITEBYTECODE
pytest=(.venv/bin/python -m pytest -p no:cacheprovider)
if [ "$#" -gt 0 ]; then
  exec "${pytest[@]}" "$@"
fi

# Three on two cores: with two, a third of the cores' time went idle while tests waited on
# subprocesses, sockets and real-time workers. Four saved about 4 % from a clean clone and
# made the machine busy enough to expose a race in a test (docs/benchmarks.md, "The test
# suite"): three stay the default.
workers="${EZGH_TEST_WORKERS:-3}"
parallel=()
if [ "$workers" != 0 ]; then
  parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
fi
calls="$(mktemp -d "${TMPDIR:-/tmp}/ezgh-e2e-calls-XXXXXX")"
trap 'rm -rf "$calls"' EXIT
began=$SECONDS
EZGH_E2E_CALL_LOG="$calls" "${pytest[@]}" "${parallel[@]}" \
  --ignore=tests/infra/test_iam_calls.py
# The first phase ran all of tests/e2e unfiltered (and passed): its recording is complete.
EZGH_IAM_CALL_LOG_REUSE="$calls" "${pytest[@]}" tests/infra/test_iam_calls.py
echo "test.sh: the whole suite passed in $((SECONDS - began)) s"
