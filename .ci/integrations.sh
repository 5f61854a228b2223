#!/usr/bin/env bash
# The integrations tier (tests/integrations): each framework's own judges against the
# adapters in createos_sync/integrations, on the local emulator. The frameworks are heavy
# optional extras, kept out of the default [test] install: each gets a virtual environment
# of its own here (Harbor needs Python >= 3.12). The langflow tier is not one of our
# adapters: it drives a third-party CreateOS backend for Langflow, unchanged, against the
# emulator (issue 38), so it has no extra of ours and installs its framework itself.
#
#   .ci/integrations.sh [--prepare|--test] [inspect|harbor|openai-agents|langflow]...
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
((${#tiers[@]})) || tiers=(inspect harbor openai-agents langflow)

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
extras = [r for name in sys.argv[1:] if name for r in project["optional-dependencies"][name]]
print("\n".join(project["dependencies"] + extras))
EOF
}

langflow_framework() {  # VENV: the Langflow backend, without the Langflow it would pull in
  # langflow-sandbox-createos requires lfx, whose own requirements are most of Langflow
  # (about 580 MB: langchain, onnxruntime...). The backend's modules import only httpx and
  # lfx's logger and sandbox base, so both packages go in with --no-deps, then exactly what
  # those imports need. Pinned: the versions issue 38 was measured with.
  "$1/bin/pip" install -q --no-deps langflow-sandbox-createos==0.2.0 lfx==1.13.0 \
    && "$1/bin/pip" install -q httpx loguru structlog orjson platformdirs typing_extensions
}

run_tier() {  # NAME EXTRA MIN_MINOR TEST_GLOB [FRAMEWORK]: EXTRA may be empty, FRAMEWORK
  # a function that installs what no extra can (it gets the venv)
  local name=$1 extra=$2 minor=$3 glob=$4 framework=${5:-} python venv=".venv-$1"
  if ! python=$(python_at_least "$minor"); then
    echo "integrations/$name: no Python >= 3.$minor found: not run"
    return 0
  fi
  if [[ $mode != test || ! -x $venv/bin/python ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
  fi
  # like the extras, installed again by --test (quick once there: pinned and satisfied)
  if [[ -n $framework ]] && ! "$framework" "$venv" >"$venv/framework.log" 2>&1; then
    cat "$venv/framework.log" >&2
    [[ $mode == prepare ]] || return 1
  fi
  if [[ $mode == prepare ]]; then
    local wanted=()
    mapfile -t wanted < <(requirements "$venv/bin/python" emulator "$extra")
    "$venv/bin/pip" install -q pytest "${wanted[@]}" >"$venv/pip.log" 2>&1 || cat "$venv/pip.log" >&2
    return 0  # --test installs again, and says so if that fails
  fi
  if ! "$venv/bin/pip" install -q -e ".[emulator${extra:+,$extra}]" pytest >"$venv/pip.log" 2>&1; then
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
    langflow) run_tier langflow "" 10 "tests/integrations/test_langflow*.py" langflow_framework ;;
    *) echo "unknown tier $tier (inspect, harbor, openai-agents, langflow)" >&2; exit 2 ;;
  esac
done
