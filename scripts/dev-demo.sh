#!/usr/bin/env bash
# Set up, start `ezgh dev` with the onboarding example, run it step by step, and leave the
# engine running (Ctrl-C stops it). `--once` stops the engine after the run instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ONBOARDING_COOLDOWN="${ONBOARDING_COOLDOWN:-5s}"  # the docs' 3 days, shortened to watch it end
port="${EZGH_PORT:-8288}"
echo "dev-demo: starting ezgh dev on http://127.0.0.1:$port with examples.onboarding:app..."
.venv/bin/ezgh dev --port "$port" --app examples.onboarding:app &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev 2>/dev/null' EXIT
for _ in $(seq 1 200); do
  if curl -fsS "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1 && [ -f .ezgh/dev.env ] \
     && .venv/bin/python -m examples.follow --ready >/dev/null 2>&1; then
    break
  fi
  kill -0 $dev 2>/dev/null || { echo "ezgh dev exited" >&2; exit 1; }
  sleep 0.1
done
echo "dev-demo: ready; running the onboarding workflow step by step"
.venv/bin/python -m examples.follow
if [ "${1:-}" != "--once" ]; then
  echo
  echo "ezgh dev is still running on http://127.0.0.1:$port (credentials in .ezgh/dev.env). Ctrl-C stops it."
  wait $dev
fi
