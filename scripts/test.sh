#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, API on moto and DynamoDB Local, end to end,
# infra synth and IAM, the console in Chromium, the fault campaign).
# Pass pytest options through, e.g. `bash scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/test-deps.sh
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
