#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, API on moto and DynamoDB Local, end to end,
# infra synth and IAM, the console in Chromium, the fault campaign).
# Pass pytest options through, e.g. `bash scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# tests/console drive the web console in Debian's Chromium (Playwright never downloads one):
# installed here, not in setup.sh, so the demo does not wait for a browser.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium (Debian's package) for tests/console..."
  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } \
    >/tmp/ezgh-chromium-install.log 2>&1 || { tail -n 20 /tmp/ezgh-chromium-install.log >&2; exit 1; }
fi
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
