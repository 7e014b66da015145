#!/usr/bin/env bash
# What only the tests need: .venv with the test tools and the CDK (`setup.sh --dev`), AWS's
# DynamoDB Local, the TypeScript SDK's dev dependencies and Debian's Chromium (quick when
# already there). scripts/test.sh runs it; the demo does not need it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev

# AWS's DynamoDB Local (the `ddblocal` tests): the jar ships in the npm package
# amplify-dynamodb-simulator. `npm pack` fetches that one package (its Node dependencies are
# of no use here); it runs on the machine's Java.
DDB_LOCAL_VERSION=2.9.30
ddb_dir=.venv/dynamodb-local
ddb_stamp="$ddb_dir/.version"
if [ "$(cat "$ddb_stamp" 2>/dev/null)" != "$DDB_LOCAL_VERSION" ]; then
  for tool in java npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "setup: DynamoDB Local needs '$tool' on PATH (Java 11+ and npm); install it" \
        "(Debian: apt-get install default-jre-headless npm) and run setup again" >&2
      exit 1
    fi
  done
  echo "installing DynamoDB Local $DDB_LOCAL_VERSION into $ddb_dir..."
  rm -rf "$ddb_dir"
  mkdir -p "$ddb_dir/pack"
  if ! npm pack --silent --pack-destination "$ddb_dir/pack" \
       "amplify-dynamodb-simulator@$DDB_LOCAL_VERSION" >"$ddb_dir/install.log" 2>&1; then
    cat "$ddb_dir/install.log" >&2
    echo "setup: could not fetch amplify-dynamodb-simulator with npm" >&2
    exit 1
  fi
  tar -xzf "$ddb_dir"/pack/*.tgz -C "$ddb_dir" package/emulator
  mv "$ddb_dir/package/emulator" "$ddb_dir/emulator"
  rm -rf "$ddb_dir/pack" "$ddb_dir/package"
  if [ ! -f "$ddb_dir/emulator/DynamoDBLocal.jar" ]; then
    echo "setup: the npm package has no emulator/DynamoDBLocal.jar" >&2
    exit 1
  fi
  echo "$DDB_LOCAL_VERSION" >"$ddb_stamp"
fi

# The TypeScript SDK's compiler and Node's types (sdk-ts's devDependencies, its only
# dependencies), exactly as sdk-ts/package-lock.json pins them; tests/ts type-checks, builds
# and runs its tests with them. Again only when the lockfile changed.
ts_stamp=sdk-ts/node_modules/.ezgh-lock
ts_lock="$(sha256sum sdk-ts/package-lock.json | cut -d' ' -f1)"
if [ "$(cat "$ts_stamp" 2>/dev/null)" != "$ts_lock" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: the TypeScript SDK's tests need Node.js 20+ and npm on PATH" \
      "(Debian: apt-get install nodejs npm); install them and run setup again" >&2
    exit 1
  fi
  echo "installing the TypeScript SDK's dev dependencies into sdk-ts/node_modules..."
  if ! (cd sdk-ts && npm ci --no-audit --no-fund --loglevel=error) >/tmp/ezgh-sdk-ts-install.log 2>&1; then
    cat /tmp/ezgh-sdk-ts-install.log >&2
    echo "setup: npm ci in sdk-ts failed" >&2
    exit 1
  fi
  echo "$ts_lock" >"$ts_stamp"
fi

# tests/console drive the web console in Debian's Chromium (Playwright never downloads one).
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium (Debian's package) for tests/console..."
  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } \
    >/tmp/ezgh-chromium-install.log 2>&1 || { tail -n 20 /tmp/ezgh-chromium-install.log >&2; exit 1; }
fi
