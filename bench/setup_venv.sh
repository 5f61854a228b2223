#!/usr/bin/env bash
# The benchmark environment (git-ignored): this project (editable, with the
# emulator), the official createos-sandbox SDK to compare with, and a profiler.
# The official SDK is never a dependency of the project.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv bench/.venv
bench/.venv/bin/python -m pip install -q --upgrade pip
bench/.venv/bin/python -m pip install -q -e '.[emulator]' createos-sandbox pyinstrument
bench/.venv/bin/python -c 'import createos; print("createos-sandbox", createos.__version__)'
