#!/usr/bin/env bash
# The integrations tier (tests/integrations): each framework's own judges against the
# adapters in createos_sync/integrations, on the local emulator. The frameworks are heavy
# optional extras, kept out of the default [test] install: each gets a virtual environment
# of its own here (Harbor needs Python >= 3.12). Usage: .ci/integrations.sh [inspect|harbor|openai-agents]...
set -euo pipefail
cd "$(dirname "$0")/.."

tiers=("$@")
((${#tiers[@]})) || tiers=(inspect harbor openai-agents)

python_at_least() {  # the first interpreter found that is >= 3.$1
  local candidate
  for candidate in python3 python3.13 python3.12 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c "import sys; sys.exit(sys.version_info < (3, $1))" 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

run_tier() {  # NAME EXTRA MIN_MINOR TEST_GLOB
  local name=$1 extra=$2 minor=$3 glob=$4 python venv=".venv-$1"
  if ! python=$(python_at_least "$minor"); then
    echo "integrations/$name: no Python >= 3.$minor found: not run"
    return 0
  fi
  rm -rf "$venv"
  "$python" -m venv "$venv"
  if ! "$venv/bin/pip" install -q -e ".[emulator,$extra]" pytest >"$venv/pip.log" 2>&1; then
    cat "$venv/pip.log" >&2
    return 1
  fi
  # shellcheck disable=SC2086  # the glob names the tier's test files
  "$venv/bin/python" -m pytest -q -p no:cacheprovider $glob
}

for tier in "${tiers[@]}"; do
  case "$tier" in
    inspect) run_tier inspect inspect 10 "tests/integrations/test_inspect_*.py" ;;
    harbor) run_tier harbor harbor 12 "tests/integrations/test_harbor*.py" ;;
    openai-agents) run_tier agents openai-agents 10 "tests/integrations/test_openai_agents*.py" ;;
    *) echo "unknown tier $tier (inspect, harbor, openai-agents)" >&2; exit 2 ;;
  esac
done
