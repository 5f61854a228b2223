#!/usr/bin/env bash
# The official TypeScript SDK (@nodeops-createos/sandbox, the version tests/ts_sdk/package.json
# pins) installed by npm into a cache directory, for tests/ts_sdk: a judge of the emulator
# that we did not write. Mostly network-bound: .ci/run starts it beside the suite, and the
# test waits on the same lock if it is still installing (or installs it itself).
# Without node or npm it says so and leaves the test to skip (no node) or fail (no npm).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "ts-sdk: node or npm is missing: the official TypeScript SDK is not installed"
  exit 0
fi
version=$(node -e 'console.log(require("./tests/ts_sdk/package.json").dependencies["@nodeops-createos/sandbox"])')
dir=${XDG_CACHE_HOME:-$HOME/.cache}/createos-sync/ts-sdk-$version  # as tests/ts_sdk finds it
mkdir -p "$dir"
cp tests/ts_sdk/package.json "$dir/package.json.new"
flock "$dir/.lock" bash -c '
  cd "$1"
  mv package.json.new package.json
  installed=$(node -e "try { console.log(require(\"./node_modules/@nodeops-createos/sandbox/package.json\").version) } catch { }")
  if [[ $installed == "$2" ]]; then
    echo "ts-sdk: @nodeops-createos/sandbox $2 already in $1"
  else
    npm install --no-audit --no-fund --loglevel=error
    echo "ts-sdk: installed @nodeops-createos/sandbox $2 in $1"
  fi
' _ "$dir" "$version"
