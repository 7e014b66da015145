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
