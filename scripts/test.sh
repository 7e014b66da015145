#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, API on moto, end to end, infra synth).
# Pass pytest options through, e.g. `bash scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
