#!/usr/bin/env bash
# The integrations tier (tests/integrations): each framework's own judges against the
# adapters in createos_sync/integrations, on the local emulator. The frameworks are heavy
# optional extras, kept out of the default [test] install: each gets a virtual environment
# of its own here (Harbor needs Python >= 3.12).
#
#   .ci/integrations.sh [--prepare|--test] [inspect|harbor|openai-agents]...
#
# --prepare only makes the environments and installs the frameworks (not the project: no
# write to the source tree, so it can run beside the README's own install); --test then
# installs the project into them (quick once prepared) and runs the tests. Neither: both.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=all
case ${1:-} in
  --prepare) mode=prepare; shift ;;
  --test) mode=test; shift ;;
esac
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

requirements() {  # requirements PYTHON EXTRA...: the runtime's and those extras' requirements
  "$1" - "${@:2}" <<'EOF'
import sys, tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = [r for name in sys.argv[1:] for r in project["optional-dependencies"][name]]
print("\n".join(project["dependencies"] + extras))
EOF
}

run_tier() {  # NAME EXTRA MIN_MINOR TEST_GLOB
  local name=$1 extra=$2 minor=$3 glob=$4 python venv=".venv-$1"
  if ! python=$(python_at_least "$minor"); then
    echo "integrations/$name: no Python >= 3.$minor found: not run"
    return 0
  fi
  if [[ $mode != test || ! -x $venv/bin/python ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
  fi
  if [[ $mode == prepare ]]; then
    local wanted=()
    mapfile -t wanted < <(requirements "$venv/bin/python" emulator "$extra")
    "$venv/bin/pip" install -q pytest "${wanted[@]}" >"$venv/pip.log" 2>&1 || cat "$venv/pip.log" >&2
    return 0  # --test installs again, and says so if that fails
  fi
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
